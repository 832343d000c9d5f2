package eviction

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const (
	Ki = int64(1) << 10
	Mi = int64(1) << 20
	Gi = int64(1) << 30
)

func u64(v int64) *uint64 { return ptr.To(uint64(v)) }

// summaryBuilder builds summaries for tests. Zero fields leave the stats
// out.
type node struct {
	memAvail, memWS        int64 // node memory
	memUsage               int64 // usage_in_bytes; defaults to memWS
	podsAvail, podsWS      int64 // "pods" system container; -1 avail: absent
	nodefsAvail, nodefsCap int64
	nodefsIFree, nodefsI   int64
	imgAvail, imgCap       int64
	imgIFree, imgI         int64
	cfsAvail, cfsCap       int64
	maxPID, procs          int64
}

func (n node) summary(now time.Time, pods ...statsapi.PodStats) *statsapi.Summary {
	t := metav1.NewTime(now)
	s := &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "node-1"}, Pods: pods}
	if n.memAvail != 0 || n.memWS != 0 {
		usage := n.memUsage
		if usage == 0 {
			usage = n.memWS
		}
		s.Node.Memory = &statsapi.MemoryStats{Time: t, AvailableBytes: u64(n.memAvail), WorkingSetBytes: u64(n.memWS), UsageBytes: u64(usage)}
	}
	if n.podsWS != 0 {
		ms := &statsapi.MemoryStats{Time: t, WorkingSetBytes: u64(n.podsWS), UsageBytes: u64(n.podsWS)}
		if n.podsAvail >= 0 {
			ms.AvailableBytes = u64(n.podsAvail)
		}
		s.Node.SystemContainers = append(s.Node.SystemContainers, statsapi.ContainerStats{Name: statsapi.SystemContainerPods, Memory: ms})
	}
	fsStats := func(avail, capacity, ifree, inodes int64) *statsapi.FsStats {
		fs := &statsapi.FsStats{Time: t}
		if capacity != 0 {
			fs.AvailableBytes, fs.CapacityBytes, fs.UsedBytes = u64(avail), u64(capacity), u64(capacity-avail)
		}
		if inodes != 0 {
			fs.InodesFree, fs.Inodes, fs.InodesUsed = u64(ifree), u64(inodes), u64(inodes-ifree)
		}
		return fs
	}
	if n.nodefsCap != 0 || n.nodefsI != 0 {
		s.Node.Fs = fsStats(n.nodefsAvail, n.nodefsCap, n.nodefsIFree, n.nodefsI)
	}
	if n.imgCap != 0 || n.imgI != 0 || n.cfsCap != 0 {
		s.Node.Runtime = &statsapi.RuntimeStats{}
		if n.imgCap != 0 || n.imgI != 0 {
			s.Node.Runtime.ImageFs = fsStats(n.imgAvail, n.imgCap, n.imgIFree, n.imgI)
		}
		if n.cfsCap != 0 {
			s.Node.Runtime.ContainerFs = fsStats(n.cfsAvail, n.cfsCap, 0, 0)
		}
	}
	if n.maxPID != 0 {
		s.Node.Rlimit = &statsapi.RlimitStats{Time: t, MaxPID: ptr.To(n.maxPID), NumOfRunningProcesses: ptr.To(n.procs)}
	}
	return s
}

// podSpec builds a pod; each container is "name" plus optional
// requests/limits set with the helpers below.
func newPod(name string, opts ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"), Generation: 3},
		Spec: v1.PodSpec{
			Containers:                    []v1.Container{{Name: name}},
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withPriority(prio int32) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.Priority = ptr.To(prio) }
}

func withRequest(res v1.ResourceName, q string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		c := &p.Spec.Containers[0]
		if c.Resources.Requests == nil {
			c.Resources.Requests = v1.ResourceList{}
		}
		c.Resources.Requests[res] = resource.MustParse(q)
	}
}

func withLimit(res v1.ResourceName, q string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		c := &p.Spec.Containers[0]
		if c.Resources.Limits == nil {
			c.Resources.Limits = v1.ResourceList{}
		}
		c.Resources.Limits[res] = resource.MustParse(q)
	}
}

func withVolume(v v1.Volume) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, v) }
}

func withAnnotation(k, val string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = val
	}
}

