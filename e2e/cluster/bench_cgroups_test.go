package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCreateCgroupRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "/abs"} {
		if _, err := CreateCgroup(name); err == nil {
			t.Errorf("CreateCgroup(%q): no error", name)
		}
	}
}

func TestInheritCgroupValue(t *testing.T) {
	parent := t.TempDir()
	child := filepath.Join(parent, "child")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(parent, "cpuset.cpus"), "0-1\n")
	write(filepath.Join(child, "cpuset.cpus"), "\n")
	write(filepath.Join(parent, "cpuset.mems"), "0\n")
	write(filepath.Join(child, "cpuset.mems"), "1\n")
	for _, file := range []string{"cpuset.cpus", "cpuset.mems", "cpu.shares"} {
		if err := inheritCgroupValue(child, file); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	for file, want := range map[string]string{"cpuset.cpus": "0-1\n", "cpuset.mems": "1\n"} {
		got, err := os.ReadFile(filepath.Join(child, file))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q (empty values inherit, set ones stay)", file, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(child, "cpu.shares")); !os.IsNotExist(err) {
		t.Errorf("a file the cgroup lacks was created: %v", err)
	}
}

func TestRemoveCgroupTree(t *testing.T) {
	root := filepath.Join(t.TempDir(), "nodebench")
	for _, dir := range []string{"kubepods/besteffort/pod1", "kubepods/burstable"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeCgroupTree(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("%s still exists: %v", root, err)
	}
	if err := removeCgroupTree(root); err != nil {
		t.Errorf("removing a missing tree: %v", err)
	}
	// A cgroup that cannot go (here: a directory holding a file, as a
	// cgroup holding processes) is reported.
	if err := os.MkdirAll(filepath.Join(root, "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "busy", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeCgroupTree(root); err == nil {
		t.Error("a tree that cannot be removed: no error")
	}
}
