package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/internal/testenv"
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

func TestCgroupCPUFile(t *testing.T) {
	v1 := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
`
	v2 := `25 1 8:1 / / rw - ext4 /dev/sda1 rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
`
	for _, c := range []struct {
		name, mountinfo, want string
		v2                    bool
	}{
		// cgroup v1 wins over a unified hierarchy mounted beside it (no
		// controllers there on a hybrid host).
		{"v1", v1, "/sys/fs/cgroup/cpu,cpuacct/nb-1-containerd/cpuacct.usage", false},
		{"v2", v2, "/sys/fs/cgroup/nb-1-containerd/cpu.stat", true},
	} {
		file, isV2, err := cgroupCPUFile(parseMountInfo([]byte(c.mountinfo)), "/nb-1-containerd")
		if err != nil || file != c.want || isV2 != c.v2 {
			t.Errorf("%s: cgroupCPUFile = %q, %v, %v; want %q, %v", c.name, file, isV2, err, c.want, c.v2)
		}
	}
	if _, _, err := cgroupCPUFile(parseMountInfo([]byte("25 1 8:1 / / rw - ext4 /dev/sda1 rw\n")), "/x"); err == nil {
		t.Error("no cgroup mount: no error")
	}
}

func TestParseCgroupCPU(t *testing.T) {
	if d, err := parseCgroupCPU([]byte("1500000000\n"), false); err != nil || d != 1500*time.Millisecond {
		t.Errorf("v1: %s, %v; want 1.5s", d, err)
	}
	if d, err := parseCgroupCPU([]byte("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"), true); err != nil || d != 2500*time.Millisecond {
		t.Errorf("v2: %s, %v; want 2.5s", d, err)
	}
	for _, c := range []struct {
		data string
		v2   bool
	}{{"", false}, {"12a\n", false}, {"user_usec 1\n", true}, {"usage_usec x\n", true}} {
		if _, err := parseCgroupCPU([]byte(c.data), c.v2); err == nil {
			t.Errorf("parseCgroupCPU(%q, v2 %v): no error", c.data, c.v2)
		}
	}
}

// TestCgroupCPUOfTheRootCgroup reads this machine's root cgroup, which
// every process's CPU time is charged to: it grows while this test burns
// CPU.
func TestCgroupCPUOfTheRootCgroup(t *testing.T) {
	before, err := CgroupCPU("/")
	if err != nil {
		testenv.Unavailable(t, "no cgroup hierarchy to read: %v", err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := CgroupCPU("/")
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("the root cgroup's CPU went from %s to %s while this test spun", before, after)
	}
	if _, err := CgroupCPU("/no-such-cgroup-of-nodebench"); err == nil {
		t.Error("a missing cgroup: no error")
	}
}

// TestJoinCgroupMovesTheProcess moves a child process into a cgroup of its
// own and reads where its CPU is charged.
func TestJoinCgroupMovesTheProcess(t *testing.T) {
	name := fmt.Sprintf("nodekit-test-join-%d", os.Getpid())
	remove, err := CreateCgroup(name)
	if err != nil {
		testenv.Unavailable(t, "cannot make a cgroup (root needed): %v", err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err := remove(); err != nil {
			t.Error(err)
		}
	}()
	if err := joinCgroup(name, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[2] != "/"+name {
			t.Errorf("hierarchy %s:%s holds the process in %s, want /%s", parts[0], parts[1], parts[2], name)
		}
	}
}
