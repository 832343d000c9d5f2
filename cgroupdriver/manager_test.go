package cgroupdriver

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"
	testclock "k8s.io/utils/clock/testing"
)

// podSet is a concurrency-safe ActivePods source.
type podSet struct {
	mu   sync.Mutex
	pods []*v1.Pod
}

func (s *podSet) get() []*v1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*v1.Pod(nil), s.pods...)
}

func (s *podSet) setPods(pods ...*v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

func allocatable() v1.ResourceList {
	l := rl("2", "4Gi")
	l[pidResource] = resource.MustParse("10000")
	return l
}

var (
	guaranteedPod = testPod("g-1", ctr(rl("500m", "128Mi"), rl("500m", "128Mi")))
	burstablePod  = testPod("b-1", ctr(rl("250m", "64Mi"), rl("1", "256Mi")))
	bestEffortPod = testPod("e-1", ctr(nil, nil))
)

// testContext returns a context whose logger writes to t.
func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

func newTestManager(t *testing.T, o Options) *Manager {
	t.Helper()
	m, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func TestManagerCgroupfsV1(t *testing.T) {
	ctx := testContext(t)
	root := fakeV1Tree(t)
	active := &podSet{}
	active.setPods(burstablePod, bestEffortPod, guaranteedPod)
	reg := prometheus.NewPedanticRegistry()
	m := newTestManager(t, Options{
		FS:              FSOptions{Root: root},
		PodPidsLimit:    1024,
		NodeAllocatable: allocatable,
		ActivePods:      active.get,
		Registerer:      reg,
		Clock:           testclock.NewFakeClock(time.Now()),
	})
	if v, err := m.Driver().Version(); err != nil || v != 1 {
		t.Fatalf("Version = %d, %v; want 1", v, err)
	}

	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	expectFiles(t, root, map[string]string{
		"cpu/kubepods/cpu.shares":                         "2048",
		"memory/kubepods/memory.limit_in_bytes":           "4294967296",
		"pids/kubepods/pids.max":                          "10000",
		"cpu/kubepods/burstable/cpu.shares":               "256",
		"cpu/kubepods/besteffort/cpu.shares":              "2",
		"cpuset/kubepods/cpuset.cpus":                     "0-1",
		"cpuset/kubepods/besteffort/cpuset.mems":          "0",
		"cpu/kubepods/cpu.cfs_quota_us":                   "<missing>",
		"memory/kubepods/burstable/memory.limit_in_bytes": "<missing>",
	})
	for _, h := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "systemd"} {
		for _, c := range []string{"kubepods/burstable", "kubepods/besteffort"} {
			if !exists(filepath.Join(root, h, c)) {
				t.Errorf("%s/%s was not created", h, c)
			}
		}
	}

	tests := []struct {
		pod    *v1.Pod
		parent string
		files  map[string]string
	}{
		{guaranteedPod, "/kubepods/podg-1", map[string]string{
			"cpu/kubepods/podg-1/cpu.shares": "512", "cpu/kubepods/podg-1/cpu.cfs_period_us": "100000",
			"cpu/kubepods/podg-1/cpu.cfs_quota_us": "50000", "memory/kubepods/podg-1/memory.limit_in_bytes": "134217728",
			"pids/kubepods/podg-1/pids.max": "1024",
		}},
		{burstablePod, "/kubepods/burstable/podb-1", map[string]string{
			"cpu/kubepods/burstable/podb-1/cpu.shares": "256", "cpu/kubepods/burstable/podb-1/cpu.cfs_quota_us": "100000",
			"memory/kubepods/burstable/podb-1/memory.limit_in_bytes": "268435456", "pids/kubepods/burstable/podb-1/pids.max": "1024",
		}},
		{bestEffortPod, "/kubepods/besteffort/pode-1", map[string]string{
			"cpu/kubepods/besteffort/pode-1/cpu.shares": "2", "cpu/kubepods/besteffort/pode-1/cpu.cfs_quota_us": "<missing>",
			"memory/kubepods/besteffort/pode-1/memory.limit_in_bytes": "<missing>", "pids/kubepods/besteffort/pode-1/pids.max": "1024",
		}},
	}
	for _, tc := range tests {
		parent, err := m.EnsurePod(ctx, tc.pod)
		if err != nil {
			t.Fatalf("EnsurePod(%s): %v", tc.pod.Name, err)
		}
		if parent != tc.parent {
			t.Errorf("EnsurePod(%s) = %q, want %q", tc.pod.Name, parent, tc.parent)
		}
		expectFiles(t, root, tc.files)
	}

	// The driver reads back what it wrote.
	rc, err := m.Driver().Read(ctx, Name{"kubepods", "podg-1"})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if want := (ResourceConfig{CPUShares: u64(512), CPUQuota: i64(50000), CPUPeriod: u64(100000), Memory: i64(128 << 20), PidsLimit: i64(1024)}); rc.String() != want.String() {
		t.Errorf("Read = %s, want %s", rc, want)
	}

	// An existing pod cgroup is left alone; UpdatePod rewrites it.
	writeTestFile(t, filepath.Join(root, "cpu/kubepods/podg-1/cpu.shares"), "9")
	if _, err := m.EnsurePod(ctx, guaranteedPod); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, root, map[string]string{"cpu/kubepods/podg-1/cpu.shares": "9"})
	if err := m.UpdatePod(ctx, guaranteedPod); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, root, map[string]string{"cpu/kubepods/podg-1/cpu.shares": "512"})

	pods, err := m.ListPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantPods := map[types.UID]string{"g-1": "kubepods/podg-1", "b-1": "kubepods/burstable/podb-1", "e-1": "kubepods/besteffort/pode-1"}
	if len(pods) != len(wantPods) {
		t.Errorf("ListPods = %v, want %v", pods, wantPods)
	}
	for uid, n := range wantPods {
		if pods[uid].String() != n {
			t.Errorf("ListPods[%s] = %q, want %q", uid, pods[uid], n)
		}
	}

	// The Burstable shares follow the active pods.
	other := testPod("b-2", ctr(rl("750m", ""), nil))
	active.setPods(burstablePod, other)
	if err := m.UpdateQoS(ctx); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, root, map[string]string{"cpu/kubepods/burstable/cpu.shares": "1024", "cpu/kubepods/besteffort/cpu.shares": "2"})

	// RemovePod kills what a runtime left and removes the pod's cgroup in
	// every hierarchy, container cgroups included.
	var killed []int
	m.kill = func(pid int) error { killed = append(killed, pid); return nil }
	writeTestFile(t, filepath.Join(root, "devices/kubepods/burstable/podb-1/ctr1/cgroup.procs"), "4242\n")
	writeTestFile(t, filepath.Join(root, "pids/kubepods/burstable/podb-1/cgroup.procs"), "4242\n4243\n")
	if err := m.RemovePod(ctx, "b-1"); err != nil {
		t.Fatalf("RemovePod: %v", err)
	}
	if !slices.Equal(killed, []int{4242, 4243}) {
		t.Errorf("killed %v, want [4242 4243]", killed)
	}
	for _, h := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "systemd"} {
		if exists(filepath.Join(root, h, "kubepods/burstable/podb-1")) {
			t.Errorf("%s/kubepods/burstable/podb-1 is left behind", h)
		}
	}
	if err := m.RemovePod(ctx, "b-1"); err != nil {
		t.Errorf("RemovePod of a removed pod: %v", err)
	}
	// A leftover in one hierarchy only is still found and removed.
	writeTestFile(t, filepath.Join(root, "devices/kubepods/poddead/ctr/devices.list"), "a *:* rwm\n")
	if pods, _ := m.ListPods(ctx); pods["dead"].String() != "kubepods/poddead" {
		t.Errorf("ListPods misses a pod cgroup left in one hierarchy: %v", pods)
	}
	if err := m.RemovePod(ctx, "dead"); err != nil || exists(filepath.Join(root, "devices/kubepods/poddead")) {
		t.Errorf("RemovePod of a partial leftover: %v", err)
	}
	pods, err = m.ListPods(ctx)
	if err != nil || len(pods) != 2 {
		t.Errorf("ListPods after removal = %v, %v; want g-1 and e-1", pods, err)
	}

	for op, want := range map[string]uint64{opCreate: 6, opUpdate: 4, opDestroy: 2} {
		if got := histogramCount(t, reg, op); got != want {
			t.Errorf("%s observations = %d, want %d", op, got, want)
		}
	}
	if err := testutil.CollectAndCompare(reg, strings.NewReader(""), "kubelet_cgroup_manager_errors_total"); err != nil {
		t.Errorf("errors were counted: %v", err)
	}
}

