package eviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// rank runs a signal's ranking over pods with stats for those in use.
func rank(t *testing.T, r RankFunc, pods []*v1.Pod, use map[*v1.Pod]podUse) string {
	t.Helper()
	var stats []statsapi.PodStats
	for _, p := range pods {
		if u, ok := use[p]; ok {
			stats = append(stats, podStats(p, u))
		}
	}
	s := node{}.summary(time.Now(), stats...)
	sorted := append([]*v1.Pod(nil), pods...)
	r(sorted, statsIndex(s))
	return names(sorted)
}

func signalByName(t *testing.T, layout DiskLayout, name string) Signal {
	t.Helper()
	for _, s := range builtinSignals(layout, nil, nil, nil) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no signal %s", name)
	return Signal{}
}

func TestRankMemoryPressure(t *testing.T) {
	a := newPod("a")
	b := newPod("b")
	c := newPod("c", withRequest(v1.ResourceMemory, "200Mi"), withPriority(10))
	d := newPod("d", withRequest(v1.ResourceMemory, "1Gi"), withPriority(-5))
	e := newPod("e", withRequest(v1.ResourceMemory, "100Mi"), withPriority(-5))
	f := newPod("f")
	use := map[*v1.Pod]podUse{
		b: {memWS: 100 * Mi},
		c: {memWS: 300 * Mi},
		d: {memWS: 500 * Mi},
		e: {memWS: 50 * Mi},
		f: {memWS: 500 * Mi},
	}
	// a has no stats: first. Then those over their request (f, b at
	// priority 0, larger use first; c at priority 10), then the rest by
	// priority and use above request (e is 50Mi under, d 524Mi under).
	got := rank(t, signalByName(t, DiskLayout{}, SignalMemoryAvailable).Rank, []*v1.Pod{d, c, b, a, e, f}, use)
	if want := "a,f,b,c,e,d"; got != want {
		t.Errorf("memory ranking %s, want %s", got, want)
	}
	// allocatableMemory.available ranks the same way.
	got = rank(t, signalByName(t, DiskLayout{}, SignalAllocatableMemoryAvailable).Rank, []*v1.Pod{d, c, b, a, e, f}, use)
	if want := "a,f,b,c,e,d"; got != want {
		t.Errorf("allocatable memory ranking %s, want %s", got, want)
	}
}

func TestRankMemoryPodLevelRequests(t *testing.T) {
	// Pod-level requests replace the containers' (PodLevelResources, on in
	// 1.37): the container asks nothing, the pod asks 1Gi.
	p := newPod("pod-level", func(p *v1.Pod) {
		p.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: mustQ("1Gi")}}
	})
	q := newPod("container-level")
	use := map[*v1.Pod]podUse{p: {memWS: 600 * Mi}, q: {memWS: 10 * Mi}}
	got := rank(t, signalByName(t, DiskLayout{}, SignalMemoryAvailable).Rank, []*v1.Pod{p, q}, use)
	if want := "container-level,pod-level"; got != want {
		t.Errorf("ranking %s, want %s", got, want)
	}
}

func TestRankDiskPressure(t *testing.T) {
	emptyDir := func(name string, medium v1.StorageMedium) func(*v1.Pod) {
		return withVolume(v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: medium}}})
	}
	hostPath := withVolume(v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}})
	p1 := newPod("p1", withRequest(v1.ResourceEphemeralStorage, "1Gi"), emptyDir("scratch", ""))
	p2 := newPod("p2")
	p3 := newPod("p3", hostPath)
	p4 := newPod("p4", emptyDir("ram", v1.StorageMediumMemory))
	p5 := newPod("p5", withPriority(100))
	use := map[*v1.Pod]podUse{
		p1: {rootfs: 100 * Mi, logs: 100 * Mi, volumes: map[string]int64{"scratch": 300 * Mi}},
		p2: {rootfs: 10 * Mi},
		p3: {volumes: map[string]int64{"host": 200 * Mi}},
		p4: {volumes: map[string]int64{"ram": 1 * Gi}}, // memory-backed: not local storage
		p5: {rootfs: 5 * Mi},
	}
	got := rank(t, signalByName(t, DiskLayout{}, SignalNodeFsAvailable).Rank, []*v1.Pod{p1, p2, p3, p4, p5}, use)
	if want := "p3,p2,p5,p4,p1"; got != want {
		t.Errorf("nodefs ranking %s, want %s", got, want)
	}
}

