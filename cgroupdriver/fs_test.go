package cgroupdriver

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDetectV1CoMountedHierarchies(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"cpu,cpuacct", "memory", "pids"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink("cpu,cpuacct", filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	writeTestFile(t, filepath.Join(root, "not-a-hierarchy"), "a file")
	l, err := detectLayout(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	resolved, _ := filepath.EvalSymlinks(root)
	want := []string{filepath.Join(resolved, "cpu,cpuacct"), filepath.Join(resolved, "memory"), filepath.Join(resolved, "pids")}
	if l.version != 1 || !l.emulated || !slices.Equal(l.dirs, want) {
		t.Errorf("layout = v%d emulated=%v dirs %v, want v1 emulated dirs %v", l.version, l.emulated, l.dirs, want)
	}
	if l.controllers["cpu"] != want[0] || l.controllers["cpuacct"] != want[0] {
		t.Errorf("controllers = %v", l.controllers)
	}

	// Writing through the co-mounted hierarchy creates one cgroup.
	tr := newTree(root, 0)
	if err := tr.create("/kubepods"); err != nil {
		t.Fatal(err)
	}
	if err := tr.set("/kubepods", ResourceConfig{CPUShares: u64(100)}); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, root, map[string]string{"cpu,cpuacct/kubepods/cpu.shares": "100", "cpuacct/kubepods/cpu.shares": "100"})
	if err := tr.remove("/kubepods"); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(root, "cpu,cpuacct/kubepods")) {
		t.Error("not removed")
	}
}

func TestDetectErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	writeTestFile(t, file, "")
	for name, tc := range map[string]struct {
		root    string
		version int
		want    string
	}{
		"missing root":           {filepath.Join(t.TempDir(), "none"), 0, "no such file"},
		"root is a file":         {file, 0, "not a directory"},
		"v2 without controllers": {t.TempDir(), 2, "cgroup.controllers"},
		"v1 without cpu":         {t.TempDir(), 1, `controller "cpu" is not mounted`},
	} {
		if _, err := detectLayout(tc.root, tc.version); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: detect = %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestTreeRefusesUncleanPaths(t *testing.T) {
	tr := newTree(fakeV1Tree(t), 0)
	for _, p := range []string{"kubepods", "/kubepods/../..", "/kubepods/", "//kubepods"} {
		if err := tr.create(p); err == nil {
			t.Errorf("create(%q) succeeded", p)
		}
	}
	if err := tr.remove("/"); err == nil {
		t.Error("remove(/) succeeded")
	}
}

func TestEnableControllersKeepsEnabled(t *testing.T) {
	root := fakeV2Tree(t)
	writeTestFile(t, filepath.Join(root, "cgroup.subtree_control"), "cpu memory\n")
	tr := newTree(root, 0)
	if err := tr.create("/a/b"); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, root, map[string]string{
		"cgroup.subtree_control":     "cpu memory cpuset io hugetlb pids",
		"a/cgroup.subtree_control":   "cpuset cpu io memory hugetlb pids",
		"a/b/cgroup.subtree_control": "<missing>",
	})
}

func TestReadMissingFilesAreNil(t *testing.T) {
	root := fakeV1Tree(t)
	tr := newTree(root, 0)
	if err := tr.create("/x"); err != nil {
		t.Fatal(err)
	}
	rc, err := tr.read("/x")
	if err != nil || rc.String() != "{}" {
		t.Errorf("read = %s, %v; want nothing", rc, err)
	}
	writeTestFile(t, filepath.Join(root, "memory/x/memory.limit_in_bytes"), "lots\n")
	if _, err := tr.read("/x"); err == nil || !strings.Contains(err.Error(), "memory.limit_in_bytes") {
		t.Errorf("read of a garbled file = %v", err)
	}
	writeTestFile(t, filepath.Join(root, "pids/x/cgroup.procs"), "12\nnot-a-pid\n")
	if _, err := tr.pids("/x"); err == nil || !strings.Contains(err.Error(), "not-a-pid") {
		t.Errorf("pids of a garbled cgroup.procs = %v", err)
	}
}
