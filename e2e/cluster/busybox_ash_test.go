package cluster

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourcePackageLists: the system's binary package sources become
// source package sources, in both formats, and sources of another type are
// copied unchanged.
func TestSourcePackageLists(t *testing.T) {
	etc, dir := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(etc, "sources.list.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"sources.list":                  "# comment\ndeb http://mirror.invalid/debian bookworm main\ndeb-src http://mirror.invalid/debian bookworm main\n",
		"sources.list.d/debian.sources": "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm\nComponents: main\n\nTypes: deb deb-src\nURIs: http://security.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n",
		"sources.list.d/other.sources":  "Types: deb-src\nURIs: http://other.invalid/\nSuites: x\n",
		"sources.list.d/extra.list":     "deb [arch=amd64] http://extra.invalid/ stable main\n",
		"sources.list.d/ignored.save":   "deb http://saved.invalid/ stable main\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := sourcePackageLists(etc, dir)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d binary package sources converted, want 4", n)
	}
	want := map[string]string{
		"sources.list":                  "# comment\ndeb-src http://mirror.invalid/debian bookworm main\ndeb-src http://mirror.invalid/debian bookworm main\n",
		"sources.list.d/debian.sources": "Types: deb-src\nURIs: http://mirror.invalid/debian\nSuites: bookworm\nComponents: main\n\nTypes: deb-src\nURIs: http://security.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n",
		"sources.list.d/other.sources":  "Types: deb-src\nURIs: http://other.invalid/\nSuites: x\n",
		"sources.list.d/extra.list":     "deb-src [arch=amd64] http://extra.invalid/ stable main\n",
	}
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if string(got) != w {
			t.Errorf("%s:\n%s\nwant:\n%s", name, got, w)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sources.list.d", "ignored.save")); err == nil {
		t.Error("ignored.save (not a sources file) was copied")
	}
}

// TestExtractTarball unpacks a source tarball without its top directory,
// and refuses an entry that would land outside the target.
func TestExtractTarball(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, entries []tar.Header, data map[string]string) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		gz := gzip.NewWriter(f)
		tw := tar.NewWriter(gz)
		for _, h := range entries {
			h.Size = int64(len(data[h.Name]))
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(data[h.Name])); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []interface{ Close() error }{tw, gz, f} {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	good := write("busybox_1.0.orig.tar.gz", []tar.Header{
		{Name: "busybox-1.0/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "busybox-1.0/Makefile", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "busybox-1.0/scripts/gen.sh", Typeflag: tar.TypeReg, Mode: 0o755},
		{Name: "busybox-1.0/scripts/link", Typeflag: tar.TypeSymlink, Linkname: "gen.sh"},
	}, map[string]string{"busybox-1.0/Makefile": "all:\n", "busybox-1.0/scripts/gen.sh": "#!/bin/sh\n"})
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := extractTarball(good, out); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(out, "Makefile")); err != nil || string(data) != "all:\n" {
		t.Errorf("Makefile: %q, %v", data, err)
	}
	if fi, err := os.Stat(filepath.Join(out, "scripts", "gen.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("scripts/gen.sh: %v, %v; want mode 0755", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(out, "scripts", "link")); err != nil || target != "gen.sh" {
		t.Errorf("scripts/link -> %q, %v; want gen.sh", target, err)
	}
	if tarball, err := findOrigTarball(dir); err != nil || tarball != good {
		t.Errorf("findOrigTarball = %q, %v; want %s", tarball, err, good)
	}

	evil := write("evil.tar.gz", []tar.Header{
		{Name: "top/../../escape", Typeflag: tar.TypeReg, Mode: 0o644},
	}, nil)
	out2 := filepath.Join(dir, "out2")
	if err := os.MkdirAll(out2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := extractTarball(evil, out2); err == nil || !strings.Contains(err.Error(), "leaves the directory") {
		t.Errorf("extract an entry outside the directory: err = %v", err)
	}
	xz := filepath.Join(dir, "x.tar.xz")
	if err := os.WriteFile(xz, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := extractTarball(xz, out2); err == nil || !strings.Contains(err.Error(), "not a .tar.bz2 or .tar.gz") {
		t.Errorf("extract a .tar.xz: err = %v, want a refusal", err)
	}
}
