package cgroupdriver

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func newSystemdManager(t *testing.T, root string, fake *fakeSystemd, dials *int) *Manager {
	t.Helper()
	return newTestManager(t, Options{
		CgroupDriver:    DriverSystemd,
		FS:              FSOptions{Root: root},
		SystemdDial:     fake.dial(dials),
		PodPidsLimit:    1024,
		NodeAllocatable: allocatable,
		ActivePods:      func() []*v1.Pod { return []*v1.Pod{burstablePod} },
	})
}

func TestSystemdManagerV1(t *testing.T) {
	ctx := testContext(t)
	root := fakeV1Tree(t)
	fake := newFakeSystemd()
	var dials int
	m := newSystemdManager(t, root, fake, &dials)
	if dials != 0 {
		t.Fatal("New connected to D-Bus")
	}
	if m.Driver().Name() != DriverSystemd {
		t.Fatalf("driver %q", m.Driver().Name())
	}

	parents := map[*v1.Pod]string{
		guaranteedPod: "/kubepods.slice/kubepods-podg_1.slice",
		burstablePod:  "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_1.slice",
		bestEffortPod: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pode_1.slice",
	}
	for _, pod := range []*v1.Pod{guaranteedPod, burstablePod, bestEffortPod} {
		parent, err := m.EnsurePod(ctx, pod)
		if err != nil {
			t.Fatalf("EnsurePod(%s): %v", pod.Name, err)
		}
		if parent != parents[pod] {
			t.Errorf("EnsurePod(%s) = %q, want %q", pod.Name, parent, parents[pod])
		}
	}
	if dials != 1 {
		t.Errorf("dialed %d times, want once", dials)
	}

	// The slices are started with the kubelet's (runc's) unit properties,
	// each wanting its parent slice.
	wantParents := map[string]string{
		"kubepods.slice":                   "-.slice",
		"kubepods-burstable.slice":         "kubepods.slice",
		"kubepods-besteffort.slice":        "kubepods.slice",
		"kubepods-podg_1.slice":            "kubepods.slice",
		"kubepods-burstable-podb_1.slice":  "kubepods-burstable.slice",
		"kubepods-besteffort-pode_1.slice": "kubepods-besteffort.slice",
	}
	if len(fake.started) != len(wantParents) {
		t.Errorf("started units %v", fake.callList())
	}
	for unit, parent := range wantParents {
		props := propMap(fake.started[unit])
		want := map[string]any{
			"Description":         "libcontainer container " + unit,
			"Wants":               []string{parent},
			"MemoryAccounting":    true,
			"CPUAccounting":       true,
			"BlockIOAccounting":   true,
			"TasksAccounting":     true,
			"DefaultDependencies": false,
		}
		if !reflect.DeepEqual(props, want) {
			t.Errorf("start %s properties = %v, want %v", unit, props, want)
		}
	}
	// Resource properties, v1 flavour, and the same values in the files.
	wantSet := map[string]map[string]any{
		"kubepods.slice":            {"CPUShares": uint64(2048), "MemoryLimit": uint64(4 << 30), "TasksMax": uint64(10000)},
		"kubepods-burstable.slice":  {"CPUShares": uint64(256)},
		"kubepods-besteffort.slice": {"CPUShares": uint64(2)},
		"kubepods-podg_1.slice": {
			"CPUShares": uint64(512), "CPUQuotaPeriodUSec": uint64(100000), "CPUQuotaPerSecUSec": uint64(500000),
			"MemoryLimit": uint64(128 << 20), "TasksMax": uint64(1024),
		},
		"kubepods-besteffort-pode_1.slice": {"CPUShares": uint64(2), "TasksMax": uint64(1024)},
	}
	for unit, want := range wantSet {
		if got := propMap(fake.set[unit]); !reflect.DeepEqual(got, want) {
			t.Errorf("set %s properties = %v, want %v", unit, got, want)
		}
	}
	expectFiles(t, root, map[string]string{
		"cpu/kubepods.slice/cpu.shares":                                                           "2048",
		"cpu/kubepods.slice/kubepods-podg_1.slice/cpu.cfs_quota_us":                               "50000",
		"memory/kubepods.slice/kubepods-podg_1.slice/memory.limit_in_bytes":                       "134217728",
		"pids/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pode_1.slice/pids.max": "1024",
		"cpuset/kubepods.slice/kubepods-burstable.slice/cpuset.cpus":                              "0-1",
	})

	// Runtime-made container scopes below a pod slice are not pods.
	writeTestFile(t, filepath.Join(root, "cpu/kubepods.slice/kubepods-podg_1.slice/cri-containerd-abc.scope/cgroup.procs"), "")
	writeTestFile(t, filepath.Join(root, "cpu/kubepods.slice/not-a-slice/cgroup.procs"), "")
	pods, err := m.ListPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"g-1": "kubepods/podg-1", "b-1": "kubepods/burstable/podb-1", "e-1": "kubepods/besteffort/pode-1"}
	if len(pods) != len(want) {
		t.Errorf("ListPods = %v", pods)
	}
	for uid, n := range want {
		if got := pods[types.UID(uid)]; got.String() != n {
			t.Errorf("ListPods[%s] = %q, want %q", uid, got, n)
		}
	}

	if err := m.RemovePod(ctx, "g-1"); err != nil {
		t.Fatalf("RemovePod: %v", err)
	}
	calls := fake.callList()
	if !slices.Contains(calls, "stop kubepods-podg_1.slice") || !slices.Contains(calls, "reset kubepods-podg_1.slice") {
		t.Errorf("RemovePod did not stop and reset the unit: %v", calls)
	}
	if fake.units["kubepods-podg_1.slice"] {
		t.Error("the pod's unit is still there")
	}
	for _, h := range []string{"cpu", "cpuset", "memory", "pids", "devices", "systemd"} {
		if exists(filepath.Join(root, h, "kubepods.slice/kubepods-podg_1.slice")) {
			t.Errorf("%s: pod slice left behind", h)
		}
	}
	// A unit systemd no longer knows is fine: only the directories remain.
	writeTestFile(t, filepath.Join(root, "pids/kubepods.slice/kubepods-podgone.slice/cgroup.procs"), "")
	if err := m.RemovePod(ctx, "gone"); err != nil {
		t.Errorf("RemovePod of a unit systemd does not know: %v", err)
	}
	if exists(filepath.Join(root, "pids/kubepods.slice/kubepods-podgone.slice")) {
		t.Error("the leftover slice directory is still there")
	}
	if got := strings.Count(strings.Join(fake.callList(), "\n"), "version"); got != 1 {
		t.Errorf("asked for systemd's version %d times, want once", got)
	}
}

