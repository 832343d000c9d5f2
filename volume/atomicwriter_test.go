package volume

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

var tsDirPattern = regexp.MustCompile(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`)

func dataTarget(t *testing.T, dir string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	return target
}

func TestAtomicWriterLayout(t *testing.T) {
	// The modes must hold whatever the umask.
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	w, err := NewAtomicWriter(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	var permsCalled []string
	setPerms := func(ts string) error { permsCalled = append(permsCalled, ts); return nil }
	payload := map[string]FileProjection{
		"a":          {Data: []byte("one"), Mode: 0o644},
		"dir/b":      {Data: []byte("two"), Mode: 0o400},
		"dir/sub/c":  {Data: []byte("three"), Mode: 0o640},
		"./clean/me": {Data: []byte("four"), Mode: 0o600},
	}
	if err := w.Write(context.Background(), payload, setPerms); err != nil {
		t.Fatal(err)
	}
	ts := dataTarget(t, dir)
	if !tsDirPattern.MatchString(ts) {
		t.Errorf("..data -> %q, want a timestamped directory like ..2006_01_02_15_04_05.123", ts)
	}
	if len(permsCalled) != 1 || permsCalled[0] != ts {
		t.Errorf("setPerms called with %q, want [%s]", permsCalled, ts)
	}
	if m := fileMode0(t, filepath.Join(dir, ts)).Perm(); m != 0o755 {
		t.Errorf("timestamped dir mode %v, want 0755", m)
	}
	for link, want := range map[string]string{"a": "..data/a", "dir": "..data/dir", "clean": "..data/clean"} {
		got, err := os.Readlink(filepath.Join(dir, link))
		if err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %q", link, got, err, want)
		}
	}
	for p, want := range map[string]string{"a": "one", "dir/b": "two", "dir/sub/c": "three", "clean/me": "four"} {
		if got := readFile(t, filepath.Join(dir, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for p, want := range map[string]os.FileMode{"a": 0o644, "dir/b": 0o400, "dir/sub/c": 0o640} {
		if got := fileMode0(t, filepath.Join(dir, p)).Perm(); got != want {
			t.Errorf("mode of %s = %v, want %v", p, got, want)
		}
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != strings.Join([]string{ts, "..data", "a", "clean", "dir"}, ",") {
		t.Errorf("directory holds %v", names)
	}
}

func TestAtomicWriterUpdate(t *testing.T) {
	dir := t.TempDir()
	w, _ := NewAtomicWriter(dir, "test")
	ctx := context.Background()
	write := func(p map[string]FileProjection) {
		t.Helper()
		if err := w.Write(ctx, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "b": {Data: []byte("2"), Mode: 0o644}, "d/x": {Data: []byte("3"), Mode: 0o644}})
	first := dataTarget(t, dir)

	// Same content: nothing rewritten.
	write(map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "b": {Data: []byte("2"), Mode: 0o644}, "d/x": {Data: []byte("3"), Mode: 0o644}})
	if got := dataTarget(t, dir); got != first {
		t.Errorf("unchanged payload rewrote the data directory: %s -> %s", first, got)
	}

	// A lost visible link is recreated without a rewrite.
	os.Remove(filepath.Join(dir, "a"))
	write(map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "b": {Data: []byte("2"), Mode: 0o644}, "d/x": {Data: []byte("3"), Mode: 0o644}})
	if got := dataTarget(t, dir); got != first || readFile(t, filepath.Join(dir, "a")) != "1" {
		t.Errorf("link not recreated in place: ..data -> %s", got)
	}

	// Changed content, b and d gone, c new.
	write(map[string]FileProjection{"a": {Data: []byte("10"), Mode: 0o644}, "c": {Data: []byte("30"), Mode: 0o644}})
	second := dataTarget(t, dir)
	if second == first {
		t.Fatal("changed payload did not get a new data directory")
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("old data directory %s still there (%v)", first, err)
	}
	for _, gone := range []string{"b", "d"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("visible path %s of a removed key still there", gone)
		}
	}
	if readFile(t, filepath.Join(dir, "a")) != "10" || readFile(t, filepath.Join(dir, "c")) != "30" {
		t.Error("new content not visible")
	}
}

func TestAtomicWriterInvalidPaths(t *testing.T) {
	dir := t.TempDir()
	w, _ := NewAtomicWriter(dir, "test")
	long := strings.Repeat("x", 256)
	for p, want := range map[string]string{
		"":                                `invalid path: must not be empty: ""`,
		"/abs":                            "invalid path: must be relative path: /abs",
		"a/../b":                          "invalid path: must not contain '..': a/../b",
		"..data":                          "invalid path: must not start with '..': ..data",
		long:                              "invalid path: filenames must be less than or equal to 255 characters",
		"a/" + long:                       "invalid path: filenames must be less than or equal to 255 characters",
		strings.Repeat("ab/", 1366) + "c": "invalid path: must be less than or equal to 4096 characters",
	} {
		err := w.Write(context.Background(), map[string]FileProjection{p: {Data: []byte("x"), Mode: 0o644}}, nil)
		if err == nil || err.Error() != want {
			t.Errorf("path %.20q: error %v, want %q", p, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "..data")); !os.IsNotExist(err) {
		t.Error("an invalid payload wrote something")
	}
	if _, err := NewAtomicWriter(filepath.Join(dir, "missing"), "test"); err == nil {
		t.Error("NewAtomicWriter accepted a missing directory")
	}
}
