package cgroupdriver

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// rl builds a ResourceList from cpu and memory quantities ("" leaves one out).
func rl(cpu, mem string) v1.ResourceList {
	l := v1.ResourceList{}
	if cpu != "" {
		l[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

func ctr(req, lim v1.ResourceList) v1.Container {
	return v1.Container{Name: "c", Resources: v1.ResourceRequirements{Requests: req, Limits: lim}}
}

func testPod(uid string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-" + uid, UID: types.UID(uid)},
		Spec:       v1.PodSpec{Containers: containers},
	}
}

func TestComputePodQOS(t *testing.T) {
	guaranteed := ctr(rl("1", "1Gi"), rl("1", "1Gi"))
	bestEffort := ctr(nil, nil)
	tests := []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{"no containers", testPod("a"), v1.PodQOSBestEffort},
		{"no resources", testPod("a", bestEffort, bestEffort), v1.PodQOSBestEffort},
		{"only other resources", testPod("a", ctr(v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}, nil)), v1.PodQOSBestEffort},
		{"requests equal limits", testPod("a", guaranteed, guaranteed), v1.PodQOSGuaranteed},
		{"limits only (requests default to them upstream, not here)", testPod("a", ctr(nil, rl("1", "1Gi"))), v1.PodQOSBurstable},
		{"cpu only", testPod("a", ctr(rl("1", ""), rl("1", ""))), v1.PodQOSBurstable},
		{"requests below limits", testPod("a", ctr(rl("500m", "1Gi"), rl("1", "1Gi"))), v1.PodQOSBurstable},
		{"requests only", testPod("a", ctr(rl("100m", ""), nil)), v1.PodQOSBurstable},
		{"guaranteed and best effort", testPod("a", guaranteed, bestEffort), v1.PodQOSBurstable},
		{"equal quantities in different units", testPod("a", ctr(rl("1", "1024Mi"), rl("1000m", "1Gi"))), v1.PodQOSGuaranteed},
		{"zero requests and limits", testPod("a", ctr(rl("0", "0"), rl("0", "0"))), v1.PodQOSBestEffort},
	}
	withInit := testPod("a", guaranteed)
	withInit.Spec.InitContainers = []v1.Container{bestEffort}
	tests = append(tests, struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{"init container counts", withInit, v1.PodQOSBurstable})

	podLevel := testPod("a", bestEffort)
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: rl("1", "1Gi"), Limits: rl("1", "1Gi")}
	tests = append(tests, struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{"pod-level resources decide", podLevel, v1.PodQOSGuaranteed})

	podLevelOther := testPod("a", guaranteed)
	podLevelOther.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}
	tests = append(tests, struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{"pod-level without cpu or memory is ignored", podLevelOther, v1.PodQOSGuaranteed})

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ComputePodQOS(tc.pod); got != tc.want {
				t.Errorf("ComputePodQOS = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPodQOSPrefersStatus(t *testing.T) {
	pod := testPod("a", ctr(rl("1", "1Gi"), rl("1", "1Gi")))
	if got := PodQOS(pod); got != v1.PodQOSGuaranteed {
		t.Fatalf("PodQOS = %s", got)
	}
	pod.Status.QOSClass = v1.PodQOSBurstable
	if got := PodQOS(pod); got != v1.PodQOSBurstable {
		t.Errorf("PodQOS = %s, want the status's Burstable", got)
	}
}

func TestCPUConversions(t *testing.T) {
	for milli, want := range map[int64]uint64{0: 2, -5: 2, 1: 2, 2: 2, 3: 3, 100: 102, 250: 256, 1000: 1024, 1500: 1536, 256000: 262144, 300000: 262144} {
		if got := milliCPUToShares(milli); got != want {
			t.Errorf("milliCPUToShares(%d) = %d, want %d", milli, got, want)
		}
	}
	for _, tc := range []struct {
		milli  int64
		period uint64
		want   int64
	}{{0, 100000, 0}, {1, 100000, 1000}, {5, 100000, 1000}, {10, 100000, 1000}, {250, 100000, 25000}, {1500, 100000, 150000}, {500, 50000, 25000}} {
		if got := milliCPUToQuota(tc.milli, tc.period); got != tc.want {
			t.Errorf("milliCPUToQuota(%d, %d) = %d, want %d", tc.milli, tc.period, got, tc.want)
		}
	}
	// The kubelet's linear shares -> weight mapping and its inverse.
	for shares, want := range map[uint64]uint64{0: 1, 2: 1, 3: 1, 28: 1, 29: 2, 102: 4, 1024: 39, 1536: 59, 262143: 9999, 262144: 10000, 300000: 10000} {
		if got := cpuSharesToWeight(shares); got != want {
			t.Errorf("cpuSharesToWeight(%d) = %d, want %d", shares, got, want)
		}
	}
	for weight, want := range map[uint64]uint64{0: 2, 1: 2, 39: 998, 100: 2597, 10000: 262144} {
		if got := cpuWeightToShares(weight); got != want {
			t.Errorf("cpuWeightToShares(%d) = %d, want %d", weight, got, want)
		}
	}
}

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

func TestResourceConfigForPod(t *testing.T) {
	enforce := podResourceOptions{EnforceCPULimits: true, CPUPeriod: 100000}
	guaranteed := testPod("g", ctr(rl("500m", "128Mi"), rl("500m", "128Mi")), ctr(rl("250m", "64Mi"), rl("250m", "64Mi")))
	burstableAll := testPod("b", ctr(rl("100m", "64Mi"), rl("1", "256Mi")))
	burstableSome := testPod("b", ctr(rl("100m", "64Mi"), rl("1", "256Mi")), ctr(rl("200m", ""), nil))
	bestEffort := testPod("e", ctr(nil, nil))
	overhead := testPod("o", ctr(rl("1", "1Gi"), rl("1", "1Gi")))
	overhead.Spec.Overhead = rl("100m", "10Mi")
	podLevel := testPod("p", ctr(rl("100m", ""), nil))
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: rl("1", "512Mi"), Limits: rl("2", "1Gi")}

	tests := []struct {
		name string
		pod  *v1.Pod
		opts podResourceOptions
		want ResourceConfig
	}{
		{"guaranteed", guaranteed, enforce, ResourceConfig{CPUShares: u64(768), CPUQuota: i64(75000), CPUPeriod: u64(100000), Memory: i64(192 << 20)}},
		{"guaranteed without cfs quota", guaranteed, podResourceOptions{CPUPeriod: 100000}, ResourceConfig{CPUShares: u64(768), CPUQuota: i64(-1), CPUPeriod: u64(100000), Memory: i64(192 << 20)}},
		{"guaranteed with a 50ms period", guaranteed, podResourceOptions{EnforceCPULimits: true, CPUPeriod: 50000}, ResourceConfig{CPUShares: u64(768), CPUQuota: i64(37500), CPUPeriod: u64(50000), Memory: i64(192 << 20)}},
		{"default period", guaranteed, podResourceOptions{EnforceCPULimits: true}, ResourceConfig{CPUShares: u64(768), CPUQuota: i64(75000), CPUPeriod: u64(100000), Memory: i64(192 << 20)}},
		{"burstable with all limits", burstableAll, enforce, ResourceConfig{CPUShares: u64(102), CPUQuota: i64(100000), CPUPeriod: u64(100000), Memory: i64(256 << 20)}},
		{"burstable with some limits", burstableSome, enforce, ResourceConfig{CPUShares: u64(307)}},
		{"best effort", bestEffort, enforce, ResourceConfig{CPUShares: u64(2)}},
		{"pids limit", bestEffort, podResourceOptions{EnforceCPULimits: true, PodPidsLimit: 1024}, ResourceConfig{CPUShares: u64(2), PidsLimit: i64(1024)}},
		{"overhead counts", overhead, enforce, ResourceConfig{CPUShares: u64(1126), CPUQuota: i64(110000), CPUPeriod: u64(100000), Memory: i64(1<<30 + 10<<20)}},
		{"pod-level resources", podLevel, enforce, ResourceConfig{CPUShares: u64(1024), CPUQuota: i64(200000), CPUPeriod: u64(100000), Memory: i64(1 << 30)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := resourceConfigForPod(tc.pod, tc.opts)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ResourceConfigForPod = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestResourceConfigForAllocatable(t *testing.T) {
	list := rl("3500m", "6Gi")
	list[pidResource] = resource.MustParse("4096")
	got := resourceConfigForAllocatable(list)
	want := ResourceConfig{CPUShares: u64(3584), Memory: i64(6 << 30), PidsLimit: i64(4096)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ResourceConfigForAllocatable = %s, want %s", got, want)
	}
	if got := resourceConfigForAllocatable(nil); !reflect.DeepEqual(got, ResourceConfig{}) {
		t.Errorf("resourceConfigForAllocatable(nil) = %s, want nothing", got)
	}
}

func TestCgroupFiles(t *testing.T) {
	tests := []struct {
		name   string
		rc     ResourceConfig
		v1, v2 []cgroupFile
	}{
		{"empty", ResourceConfig{}, nil, nil},
		{
			"guaranteed",
			ResourceConfig{CPUShares: u64(768), CPUQuota: i64(75000), CPUPeriod: u64(100000), Memory: i64(192 << 20), PidsLimit: i64(100)},
			[]cgroupFile{
				{"cpu", "cpu.shares", "768"}, {"cpu", "cpu.cfs_period_us", "100000"}, {"cpu", "cpu.cfs_quota_us", "75000"},
				{"memory", "memory.limit_in_bytes", "201326592"}, {"pids", "pids.max", "100"},
			},
			[]cgroupFile{{"", "cpu.weight", "30"}, {"", "cpu.max", "75000 100000"}, {"", "memory.max", "201326592"}, {"", "pids.max", "100"}},
		},
		{
			"unlimited",
			ResourceConfig{CPUShares: u64(2), CPUQuota: i64(-1), CPUPeriod: u64(100000), Memory: i64(-1), PidsLimit: i64(-1)},
			[]cgroupFile{
				{"cpu", "cpu.shares", "2"}, {"cpu", "cpu.cfs_period_us", "100000"}, {"cpu", "cpu.cfs_quota_us", "-1"},
				{"memory", "memory.limit_in_bytes", "-1"}, {"pids", "pids.max", "max"},
			},
			[]cgroupFile{{"", "cpu.weight", "1"}, {"", "cpu.max", "max 100000"}, {"", "memory.max", "max"}, {"", "pids.max", "max"}},
		},
		{
			"zero means unset, pids 0 means 1",
			ResourceConfig{CPUQuota: i64(0), Memory: i64(0), PidsLimit: i64(0)},
			[]cgroupFile{{"pids", "pids.max", "1"}},
			[]cgroupFile{{"", "pids.max", "1"}},
		},
		{
			"quota without period",
			ResourceConfig{CPUQuota: i64(50000)},
			[]cgroupFile{{"cpu", "cpu.cfs_quota_us", "50000"}},
			[]cgroupFile{{"", "cpu.max", "50000 100000"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := v1Files(tc.rc); !reflect.DeepEqual(got, tc.v1) {
				t.Errorf("v1Files = %v, want %v", got, tc.v1)
			}
			if got := v2Files(tc.rc); !reflect.DeepEqual(got, tc.v2) {
				t.Errorf("v2Files = %v, want %v", got, tc.v2)
			}
		})
	}
}

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]int64{"max": -1, "-1": -1, "100\n": 100, "9223372036854771712": -1, "0": 0} {
		got, err := parseLimit(in)
		if err != nil || got != want {
			t.Errorf("parseLimit(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	if _, err := parseLimit("lots"); err == nil {
		t.Error("parseLimit(lots) succeeded")
	}
}

func TestResourceConfigString(t *testing.T) {
	rc := ResourceConfig{CPUShares: u64(2), Memory: i64(-1)}
	if got, want := rc.String(), "{cpuShares=2 memory=-1}"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
