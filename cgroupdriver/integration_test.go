package cgroupdriver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/internal/testenv"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// requireRealCgroupfs returns the host's cgroup v1 layout, or stops the
// test when this host cannot run it: outside CI (CI empty) with a skip
// that says why, inside CI with a failure, so CI never skips it silently.
func requireRealCgroupfs(t *testing.T) *layout {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		testenv.Unavailable(t, "cgroup integration test needs %s", why)
	}
	if os.Geteuid() != 0 {
		missing("root (to create cgroups)")
	}
	l, err := detectLayout(defaultCgroupFSRoot, 0)
	if err != nil {
		missing("a cgroup filesystem at " + defaultCgroupFSRoot + ": " + err.Error())
	}
	if l.emulated {
		missing("mounted cgroup hierarchies at " + defaultCgroupFSRoot)
	}
	if l.version != 1 {
		missing("cgroup v1 hierarchies (this host is v2; the v2 path is unit-tested on a fake tree)")
	}
	return l
}

// TestIntegrationRealCgroupfsV1 creates a pod cgroup under a test-only
// cgroup root in the host's /sys/fs/cgroup, checks the limits in the
// kernel's files, and removes everything again.
func TestIntegrationRealCgroupfsV1(t *testing.T) {
	l := requireRealCgroupfs(t)
	t.Logf("cgroup v1 hierarchies: %v", l.dirs)
	ctx := testContext(t)
	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatal(err)
	}
	testRoot := "nodekit-test-" + hex.EncodeToString(suffix)
	rootName := Name{testRoot}
	m := newTestManager(t, Options{
		CgroupRoot:      "/" + testRoot,
		PodPidsLimit:    64,
		NodeAllocatable: func() v1.ResourceList { return rl("1", "1Gi") },
		ActivePods:      func() []*v1.Pod { return []*v1.Pod{burstablePod} },
	})
	d := m.Driver()
	t.Cleanup(func() {
		if err := d.Destroy(ctx, rootName); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, dir := range l.dirs {
			if exists(filepath.Join(dir, testRoot)) {
				t.Errorf("%s/%s is left behind", dir, testRoot)
			}
		}
	})

	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	cpu, mem, pids := l.controllers["cpu"], l.controllers["memory"], l.controllers["pids"]
	qos := filepath.Join(testRoot, "kubepods")
	expectFiles(t, "/", map[string]string{
		filepath.Join(cpu, qos, "cpu.shares"):                     "1024",
		filepath.Join(mem, qos, "memory.limit_in_bytes"):          "1073741824",
		filepath.Join(cpu, qos, "burstable", "cpu.shares"):        "256",
		filepath.Join(cpu, qos, "besteffort", "cpu.shares"):       "2",
		filepath.Join(cpu, qos, "besteffort", "cpu.cfs_quota_us"): "-1",
	})
	if cpuset, ok := l.controllers["cpuset"]; ok {
		// The kernel leaves a new cpuset empty; the driver copies the parent's.
		want := readTestFile(t, filepath.Join(cpuset, "cpuset.cpus"))
		if got := readTestFile(t, filepath.Join(cpuset, qos, "burstable", "cpuset.cpus")); got != want {
			t.Errorf("cpuset.cpus = %q, want the root's %q", got, want)
		}
	}

	for _, pod := range []*v1.Pod{guaranteedPod, burstablePod, bestEffortPod} {
		parent, err := m.EnsurePod(ctx, pod)
		if err != nil {
			t.Fatalf("EnsurePod(%s): %v", pod.Name, err)
		}
		if !strings.HasPrefix(parent, "/"+testRoot+"/kubepods/") {
			t.Errorf("EnsurePod(%s) = %q", pod.Name, parent)
		}
	}
	g := filepath.Join(qos, "podg-1")
	b := filepath.Join(qos, "burstable", "podb-1")
	expectFiles(t, "/", map[string]string{
		filepath.Join(cpu, g, "cpu.shares"):            "512",
		filepath.Join(cpu, g, "cpu.cfs_period_us"):     "100000",
		filepath.Join(cpu, g, "cpu.cfs_quota_us"):      "50000",
		filepath.Join(mem, g, "memory.limit_in_bytes"): "134217728",
		filepath.Join(pids, g, "pids.max"):             "64",
		filepath.Join(cpu, b, "cpu.shares"):            "256",
		filepath.Join(cpu, b, "cpu.cfs_quota_us"):      "100000",
		filepath.Join(mem, b, "memory.limit_in_bytes"): "268435456",
	})
	rc, err := d.Read(ctx, Name{testRoot, "kubepods", "besteffort", "pode-1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (ResourceConfig{CPUShares: u64(2), CPUQuota: i64(-1), CPUPeriod: u64(100000), Memory: i64(-1), PidsLimit: i64(64)}); rc.String() != want.String() {
		t.Errorf("Read(besteffort pod) = %s, want %s", rc, want)
	}
	for _, dir := range l.dirs {
		if !exists(filepath.Join(dir, g)) {
			t.Errorf("%s: the pod cgroup is missing from this hierarchy", dir)
		}
	}

	// The kernel refuses a quota above the parent's: the error says which
	// file and value.
	err = d.Update(ctx, Name{testRoot, "kubepods", "podg-1"}, ResourceConfig{CPUQuota: i64(25000), CPUPeriod: u64(100000)})
	if err != nil {
		t.Fatalf("lower the pod quota: %v", err)
	}
	child := Name{testRoot, "kubepods", "podg-1", "ctr"}
	err = d.Create(ctx, child, ResourceConfig{CPUQuota: i64(50000), CPUPeriod: u64(100000)})
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "cpu.cfs_quota_us") {
		t.Errorf("a quota above the parent's = %v, want EINVAL naming cpu.cfs_quota_us", err)
	}
	// Shrinking the period first would put the child above its parent
	// (20000/50000 > 25000/100000): the kernel refuses it until the quota is
	// lowered, and the driver retries the period after the quota.
	if err := d.Update(ctx, child, ResourceConfig{CPUQuota: i64(20000), CPUPeriod: u64(100000)}); err != nil {
		t.Fatalf("set the child's quota: %v", err)
	}
	if err := d.Update(ctx, child, ResourceConfig{CPUQuota: i64(10000), CPUPeriod: u64(50000)}); err != nil {
		t.Fatalf("shrink the child's period and quota: %v", err)
	}
	expectFiles(t, "/", map[string]string{
		filepath.Join(cpu, g, "ctr", "cpu.cfs_quota_us"):  "10000",
		filepath.Join(cpu, g, "ctr", "cpu.cfs_period_us"): "50000",
	})

	// A process left in a pod cgroup is killed by RemovePod.
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	for _, c := range []string{"cpu", "memory", "pids"} {
		procs := filepath.Join(l.controllers[c], b, "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move the sleeper into %s: %v", procs, err)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	err = m.RemovePod(ctx, "b-1")
	<-waited // the sleeper was killed and is reaped, so its cgroup empties
	if err != nil {
		// The kernel may still hold the dying process: retry once reaped.
		if !errors.Is(err, unix.EBUSY) {
			t.Fatalf("RemovePod with a process: %v", err)
		}
		if err := m.RemovePod(ctx, "b-1"); err != nil {
			t.Fatalf("RemovePod after the process exited: %v", err)
		}
	}
	for _, dir := range l.dirs {
		if exists(filepath.Join(dir, b)) {
			t.Errorf("%s: the burstable pod cgroup is left behind", dir)
		}
	}

	pods, err := m.ListPods(ctx)
	if err != nil || len(pods) != 2 {
		t.Fatalf("ListPods = %v, %v; want g-1 and e-1", pods, err)
	}
	for uid := range pods {
		if err := m.RemovePod(ctx, uid); err != nil {
			t.Fatalf("RemovePod(%s): %v", uid, err)
		}
	}
	if pods, err := m.ListPods(ctx); len(pods) != 0 || err != nil {
		t.Errorf("ListPods after removal = %v, %v", pods, err)
	}
}