// histogramCount returns the sample count of the duration histogram for op.
func histogramCount(t *testing.T, g prometheus.Gatherer, op string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kubelet_cgroup_manager_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation_type" && l.GetValue() == op {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func TestManagerCgroupfsV2(t *testing.T) {
	ctx := testContext(t)
	root := fakeV2Tree(t)
	m := newTestManager(t, Options{
		FS:              FSOptions{Root: root},
		PodPidsLimit:    1024,
		NodeAllocatable: allocatable,
		ActivePods:      func() []*v1.Pod { return []*v1.Pod{burstablePod} },
	})
	if v, err := m.Driver().Version(); err != nil || v != 2 {
		t.Fatalf("Version = %d, %v; want 2", v, err)
	}
	for _, pod := range []*v1.Pod{guaranteedPod, burstablePod, bestEffortPod} {
		if _, err := m.EnsurePod(ctx, pod); err != nil {
			t.Fatalf("EnsurePod(%s): %v", pod.Name, err)
		}
	}
	controllers := "cpuset cpu io memory hugetlb pids"
	expectFiles(t, root, map[string]string{
		"cgroup.subtree_control":                     controllers,
		"kubepods/cgroup.subtree_control":            controllers,
		"kubepods/burstable/cgroup.subtree_control":  controllers,
		"kubepods/besteffort/cgroup.subtree_control": controllers,
		"kubepods/cpu.weight":                        "79",
		"kubepods/memory.max":                        "4294967296",
		"kubepods/pids.max":                          "10000",
		"kubepods/burstable/cpu.weight":              "10",
		"kubepods/besteffort/cpu.weight":             "1",
		"kubepods/podg-1/cpu.weight":                 "20",
		"kubepods/podg-1/cpu.max":                    "50000 100000",
		"kubepods/podg-1/memory.max":                 "134217728",
		"kubepods/podg-1/pids.max":                   "1024",
		"kubepods/podg-1/cgroup.subtree_control":     "<missing>",
		"kubepods/burstable/podb-1/cpu.weight":       "10",
		"kubepods/burstable/podb-1/cpu.max":          "100000 100000",
		"kubepods/burstable/podb-1/memory.max":       "268435456",
		"kubepods/besteffort/pode-1/cpu.weight":      "1",
		"kubepods/besteffort/pode-1/cpu.max":         "<missing>",
		"kubepods/besteffort/pode-1/memory.max":      "<missing>",
	})
	rc, err := m.Driver().Read(ctx, Name{"kubepods", "podg-1"})
	if err != nil {
		t.Fatal(err)
	}
	// cpu.weight 20 reads back as 500 shares: the v2 conversion is lossy.
	if want := (ResourceConfig{CPUShares: u64(500), CPUQuota: i64(50000), CPUPeriod: u64(100000), Memory: i64(128 << 20), PidsLimit: i64(1024)}); rc.String() != want.String() {
		t.Errorf("Read = %s, want %s", rc, want)
	}
	pods, err := m.ListPods(ctx)
	if err != nil || len(pods) != 3 {
		t.Fatalf("ListPods = %v, %v", pods, err)
	}
	for uid := range pods {
		if err := m.RemovePod(ctx, uid); err != nil {
			t.Fatalf("RemovePod(%s): %v", uid, err)
		}
	}
	for _, p := range []string{"kubepods/podg-1", "kubepods/burstable/podb-1", "kubepods/besteffort/pode-1"} {
		if exists(filepath.Join(root, p)) {
			t.Errorf("%s is left behind", p)
		}
	}
	if ok, err := m.Driver().Exists(ctx, Name{"kubepods", "burstable"}); !ok || err != nil {
		t.Errorf("Exists(kubepods/burstable) = %v, %v", ok, err)
	}
}