func TestRankDiskPressureByLayout(t *testing.T) {
	writer := newPod("writer") // big writable layer
	logger := newPod("logger") // big logs
	use := map[*v1.Pod]podUse{
		writer: {rootfs: 1 * Gi, rootfsInodes: 10},
		logger: {logs: 10 * Mi, logsInod: 1},
	}
	pods := []*v1.Pod{writer, logger}
	for _, tc := range []struct {
		layout DiskLayout
		signal string
		want   string
	}{
		// One filesystem: everything counts; the writer uses more.
		{DiskLayout{}, SignalNodeFsAvailable, "writer,logger"},
		{DiskLayout{}, SignalImageFsAvailable, "writer,logger"},
		// Dedicated imagefs: nodefs counts logs and volumes, imagefs and
		// containerfs the writable layers.
		{DiskLayout{DedicatedImageFs: true}, SignalNodeFsAvailable, "logger,writer"},
		{DiskLayout{DedicatedImageFs: true}, SignalNodeFsInodesFree, "logger,writer"},
		{DiskLayout{DedicatedImageFs: true}, SignalImageFsAvailable, "writer,logger"},
		{DiskLayout{DedicatedImageFs: true}, SignalContainerFsAvailable, "writer,logger"},
		// Split: nodefs and containerfs count all of a pod's use; imagefs
		// none (pods tie and keep their order).
		{DiskLayout{DedicatedImageFs: true, SplitContainerFs: true}, SignalNodeFsAvailable, "writer,logger"},
		{DiskLayout{DedicatedImageFs: true, SplitContainerFs: true}, SignalContainerFsInodesFree, "writer,logger"},
		{DiskLayout{DedicatedImageFs: true, SplitContainerFs: true}, SignalImageFsAvailable, "writer,logger"},
	} {
		got := rank(t, signalByName(t, tc.layout, tc.signal).Rank, pods, use)
		if got != tc.want {
			t.Errorf("%+v %s: ranking %s, want %s", tc.layout, tc.signal, got, tc.want)
		}
		// Reversed input gives the same order unless pods tie.
		if tc.signal != SignalImageFsAvailable || !tc.layout.SplitContainerFs {
			if got := rank(t, signalByName(t, tc.layout, tc.signal).Rank, []*v1.Pod{logger, writer}, use); got != tc.want {
				t.Errorf("%+v %s reversed: ranking %s, want %s", tc.layout, tc.signal, got, tc.want)
			}
		}
	}
}

func TestRankInodes(t *testing.T) {
	// As the kubelet: inode use "exceeds" the (absent) inode request as soon
	// as there is any, and "use above request" subtracts the
	// ephemeral-storage request from the inode count.
	few := newPod("few", withRequest(v1.ResourceEphemeralStorage, "10"))
	many := newPod("many", withRequest(v1.ResourceEphemeralStorage, "1000"))
	use := map[*v1.Pod]podUse{few: {rootfsInodes: 50}, many: {rootfsInodes: 500}}
	got := rank(t, signalByName(t, DiskLayout{}, SignalNodeFsInodesFree).Rank, []*v1.Pod{many, few}, use)
	if want := "few,many"; got != want {
		t.Errorf("inode ranking %s, want %s", got, want)
	}
}

func TestRankPIDPressure(t *testing.T) {
	r1 := newPod("r1", withPriority(10))
	r2 := newPod("r2")
	r3 := newPod("r3")
	r4 := newPod("r4")
	use := map[*v1.Pod]podUse{r1: {procs: 1000}, r2: {procs: 5}, r3: {procs: 50}}
	got := rank(t, signalByName(t, DiskLayout{}, SignalPIDAvailable).Rank, []*v1.Pod{r1, r2, r3, r4}, use)
	if want := "r4,r3,r2,r1"; got != want {
		t.Errorf("pid ranking %s, want %s", got, want)
	}
}

func TestRankByUsage(t *testing.T) {
	// An embedder's ranking: use from a custom source, request from an
	// extended resource.
	gpu := map[string]int64{"small": 1, "big": 8, "fits": 2}
	r := RankByUsage(func(pod *v1.Pod, _ *statsapi.PodStats) (int64, int64) {
		return gpu[pod.Name], podRequest(pod, "example.com/gpu-memory")
	})
	small, big := newPod("small"), newPod("big")
	fits := newPod("fits", withRequest("example.com/gpu-memory", "4"))
	use := map[*v1.Pod]podUse{small: {}, big: {}, fits: {}}
	if got, want := rank(t, r, []*v1.Pod{fits, small, big}, use), "big,small,fits"; got != want {
		t.Errorf("ranking %s, want %s", got, want)
	}
}
