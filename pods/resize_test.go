package pods

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/resources/allocation"
	"github.com/nodekit/nodekit/status/podstatus"
)

// allocRuntime is a fakeRuntime that records, by pod, the CPU request of
// the pod it was last asked to sync (the allocation: the first container's,
// or "pod <request>" for pod-level resources) and the pending
// resize of the last status it generated.
type allocRuntime struct {
	*fakeRuntime
	mu      sync.Mutex
	synced  map[types.UID]string
	pending map[types.UID]*podstatus.ResizePending
}

func (r *allocRuntime) SyncPod(ctx context.Context, pod *v1.Pod) SyncResult {
	r.mu.Lock()
	if pod.Spec.Resources != nil {
		r.synced[pod.UID] = "pod " + pod.Spec.Resources.Requests.Cpu().String()
	} else {
		r.synced[pod.UID] = pod.Spec.Containers[0].Resources.Requests.Cpu().String()
	}
	r.mu.Unlock()
	return r.fakeRuntime.SyncPod(ctx, pod)
}

func (r *allocRuntime) PodStatus(ctx context.Context, pod *v1.Pod, opts podstatus.GenerateOptions) (v1.PodStatus, error) {
	r.mu.Lock()
	r.pending[pod.UID] = opts.ResizePending
	r.mu.Unlock()
	return r.fakeRuntime.PodStatus(ctx, pod, opts)
}

func (r *allocRuntime) state(uid types.UID) (string, *podstatus.ResizePending) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced[uid], r.pending[uid]
}

func cpuPod(name string, gen int64, cpu string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), Generation: gen,
			Annotations: map[string]string{podsource.ConfigSourceAnnotationKey: podsource.APIServerSource}},
		Spec: v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "c", Image: "busybox",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}},
	}
}

// startResize runs a controller on an allocRuntime for a node with cpu
// and memory allocatable (and 110 pods), admitting with GeneralPredicates;
// opts gives the rest (a recorder and an allocation checkpoint in a
// temporary directory unless set). It returns the runtime, a func that
// sends pods as the API server source's update op, and one that waits
// for cond (failing the test with what after 30 s).
func startResize(t *testing.T, cpu, mem string, opts Options) (rt *allocRuntime, send func(podsource.Op, ...*v1.Pod), waitFor func(what string, cond func() bool)) {
	t.Helper()
	rt = &allocRuntime{fakeRuntime: newFakeRuntime(), synced: map[types.UID]string{}, pending: map[types.UID]*podstatus.ResizePending{}}
	sources := &fakeSources{updates: make(chan podsource.Update)}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourcePods: resource.MustParse("110"), v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem),
	}}}
	opts.Sources, opts.Runtime, opts.Statuses = sources, rt, &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}
	if opts.Recorder == nil {
		opts.Recorder = record.NewFakeRecorder(100)
	}
	if opts.Allocations == nil {
		opts.Allocations = allocation.New(allocation.Options{RootDir: t.TempDir()})
	}
	opts.Node = func() (*v1.Node, bool) { return node, true }
	opts.Admit = []AdmitHandler{GeneralPredicates(klog.Background())}
	_, ctx := runController(t, opts)
	send = func(op podsource.Op, pods ...*v1.Pod) {
		t.Helper()
		select {
		case sources.updates <- podsource.Update{Op: op, Source: podsource.APIServerSource, Pods: pods}:
		case <-time.After(30 * time.Second):
			t.Fatalf("the controller did not take a %s update", op)
		}
	}
	waitFor = func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	return rt, send, waitFor
}