// TestExistsV2 checks that a cgroup v2 cgroup without the controllers the
// root offers does not count as existing (the kernel lists a cgroup's
// controllers in cgroup.controllers).
func TestExistsV2(t *testing.T) {
	ctx := testContext(t)
	root := fakeV2Tree(t)
	d, err := newCgroupfs(FSOptions{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	name := Name{"kubepods"}
	if ok, err := d.Exists(ctx, name); ok || err != nil {
		t.Fatalf("Exists before Create = %v, %v", ok, err)
	}
	if err := d.Create(ctx, name, ResourceConfig{}); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(root, "kubepods/cgroup.controllers"), "cpu memory\n")
	if ok, err := d.Exists(ctx, name); ok || err != nil {
		t.Errorf("Exists without pids, cpuset, hugetlb = %v, %v; want false", ok, err)
	}
	writeTestFile(t, filepath.Join(root, "kubepods/cgroup.controllers"), "cpuset cpu io memory hugetlb pids\n")
	if ok, err := d.Exists(ctx, name); !ok || err != nil {
		t.Errorf("Exists = %v, %v; want true", ok, err)
	}
}

func TestManagerRunRefreshesQoS(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	root := fakeV1Tree(t)
	active := &podSet{}
	clk := testclock.NewFakeClock(time.Now())
	m := newTestManager(t, Options{FS: FSOptions{Root: root}, ActivePods: active.get, Clock: clk})
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	shares := filepath.Join(root, "cpu/kubepods/burstable/cpu.shares")
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	waitFor("the first refresh timer", clk.HasWaiters)
	expectFiles(t, root, map[string]string{"cpu/kubepods/burstable/cpu.shares": "2"})

	active.setPods(burstablePod)
	clk.Step(defaultQoSUpdateInterval - time.Second)
	if got := readTestFile(t, shares); got != "2" {
		t.Fatalf("refreshed before the interval: shares %s", got)
	}
	clk.Step(time.Second)
	waitFor("the refreshed burstable shares", func() bool { return readTestFile(t, shares) == "256" })
	waitFor("the next refresh timer", clk.HasWaiters)

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
}

func TestManagerCgroupsPerQOSDisabled(t *testing.T) {
	ctx := testContext(t)
	root := fakeV1Tree(t)
	off := false
	m := newTestManager(t, Options{FS: FSOptions{Root: root}, CgroupsPerQOS: &off})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	parent, err := m.EnsurePod(ctx, guaranteedPod)
	if err != nil || parent != "" {
		t.Errorf("EnsurePod = %q, %v; want the runtime's default parent", parent, err)
	}
	if pods, err := m.ListPods(ctx); len(pods) != 0 || err != nil {
		t.Errorf("ListPods = %v, %v", pods, err)
	}
	if err := errors.Join(m.UpdatePod(ctx, guaranteedPod), m.RemovePod(ctx, "g-1"), m.UpdateQoS(ctx)); err != nil {
		t.Error(err)
	}
	if exists(filepath.Join(root, "cpu/kubepods")) {
		t.Error("a cgroup was created")
	}
}

func TestManagerCgroupRoot(t *testing.T) {
	ctx := testContext(t)
	root := fakeV1Tree(t)
	m := newTestManager(t, Options{FS: FSOptions{Root: root}, CgroupRoot: "/nodekit/agent-1"})
	parent, err := m.EnsurePod(ctx, bestEffortPod)
	if err != nil {
		t.Fatal(err)
	}
	if want := "/nodekit/agent-1/kubepods/besteffort/pode-1"; parent != want {
		t.Errorf("EnsurePod = %q, want %q", parent, want)
	}
	if !m.QOSCgroups().Burstable.Equal(Name{"nodekit", "agent-1", "kubepods", "burstable"}) {
		t.Errorf("QOSCgroups = %v", m.QOSCgroups())
	}
	if !exists(filepath.Join(root, "memory/nodekit/agent-1/kubepods/besteffort/pode-1")) {
		t.Error("pod cgroup missing")
	}
}

func TestManagerBadInput(t *testing.T) {
	ctx := testContext(t)
	root := fakeV1Tree(t)
	m := newTestManager(t, Options{FS: FSOptions{Root: root}})
	for _, uid := range []types.UID{"", "a_b", "a/../b"} {
		pod := testPod("x", ctr(nil, nil))
		pod.UID = uid
		if _, err := m.EnsurePod(ctx, pod); err == nil {
			t.Errorf("EnsurePod with UID %q succeeded", uid)
		}
		if err := m.RemovePod(ctx, uid); err == nil {
			t.Errorf("RemovePod(%q) succeeded", uid)
		}
	}
	if _, err := m.EnsurePod(ctx, nil); err == nil {
		t.Error("EnsurePod(nil) succeeded")
	}
	for name, o := range map[string]Options{
		"unknown driver":  {CgroupDriver: "docker"},
		"bad period":      {CPUCFSQuotaPeriod: 2 * time.Second},
		"bad cgroup root": {CgroupRoot: "/a_b"},
		"bad version":     {FS: FSOptions{Version: 3}},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New with %s succeeded", name)
		}
	}
	missing := newTestManager(t, Options{FS: FSOptions{Root: filepath.Join(root, "nope")}})
	if err := missing.Start(ctx); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Start on a missing root = %v, want an error naming it", err)
	}
	noPids := t.TempDir()
	for _, h := range []string{"cpu", "memory"} {
		writeTestFile(t, filepath.Join(noPids, h, "x"), "")
	}
	m = newTestManager(t, Options{FS: FSOptions{Root: noPids}})
	if err := m.Start(ctx); err == nil || !strings.Contains(err.Error(), `"pids" is not mounted`) {
		t.Errorf("Start without the pids hierarchy = %v", err)
	}
}