// podStats builds a pod's stats with one container named as the pod.
type podUse struct {
	memWS                  int64
	rootfs, logs           int64
	rootfsInodes, logsInod int64
	volumes                map[string]int64
	ephemeral              int64
	procs                  int64
}

func podStats(p *v1.Pod, use podUse) statsapi.PodStats {
	ps := statsapi.PodStats{PodRef: statsapi.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)}}
	c := statsapi.ContainerStats{
		Name:   p.Spec.Containers[0].Name,
		Memory: &statsapi.MemoryStats{WorkingSetBytes: u64(use.memWS)},
		Rootfs: &statsapi.FsStats{UsedBytes: u64(use.rootfs), InodesUsed: u64(use.rootfsInodes)},
		Logs:   &statsapi.FsStats{UsedBytes: u64(use.logs), InodesUsed: u64(use.logsInod)},
	}
	ps.Containers = []statsapi.ContainerStats{c}
	ps.Memory = &statsapi.MemoryStats{WorkingSetBytes: u64(use.memWS)}
	for name, used := range use.volumes {
		ps.VolumeStats = append(ps.VolumeStats, statsapi.VolumeStats{Name: name, FsStats: statsapi.FsStats{UsedBytes: u64(used), InodesUsed: u64(1)}})
	}
	if use.ephemeral != 0 {
		ps.EphemeralStorage = &statsapi.FsStats{UsedBytes: u64(use.ephemeral)}
	}
	ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptr.To(uint64(use.procs))}
	return ps
}

type killCall struct {
	pod    *v1.Pod
	grace  int64
	status v1.PodStatus
}

// harness runs a Manager on fakes: a summary the test sets, pods, a kill
// func that records, a fake clock, a fake recorder and a registry.
type harness struct {
	t        *testing.T
	clock    *testingclock.FakeClock
	m        *Manager
	recorder *record.FakeRecorder
	reg      *prometheus.Registry

	mu       sync.Mutex
	calls    int
	summary  *statsapi.Summary
	pods     []*v1.Pod
	killed   []killCall
	reclaims []string
	// afterReclaim, when set, becomes the summary once a reclaim func ran.
	afterReclaim *statsapi.Summary
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{
		t:        t,
		clock:    testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		recorder: record.NewFakeRecorder(100),
		reg:      prometheus.NewRegistry(),
	}
	opts.NodeName = "node-1"
	opts.Summary = func(context.Context) (*statsapi.Summary, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls++
		return h.summary, nil
	}
	opts.ActivePods = func() []*v1.Pod {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.pods
	}
	opts.KillPod = func(_ context.Context, pod *v1.Pod, grace *int64, statusFn func(*v1.PodStatus)) error {
		st := *pod.Status.DeepCopy()
		statusFn(&st)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.killed = append(h.killed, killCall{pod: pod, grace: *grace, status: st})
		return nil
	}
	reclaim := func(name string) ReclaimFunc {
		return func(context.Context) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.reclaims = append(h.reclaims, name)
			if h.afterReclaim != nil {
				h.summary = h.afterReclaim
			}
			return nil
		}
	}
	if opts.DeleteUnusedContainers == nil {
		opts.DeleteUnusedContainers = reclaim("containers")
	}
	if opts.DeleteUnusedImages == nil {
		opts.DeleteUnusedImages = reclaim("images")
	}
	opts.Clock = h.clock
	opts.Recorder = h.recorder
	opts.Registerer = h.reg
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.m = m
	return h
}

func (h *harness) set(s *statsapi.Summary, pods ...*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.summary, h.pods = s, pods
}

func (h *harness) sync() []*v1.Pod {
	h.t.Helper()
	evicted, err := h.m.synchronize(testContext(h.t))
	if err != nil {
		h.t.Fatalf("synchronize: %v", err)
	}
	return evicted
}

func (h *harness) kills() []killCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]killCall(nil), h.killed...)
}

func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func names(pods []*v1.Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, p.Name)
	}
	return strings.Join(s, ",")
}

// minimalOptions has the required funcs, doing nothing.
func minimalOptions() Options {
	return Options{
		Summary:    func(context.Context) (*statsapi.Summary, error) { return &statsapi.Summary{}, nil },
		ActivePods: func() []*v1.Pod { return nil },
		KillPod:    func(context.Context, *v1.Pod, *int64, func(*v1.PodStatus)) error { return nil },
	}
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

// testContext carries a logger that writes to the test's log.
func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

func (h *harness) summaryCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}