// TestResizeAdmission: a resize that fits the node's allocatable beside
// the other pods' allocations is allocated (checkpointed, synced to the
// runtime, ResizeStarted); one that does not is Deferred with the
// predicate's message, the runtime keeping the old allocation, and is
// allocated once another pod's resources are freed; a resize of pod-level
// resources is allocated or Deferred the same way.
func TestResizeAdmission(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	root := t.TempDir()
	rt, send, waitFor := startResize(t, "1", "1Gi", Options{Recorder: rec, Allocations: allocation.New(allocation.Options{RootDir: root})})
	events := func(reason string) bool {
		for {
			select {
			case e := <-rec.Events:
				if strings.Contains(e, reason) {
					return true
				}
			default:
				return false
			}
		}
	}

	a, b := cpuPod("a", 1, "300m"), cpuPod("b", 1, "500m")
	send(podsource.OpAdd, a, b)
	waitFor("both pods synced", func() bool {
		ca, _ := rt.state("a")
		cb, _ := rt.state("b")
		return ca == "300m" && cb == "500m"
	})

	// a grows to 400m: 400m + 500m fit in 1 CPU.
	a = cpuPod("a", 2, "400m")
	send(podsource.OpUpdate, a)
	waitFor("a's resize allocated", func() bool { cpu, p := rt.state("a"); return cpu == "400m" && p == nil })
	waitFor("ResizeStarted", func() bool { return events("ResizeStarted") })
	if got, _, _ := allocation.New(allocation.Options{RootDir: root}).AllocatedPod(cpuPod("a", 2, "1")); got.Spec.Containers[0].Resources.Requests.Cpu().String() != "400m" {
		t.Errorf("checkpoint in %s holds %s for a, want 400m", filepath.Join(root, allocation.CheckpointFile), got.Spec.Containers[0].Resources.Requests.Cpu())
	}

	// a grows to 600m: 600m + 500m do not fit now: Deferred, the runtime
	// keeps running the 400m allocation.
	a = cpuPod("a", 3, "600m")
	send(podsource.OpUpdate, a)
	waitFor("a's resize deferred", func() bool { _, p := rt.state("a"); return p != nil })
	cpu, p := rt.state("a")
	want := "Node didn't have enough resource: cpu, requested: 600, used: 500, capacity: 1000"
	if cpu != "400m" || p.Reason != v1.PodReasonDeferred || p.Message != want {
		t.Errorf("deferred resize: runtime synced %s, pending %+v; want 400m, Deferred %q", cpu, p, want)
	}
	waitFor("ResizeDeferred", func() bool { return events("ResizeDeferred") })

	// b goes: the deferred resize is allocated.
	send(podsource.OpRemove, b)
	waitFor("a's deferred resize allocated", func() bool { cpu, p := rt.state("a"); return cpu == "600m" && p == nil })

	// Pod-level resources are resized as the containers': allocated when
	// they fit (600m + 200m), Deferred when they do not (600m + 500m).
	pl := cpuPod("pl", 1, "50m")
	pl.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}
	send(podsource.OpAdd, pl)
	waitFor("pl synced", func() bool { cpu, _ := rt.state("pl"); return cpu == "pod 100m" })
	pl = pl.DeepCopy()
	pl.Generation = 2
	pl.Spec.Resources.Requests[v1.ResourceCPU] = resource.MustParse("200m")
	send(podsource.OpUpdate, pl)
	waitFor("pl's pod-level resize allocated", func() bool { cpu, p := rt.state("pl"); return cpu == "pod 200m" && p == nil })
	pl = pl.DeepCopy()
	pl.Generation = 3
	pl.Spec.Resources.Requests[v1.ResourceCPU] = resource.MustParse("500m")
	send(podsource.OpUpdate, pl)
	waitFor("pl's pod-level resize deferred", func() bool { _, p := rt.state("pl"); return p != nil })
	cpu, p = rt.state("pl")
	want = "Node didn't have enough resource: cpu, requested: 500, used: 600, capacity: 1000"
	if cpu != "pod 200m" || p.Reason != v1.PodReasonDeferred || p.Message != want {
		t.Errorf("deferred pod-level resize: runtime synced %s, pending %+v; want pod 200m, Deferred %q", cpu, p, want)
	}
	got, _, _ := allocation.New(allocation.Options{RootDir: root}).AllocatedPod(pl)
	if got.Spec.Resources.Requests.Cpu().String() != "200m" {
		t.Errorf("checkpoint holds pod-level %s for pl, want 200m", got.Spec.Resources.Requests.Cpu())
	}
}

// TestPodLevelResizeGateOff: with InPlacePodLevelResourcesVerticalScaling
// off, a resize of pod-level resources is Infeasible with the kubelet's
// message, and the runtime keeps the allocation; a container's resize is
// still allocated.
func TestPodLevelResizeGateOff(t *testing.T) {
	gates, err := features.New(klog.Background(), map[string]bool{"InPlacePodLevelResourcesVerticalScaling": false})
	if err != nil {
		t.Fatal(err)
	}
	rt, send, waitFor := startResize(t, "1", "1Gi", Options{Features: gates})
	pl := cpuPod("pl", 1, "50m")
	pl.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}
	send(podsource.OpAdd, pl)
	waitFor("pl synced", func() bool { cpu, _ := rt.state("pl"); return cpu == "pod 100m" })
	pl = pl.DeepCopy()
	pl.Generation = 2
	pl.Spec.Resources.Requests[v1.ResourceCPU] = resource.MustParse("200m")
	send(podsource.OpUpdate, pl)
	waitFor("pl's pod-level resize pending", func() bool { _, p := rt.state("pl"); return p != nil })
	cpu, p := rt.state("pl")
	if cpu != "pod 100m" || p.Reason != v1.PodReasonInfeasible || p.Message != "InPlacePodLevelResourcesVerticalScaling is disabled" {
		t.Errorf("pod-level resize with the gate off: runtime synced %s, pending %+v; want pod 100m, Infeasible", cpu, p)
	}

	a := cpuPod("a", 1, "100m")
	send(podsource.OpAdd, a)
	waitFor("a synced", func() bool { cpu, _ := rt.state("a"); return cpu == "100m" })
	send(podsource.OpUpdate, cpuPod("a", 2, "200m"))
	waitFor("a's container resize allocated", func() bool { cpu, p := rt.state("a"); return cpu == "200m" && p == nil })
}