func TestManagerRuntimeDriverCheck(t *testing.T) {
	ctx := testContext(t)
	root := fakeV1Tree(t)
	runtimeSays := func(d runtimeapi.CgroupDriver, ok bool, err error) func(context.Context) (runtimeapi.CgroupDriver, bool, error) {
		return func(context.Context) (runtimeapi.CgroupDriver, bool, error) { return d, ok, err }
	}
	m := newTestManager(t, Options{FS: FSOptions{Root: root}, RuntimeCgroupDriver: runtimeSays(runtimeapi.CgroupDriver_SYSTEMD, true, nil)})
	err := m.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "mismatch") {
		t.Fatalf("Start = %v, want a mismatch error", err)
	}
	if _, err := m.EnsurePod(ctx, bestEffortPod); err == nil {
		t.Error("EnsurePod succeeded despite the mismatch")
	}
	if exists(filepath.Join(root, "cpu/kubepods")) {
		t.Error("cgroups were created despite the mismatch")
	}
	if err := m.Run(ctx); err == nil {
		t.Error("Run succeeded despite the mismatch")
	}
	for _, tc := range []struct {
		d   runtimeapi.CgroupDriver
		ok  bool
		err error
	}{{runtimeapi.CgroupDriver_CGROUPFS, true, nil}, {runtimeapi.CgroupDriver_SYSTEMD, false, nil}} {
		m := newTestManager(t, Options{FS: FSOptions{Root: root}, RuntimeCgroupDriver: runtimeSays(tc.d, tc.ok, tc.err)})
		if err := m.Start(ctx); err != nil {
			t.Errorf("Start with runtime %v ok=%v: %v", tc.d, tc.ok, err)
		}
	}
	m = newTestManager(t, Options{FS: FSOptions{Root: root}, RuntimeCgroupDriver: runtimeSays(0, false, errors.New("runtime down"))})
	if err := m.Start(ctx); err == nil || !strings.Contains(err.Error(), "runtime down") {
		t.Errorf("Start = %v, want the runtime's error", err)
	}
}