func TestSystemdDriverV2(t *testing.T) {
	ctx := testContext(t)
	root := fakeV2Tree(t)
	fake := newFakeSystemd()
	var dials int
	m := newSystemdManager(t, root, fake, &dials)
	if _, err := m.EnsurePod(ctx, guaranteedPod); err != nil {
		t.Fatal(err)
	}
	if got := propMap(fake.started["kubepods.slice"])["IOAccounting"]; got != true {
		t.Errorf("v2 slices must enable IOAccounting, got %v", propMap(fake.started["kubepods.slice"]))
	}
	want := map[string]any{
		"CPUWeight": uint64(20), "CPUQuotaPeriodUSec": uint64(100000), "CPUQuotaPerSecUSec": uint64(500000),
		"MemoryMax": uint64(128 << 20), "TasksMax": uint64(1024),
	}
	if got := propMap(fake.set["kubepods-podg_1.slice"]); !reflect.DeepEqual(got, want) {
		t.Errorf("set properties = %v, want %v", got, want)
	}
	expectFiles(t, root, map[string]string{
		"kubepods.slice/kubepods-podg_1.slice/cpu.weight": "20",
		"kubepods.slice/kubepods-podg_1.slice/cpu.max":    "50000 100000",
		"kubepods.slice/cgroup.subtree_control":           "cpuset cpu io memory hugetlb pids",
	})
}