// TestGuaranteedResizeUnderStaticCPUManager: with the static CPU manager
// policy, an in-place resize of a Guaranteed pod's CPU is Infeasible with
// the kubelet's message (InPlacePodVerticalScalingExclusiveCPUs off, its
// default), its memory is resized; a Burstable pod's CPU is resized.
func TestGuaranteedResizeUnderStaticCPUManager(t *testing.T) {
	allocs := allocation.New(allocation.Options{RootDir: t.TempDir()})
	rt, send, waitFor := startResize(t, "4", "4Gi", Options{Allocations: allocs, CPUManagerPolicy: "static",
		QOSClass: func(p *v1.Pod) v1.PodQOSClass {
			if p.Name == "g" {
				return v1.PodQOSGuaranteed
			}
			return v1.PodQOSBurstable
		},
	})
	guaranteed := func(gen int64, cpu, mem string) *v1.Pod {
		p := cpuPod("g", gen, cpu)
		r := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: r, Limits: r.DeepCopy()}
		return p
	}
	send(podsource.OpAdd, guaranteed(1, "1", "1Gi"), cpuPod("b", 1, "500m"))
	waitFor("both synced", func() bool { g, _ := rt.state("g"); b, _ := rt.state("b"); return g == "1" && b == "500m" })

	send(podsource.OpUpdate, guaranteed(2, "2", "1Gi"))
	waitFor("g's CPU resize pending", func() bool { _, p := rt.state("g"); return p != nil })
	if cpu, p := rt.state("g"); cpu != "1" || p.Reason != v1.PodReasonInfeasible || p.Message != `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"` {
		t.Errorf("Guaranteed CPU resize: runtime synced %s, pending %+v; want 1, Infeasible", cpu, p)
	}
	// Memory only: allocated.
	send(podsource.OpUpdate, guaranteed(3, "1", "2Gi"))
	waitFor("g's memory resize allocated", func() bool {
		_, p := rt.state("g")
		got, _, _ := allocs.AllocatedPod(guaranteed(3, "1", "2Gi"))
		return p == nil && got.Spec.Containers[0].Resources.Requests.Memory().String() == "2Gi"
	})
	send(podsource.OpUpdate, cpuPod("b", 2, "700m"))
	waitFor("b's CPU resize allocated", func() bool { cpu, p := rt.state("b"); return cpu == "700m" && p == nil })
}

// storedCheckRuntime is a fakeRuntime whose SyncPod records, by pod,
// whether the allocation checkpoint in root held the pod's allocation when
// the runtime was asked to act.
type storedCheckRuntime struct {
	*fakeRuntime
	root   string
	mu     sync.Mutex
	stored map[types.UID]bool
}

func (r *storedCheckRuntime) SyncPod(ctx context.Context, pod *v1.Pod) SyncResult {
	onDisk := allocation.New(allocation.Options{RootDir: r.root}).Allocated(pod.UID)
	r.mu.Lock()
	if _, seen := r.stored[pod.UID]; !seen {
		r.stored[pod.UID] = onDisk
	}
	r.mu.Unlock()
	return r.fakeRuntime.SyncPod(ctx, pod)
}

// TestAllocationIsStoredBeforeTheRuntimeActs: admission records a burst's
// allocations in memory (allocation.Manager.Record), and every pod's
// allocation is in the checkpoint on disk before the runtime's first
// SyncPod of the pod.
func TestAllocationIsStoredBeforeTheRuntimeActs(t *testing.T) {
	root := t.TempDir()
	rt := &storedCheckRuntime{fakeRuntime: newFakeRuntime(), root: root, stored: map[types.UID]bool{}}
	sources := &fakeSources{updates: make(chan podsource.Update)}
	_, ctx := runController(t, Options{Sources: sources, Runtime: rt, Statuses: &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}},
		Allocations: allocation.New(allocation.Options{RootDir: root}), Node: knownNode})
	const pods = 30
	for i := range pods {
		select {
		case sources.updates <- podsource.Update{Op: podsource.OpAdd, Source: podsource.APIServerSource, Pods: []*v1.Pod{cpuPod(fmt.Sprintf("p%02d", i), 1, "10m")}}:
		case <-time.After(30 * time.Second):
			t.Fatal("the controller did not take an add")
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return len(rt.stored) == pods, nil
	}); err != nil {
		t.Fatalf("not every pod was synced: %v", err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for uid, ok := range rt.stored {
		if !ok {
			t.Errorf("pod %s: the runtime was asked to act before its allocation was in the checkpoint", uid)
		}
	}
}