func TestCheckRuntimeDriver(t *testing.T) {
	tests := []struct {
		configured string
		runtime    runtimeapi.CgroupDriver
		ok         bool
		wantErr    string
	}{
		{DriverCgroupfs, runtimeapi.CgroupDriver_CGROUPFS, true, ""},
		{DriverSystemd, runtimeapi.CgroupDriver_SYSTEMD, true, ""},
		{DriverSystemd, runtimeapi.CgroupDriver_CGROUPFS, false, ""},
		{DriverCgroupfs, runtimeapi.CgroupDriver_SYSTEMD, true, `configured with cgroupDriver "cgroupfs" but the container runtime uses "systemd"`},
		{DriverSystemd, runtimeapi.CgroupDriver_CGROUPFS, true, `configured with cgroupDriver "systemd" but the container runtime uses "cgroupfs"`},
		{DriverSystemd, runtimeapi.CgroupDriver(7), true, "unknown cgroup driver 7"},
	}
	for _, tc := range tests {
		err := checkRuntimeDriver(tc.configured, tc.runtime, tc.ok)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("checkRuntimeDriver(%s, %v, %v) = %v", tc.configured, tc.runtime, tc.ok, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("checkRuntimeDriver(%s, %v, %v) = %v, want %q", tc.configured, tc.runtime, tc.ok, err, tc.wantErr)
		}
	}
}

// failingDriver fails Update, to check the error metric.
type failingDriver struct {
	Driver
}

func (failingDriver) Update(context.Context, Name, ResourceConfig) error {
	return errors.New("update refused")
}

func TestManagerErrorMetric(t *testing.T) {
	ctx := testContext(t)
	d, err := newCgroupfs(FSOptions{Root: fakeV1Tree(t)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	m := newTestManager(t, Options{Driver: failingDriver{d}, Registerer: reg})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.UpdateQoS(ctx); err == nil || !strings.Contains(err.Error(), "update refused") {
		t.Fatalf("UpdateQoS = %v", err)
	}
	want := `
# HELP kubelet_cgroup_manager_errors_total Number of failed cgroup manager operations. Broken down by method.
# TYPE kubelet_cgroup_manager_errors_total counter
kubelet_cgroup_manager_errors_total{operation_type="update"} 1
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "kubelet_cgroup_manager_errors_total"); err != nil {
		t.Error(err)
	}
	if _, err := New(Options{Registerer: reg}); err == nil {
		t.Error("a second Manager registered the same metrics")
	}
}