func TestSystemdProperties(t *testing.T) {
	tests := []struct {
		name      string
		version   int
		sdVersion int
		in        ResourceConfig
		props     map[string]any
		quota     *int64 // quota written to the files
	}{
		{"empty", 1, 252, ResourceConfig{}, map[string]any{}, nil},
		{
			"quota rounded up to whole percent", 1, 252,
			ResourceConfig{CPUQuota: i64(15500), CPUPeriod: u64(100000)},
			map[string]any{"CPUQuotaPeriodUSec": uint64(100000), "CPUQuotaPerSecUSec": uint64(160000)},
			i64(16000),
		},
		{
			"quota already whole", 2, 252,
			ResourceConfig{CPUQuota: i64(25000), CPUPeriod: u64(50000)},
			map[string]any{"CPUQuotaPeriodUSec": uint64(50000), "CPUQuotaPerSecUSec": uint64(500000)},
			i64(25000),
		},
		{
			"unlimited", 2, 252,
			ResourceConfig{CPUQuota: i64(-1), CPUPeriod: u64(100000), Memory: i64(-1), PidsLimit: i64(-1)},
			map[string]any{
				"CPUQuotaPeriodUSec": uint64(100000), "CPUQuotaPerSecUSec": uint64(math.MaxUint64),
				"MemoryMax": uint64(math.MaxUint64), "TasksMax": uint64(math.MaxUint64),
			},
			i64(-1),
		},
		{
			"old systemd has no quota period", 1, 241,
			ResourceConfig{CPUQuota: i64(50000), CPUPeriod: u64(100000)},
			map[string]any{"CPUQuotaPerSecUSec": uint64(500000)},
			i64(50000),
		},
		{"pids 0 is 1", 1, 252, ResourceConfig{PidsLimit: i64(0)}, map[string]any{"TasksMax": uint64(1)}, nil},
		{
			"quota without period uses the default", 1, -1,
			ResourceConfig{CPUQuota: i64(1234)},
			map[string]any{"CPUQuotaPerSecUSec": uint64(20000)},
			i64(2000),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			props, out := systemdProperties(tc.version, tc.sdVersion, tc.in)
			if got := propMap(props); !reflect.DeepEqual(got, tc.props) {
				t.Errorf("properties = %v, want %v", got, tc.props)
			}
			if !reflect.DeepEqual(out.CPUQuota, tc.quota) {
				t.Errorf("quota = %s, want %v", out, tc.quota)
			}
			if tc.in.CPUQuota != nil && tc.quota != nil && *tc.in.CPUQuota != *tc.quota && *tc.in.CPUQuota == *out.CPUQuota {
				t.Error("the caller's ResourceConfig was modified")
			}
		})
	}
}

func TestParseSystemdVersion(t *testing.T) {
	for in, want := range map[string]int{`"252.22-1~deb12u1"`: 252, `"v245.4-1.fc32"`: 245, "249": 249, `"unknown"`: -1, "": -1} {
		if got := parseSystemdVersion(in); got != want {
			t.Errorf("parseSystemdVersion(%q) = %d, want %d", in, got, want)
		}
	}
}

