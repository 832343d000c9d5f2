package machine

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

func fixtureRoots(t *testing.T, name string) Roots {
	t.Helper()
	base := filepath.Join("testdata", name)
	return Roots{
		HostRoot: base,
		ProcRoot: filepath.Join(base, "proc"),
		SysRoot:  filepath.Join(base, "sys"),
		RootDir:  t.TempDir(),
	}
}

func statfsCapacity(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Frsize
}

func TestReadFull(t *testing.T) {
	roots := fixtureRoots(t, "full")
	m, err := Read(roots)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := &Info{
		NumCores:       5, // online 0-7 ∩ cpuset 0-3,6
		MemoryCapacity: 16303428 * 1024,
		SwapCapacity:   2097148 * 1024,
		HugePages: []HugePages{
			{PageSize: 2 << 20, NumPages: 512},
			{PageSize: 1 << 30, NumPages: 1},
		},
		EphemeralStorageCapacity: statfsCapacity(t, roots.RootDir),
		MachineID:                "b6a5c5e0f2d14a6c9d1e3f4a5b6c7d8e",
		SystemUUID:               "4C4C4544-0042-3510-8052-B3C04F4E3732",
		BootID:                   "5c3b1d7e-8a42-4f6b-9e0d-2a1c3b4d5e6f",
		KernelVersion:            "6.1.0-18-amd64",
		OSImage:                  "Debian GNU/Linux 12 (bookworm)",
		RunningInUserNamespace:   false,
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("Read(full) =\n%+v\nwant\n%+v", m, want)
	}
	if m.EphemeralStorageCapacity <= 0 {
		t.Errorf("ephemeral storage capacity %d, want > 0", m.EphemeralStorageCapacity)
	}
}

func TestReadMinimal(t *testing.T) {
	m, err := Read(fixtureRoots(t, "minimal"))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if m.NumCores != 2 {
		t.Errorf("NumCores = %d, want 2 (no cpuset: every online CPU)", m.NumCores)
	}
	if m.MachineID != "0123456789abcdef0123456789abcdef" {
		t.Errorf("MachineID = %q, want the dbus machine ID", m.MachineID)
	}
	if m.SystemUUID != "" || m.HugePages != nil || m.SwapCapacity != 0 {
		t.Errorf("SystemUUID %q, HugePages %v, Swap %d: want empty", m.SystemUUID, m.HugePages, m.SwapCapacity)
	}
	if m.OSImage != "Linux" {
		t.Errorf("OSImage = %q, want Linux without os-release", m.OSImage)
	}
	if !m.RunningInUserNamespace {
		t.Error("RunningInUserNamespace = false for a mapped uid range")
	}
}

// brokenRoots copies the full fixture to a temp dir and applies edit.
func brokenRoots(t *testing.T, edit func(dir string)) Roots {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("testdata", "full")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	edit(dir)
	return Roots{HostRoot: dir, ProcRoot: filepath.Join(dir, "proc"), SysRoot: filepath.Join(dir, "sys"), RootDir: dir}
}

func TestReadErrors(t *testing.T) {
	write := func(path, content string) func(string) {
		return func(dir string) {
			if err := os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	remove := func(path string) func(string) {
		return func(dir string) {
			if err := os.RemoveAll(filepath.Join(dir, path)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name string
		edit func(dir string)
		want string
	}{
		{"no online file", remove("sys/devices/system/cpu/online"), "read online CPUs"},
		{"bad online list", write("sys/devices/system/cpu/online", "0-x\n"), "parse online CPUs"},
		{"reversed range", write("sys/devices/system/cpu/online", "3-1\n"), "bad CPU range"},
		{"cpuset outside online", write("proc/self/status", "Cpus_allowed_list:\t12-13\n"), "no online CPU"},
		{"bad cpuset", write("proc/self/status", "Cpus_allowed_list:\tfoo\n"), "parse Cpus_allowed_list"},
		{"no meminfo", remove("proc/meminfo"), "read memory info"},
		{"no MemTotal", write("proc/meminfo", "MemFree: 1 kB\n"), "no MemTotal"},
		{"MemTotal not kB", write("proc/meminfo", "MemTotal: 1 MB\n"), "is not"},
		{"bad hugepage count", write("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "many\n"), "bad value"},
		{"bad hugepage dir", func(dir string) {
			if err := os.MkdirAll(filepath.Join(dir, "sys/kernel/mm/hugepages/hugepages-xkB"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "bad huge page directory"},
		{"no boot id", remove("proc/sys/kernel/random/boot_id"), "read boot ID"},
		{"empty kernel version", write("proc/sys/kernel/osrelease", "\n"), "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(brokenRoots(t, tc.edit))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("missing root dir", func(t *testing.T) {
		roots := fixtureRoots(t, "full")
		roots.RootDir = filepath.Join(roots.RootDir, "missing")
		_, err := Read(roots)
		if err == nil || !strings.Contains(err.Error(), "root directory") {
			t.Fatalf("Read error = %v, want a root directory error", err)
		}
	})
}

func TestParseCPUList(t *testing.T) {
	got, err := parseCPUList("0-2,5,7-8")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]bool{0: true, 1: true, 2: true, 5: true, 7: true, 8: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseCPUList = %v, want %v", got, want)
	}
	for _, bad := range []string{"-1", "a", "1-", "0-99999999", "1,,2"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) succeeded", bad)
		}
	}
}

func TestCached(t *testing.T) {
	var calls atomic.Int32
	fail := true
	cached := Cached(func() (*Info, error) {
		calls.Add(1)
		if fail {
			return nil, errors.New("not yet")
		}
		return &Info{NumCores: 3}, nil
	})
	if _, err := cached(); err == nil {
		t.Fatal("first call succeeded")
	}
	fail = false
	for range 3 {
		m, err := cached()
		if err != nil || m.NumCores != 3 {
			t.Fatalf("cached() = %v, %v", m, err)
		}
	}
	if calls.Load() != 2 {
		t.Errorf("read called %d times, want 2 (once failing, once succeeding)", calls.Load())
	}
}