func newSystemdDriver(t *testing.T, root string, fake *fakeSystemd, dials *int, timeout time.Duration) Driver {
	t.Helper()
	d, err := newSystemd(systemdOptions{FS: FSOptions{Root: root}, Dial: fake.dial(dials), JobTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSystemdDriverErrors(t *testing.T) {
	ctx := testContext(t)
	name := Name{"kubepods"}

	t.Run("existing unit is kept", func(t *testing.T) {
		fake := newFakeSystemd()
		fake.units["kubepods.slice"] = true
		var dials int
		d := newSystemdDriver(t, fakeV1Tree(t), fake, &dials, 0)
		if err := d.Create(ctx, name, ResourceConfig{CPUShares: u64(100)}); err != nil {
			t.Fatalf("Create: %v", err)
		}
		if got := propMap(fake.set["kubepods.slice"]); got["CPUShares"] != uint64(100) {
			t.Errorf("properties not set on the existing unit: %v", got)
		}
	})
	t.Run("start fails", func(t *testing.T) {
		fake := newFakeSystemd()
		fake.startErr = errors.New("access denied")
		var dials int
		d := newSystemdDriver(t, fakeV1Tree(t), fake, &dials, 0)
		if err := d.Create(ctx, name, ResourceConfig{}); err == nil || !strings.Contains(err.Error(), "start systemd unit kubepods.slice: access denied") {
			t.Errorf("Create = %v", err)
		}
	})
	t.Run("job fails", func(t *testing.T) {
		fake := newFakeSystemd()
		fake.jobResult = "failed"
		var dials int
		d := newSystemdDriver(t, fakeV1Tree(t), fake, &dials, 0)
		if err := d.Create(ctx, name, ResourceConfig{}); err == nil || !strings.Contains(err.Error(), `result "failed"`) {
			t.Errorf("Create = %v", err)
		}
	})
	t.Run("job times out", func(t *testing.T) {
		fake := newFakeSystemd()
		fake.jobResult = ""
		var dials int
		d := newSystemdDriver(t, fakeV1Tree(t), fake, &dials, time.Nanosecond)
		if err := d.Create(ctx, name, ResourceConfig{}); err == nil || !strings.Contains(err.Error(), "did not finish") {
			t.Errorf("Create = %v", err)
		}
	})
	t.Run("context done while waiting", func(t *testing.T) {
		fake := newFakeSystemd()
		fake.jobResult = ""
		var dials int
		d := newSystemdDriver(t, fakeV1Tree(t), fake, &dials, time.Hour)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := d.Create(cctx, name, ResourceConfig{}); !errors.Is(err, context.Canceled) {
			t.Errorf("Create = %v, want context.Canceled", err)
		}
	})
	t.Run("dial fails", func(t *testing.T) {
		d, err := newSystemd(systemdOptions{
			FS:   FSOptions{Root: fakeV1Tree(t)},
			Dial: func(context.Context) (SystemdConn, error) { return nil, errors.New("no bus") },
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Create(ctx, name, ResourceConfig{}); err == nil || !strings.Contains(err.Error(), "connect to systemd over D-Bus: no bus") {
			t.Errorf("Create = %v", err)
		}
	})
	t.Run("closed connection is redialed", func(t *testing.T) {
		fake := newFakeSystemd()
		fake.closedOnce = true
		var dials int
		d := newSystemdDriver(t, fakeV1Tree(t), fake, &dials, 0)
		if err := d.Create(ctx, name, ResourceConfig{}); err != nil {
			t.Fatalf("Create: %v", err)
		}
		if dials != 2 || !fake.closed {
			t.Errorf("dials = %d, closed = %v; want a redial after closing", dials, fake.closed)
		}
	})
	t.Run("root slice is systemd's", func(t *testing.T) {
		fake := newFakeSystemd()
		var dials int
		d := newSystemdDriver(t, fakeV1Tree(t), fake, &dials, 0)
		for _, err := range []error{d.Create(ctx, rootName, ResourceConfig{}), d.Update(ctx, rootName, ResourceConfig{}), d.Destroy(ctx, rootName)} {
			if err == nil {
				t.Error("an operation on the root slice succeeded")
			}
		}
		if len(fake.callList()) != 0 {
			t.Errorf("systemd was called: %v", fake.callList())
		}
	})
	t.Run("unreadable version", func(t *testing.T) {
		fake := newFakeSystemd()
		fake.version = ""
		var dials int
		d := newSystemdDriver(t, fakeV1Tree(t), fake, &dials, 0)
		rc := ResourceConfig{CPUQuota: i64(50000), CPUPeriod: u64(100000)}
		if err := d.Create(ctx, name, rc); err != nil {
			t.Fatal(err)
		}
		if err := d.Update(ctx, name, rc); err != nil {
			t.Fatal(err)
		}
		if _, ok := propMap(fake.set["kubepods.slice"])["CPUQuotaPeriodUSec"]; ok {
			t.Error("CPUQuotaPeriodUSec set without knowing systemd's version")
		}
		if got := strings.Count(strings.Join(fake.callList(), "\n"), "version"); got != 1 {
			t.Errorf("asked for the version %d times, want once", got)
		}
	})
}
