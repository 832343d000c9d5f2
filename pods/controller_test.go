package pods

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/client-go/tools/record"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

// fakeRuntime runs pods in memory. killGate, when set, blocks KillPod until
// it is closed or the call's context ends.
type fakeRuntime struct {
	mu       sync.Mutex
	running  map[types.UID]bool
	orphans  []*v1.Pod
	kills    []*int64
	removed  map[types.UID]int
	gcs      atomic.Int32
	gcKeep   []func(types.UID) bool
	killGate chan struct{}
	// killErr, when set, fails every KillPod once the pod is stopped (a
	// volume that cannot be torn down).
	killErr error
	// generate, when set, makes PodStatus generate a running pod's status
	// with podstatus.Generate from the pod it is given (its one container
	// "app" running), so conditions follow that pod object.
	generate bool
	events   chan *podstate.PodLifecycleEvent
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{running: map[types.UID]bool{}, removed: map[types.UID]int{}, events: make(chan *podstate.PodLifecycleEvent)}
}

func (r *fakeRuntime) PodStatus(_ context.Context, pod *v1.Pod, opts podstatus.GenerateOptions) (v1.PodStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.running[pod.UID] && r.generate:
		started := time.Unix(1, 0)
		rs := &podstate.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace, Containers: []*podstate.ContainerStatus{
			{ID: "c1", Type: "containerd", Name: "app", State: podstate.ContainerStateRunning, CreatedAt: started, StartedAt: started},
		}}
		return podstatus.Generate(pod, rs, nil, opts), nil
	case r.running[pod.UID]:
		return v1.PodStatus{Phase: v1.PodRunning}, nil
	case opts.Terminal:
		return v1.PodStatus{Phase: v1.PodSucceeded}, nil
	}
	return v1.PodStatus{Phase: v1.PodPending}, nil
}

func (r *fakeRuntime) SyncPod(_ context.Context, pod *v1.Pod) SyncResult {
	r.mu.Lock()
	r.running[pod.UID] = true
	r.mu.Unlock()
	return SyncResult{}
}

func (r *fakeRuntime) KillPod(ctx context.Context, pod *v1.Pod, grace *int64) error {
	r.mu.Lock()
	r.kills = append(r.kills, grace)
	gate := r.killGate
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	delete(r.running, pod.UID)
	err := r.killErr
	r.mu.Unlock()
	return err
}

func (r *fakeRuntime) RemovePod(_ context.Context, uid types.UID) error {
	r.mu.Lock()
	r.removed[uid]++
	r.mu.Unlock()
	return nil
}

func (r *fakeRuntime) RuntimePods(context.Context) ([]*v1.Pod, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*v1.Pod(nil), r.orphans...), nil
}

func (r *fakeRuntime) Events() <-chan *podstate.PodLifecycleEvent { return r.events }

func (r *fakeRuntime) GarbageCollect(_ context.Context, keep func(types.UID) bool) error {
	r.gcs.Add(1)
	r.mu.Lock()
	r.gcKeep = append(r.gcKeep, keep)
	r.mu.Unlock()
	return nil
}

// fakeSources feeds updates by hand, as the one source "api".
type fakeSources struct {
	updates chan podsource.Update
}

func (s *fakeSources) Updates() <-chan podsource.Update { return s.updates }
func (s *fakeSources) Names() []string                  { return []string{podsource.APIServerSource} }

// fakeStatuses is a pod status sink in memory.
type fakeStatuses struct {
	mu       sync.Mutex
	statuses map[types.UID]v1.PodStatus
	// sets counts SetPodStatus calls by pod.
	sets map[types.UID]int
}

func (f *fakeStatuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.statuses[uid]
	return s, ok
}

func (f *fakeStatuses) SetPodStatus(pod *v1.Pod, s v1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[pod.UID] = s
	if f.sets == nil {
		f.sets = map[types.UID]int{}
	}
	f.sets[pod.UID]++
}

func (f *fakeStatuses) setCount(uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sets[uid]
}

func (f *fakeStatuses) TerminatePod(*v1.Pod) {}

func (f *fakeStatuses) RemovePod(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.statuses, uid)
}

func (f *fakeStatuses) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.statuses)
}

type controllerHarness struct {
	t        *testing.T
	c        *Controller
	rt       *fakeRuntime
	sources  *fakeSources
	statuses *fakeStatuses
	clock    *testclock.FakeClock
	reg      *prometheus.Registry
	ctx      context.Context
}

func newControllerHarness(t *testing.T, configure ...func(*Options)) *controllerHarness {
	t.Helper()
	h := &controllerHarness{
		t: t, rt: newFakeRuntime(), sources: &fakeSources{updates: make(chan podsource.Update)},
		statuses: &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}, clock: testclock.NewFakeClock(time.Now()),
		reg: prometheus.NewPedanticRegistry(),
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourcePods: resource.MustParse("5000"), v1.ResourceCPU: resource.MustParse("8"), v1.ResourceMemory: resource.MustParse("8Gi"),
	}}}
	opts := Options{
		Sources: h.sources, Runtime: h.rt, Statuses: h.statuses, Clock: h.clock, Registerer: h.reg,
		Node:  func() (*v1.Node, bool) { return node, true },
		Admit: []AdmitHandler{GeneralPredicates(klog.Background())},
	}
	for _, f := range configure {
		f(&opts)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return h
}

func (h *controllerHarness) send(op podsource.Op, pods ...*v1.Pod) {
	h.t.Helper()
	select {
	case h.sources.updates <- podsource.Update{Op: op, Source: podsource.APIServerSource, Pods: pods}:
	case <-time.After(30 * time.Second):
		h.t.Fatalf("the controller did not take a %s update", op)
	}
}

func (h *controllerHarness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	if err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
}

// sizes are the Controller's bookkeeping: what must return to zero once
// every pod is gone.
func (h *controllerHarness) sizes() string {
	c := h.c
	c.mu.Lock()
	pods, orphans, stopped, retries := len(c.pods), len(c.orphans), len(c.stopped), len(c.terminateRetries)
	c.mu.Unlock()
	c.workers.mu.Lock()
	workers := len(c.workers.workers)
	c.workers.mu.Unlock()
	c.store.mu.RLock()
	known := len(c.store.known)
	c.store.mu.RUnlock()
	return fmt.Sprintf("records=%d orphans=%d killWaiters=%d terminateRetries=%d workers=%d active=%d known=%d statuses=%d",
		pods, orphans, stopped, retries, workers, c.store.Len(), known, h.statuses.len())
}

func churnPod(i int) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d", i))},
		Spec:       v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}
}

// TestChurnLeavesNothingBehind: 1,000 pods created, run and removed leave
// no record, worker, kill waiter, active pod or status behind.
func TestChurnLeavesNothingBehind(t *testing.T) {
	h := newControllerHarness(t)
	const n = 1000
	idle := h.sizes()
	var all []*v1.Pod
	for i := range n {
		all = append(all, churnPod(i))
	}
	h.send(podsource.OpAdd, all...)
	h.waitFor("every pod running", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return len(h.rt.running) == n
	})
	h.send(podsource.OpRemove, all...)
	h.waitFor("every pod removed", func() bool { return h.sizes() == idle })
	h.rt.mu.Lock()
	defer h.rt.mu.Unlock()
	if len(h.rt.removed) != n || len(h.rt.running) != 0 {
		t.Errorf("runtime: %d pods removed, %d running; want %d and 0", len(h.rt.removed), len(h.rt.running), n)
	}
}

// TestStoreKnowsWhatTheLoopKnows: the Store, which the volume manager
// reads without depending on the loop, says the sources are ready once the
// loop handled their first update, and knows a pod from its delivery until
// its worker stopped and removed it, and an orphan while housekeeping stops
// it.
func TestStoreKnowsWhatTheLoopKnows(t *testing.T) {
	h := newControllerHarness(t)
	store := h.c.Store()
	orphan := churnPod(9)
	h.rt.killGate = make(chan struct{})
	h.rt.orphans = []*v1.Pod{orphan}
	if store.SourcesReady() || store.Known(orphan.UID) {
		t.Fatalf("before any update: SourcesReady %v, orphan known %v; want false, false", store.SourcesReady(), store.Known(orphan.UID))
	}
	pod := churnPod(1)
	h.send(podsource.OpAdd, pod)
	h.waitFor("the sources ready", store.SourcesReady)
	if !store.Known(pod.UID) {
		t.Error("a delivered pod is not known")
	}
	h.waitFor("the orphan known while housekeeping stops it", func() bool {
		h.clock.Step(DefaultHousekeepingPeriod)
		return store.Known(orphan.UID)
	})
	h.rt.mu.Lock()
	h.rt.orphans = nil
	h.rt.mu.Unlock()
	close(h.rt.killGate)
	h.waitFor("the orphan forgotten once stopped", func() bool { return !store.Known(orphan.UID) })
	h.send(podsource.OpRemove, pod)
	h.waitFor("the removed pod forgotten", func() bool { return !store.Known(pod.UID) })
}

// TestHousekeepingOfAnEmptyNode: housekeeping looks every
// HousekeepingPeriod while the sources are not ready and while the node
// holds anything, every idleHousekeepingPeriod once a round found it
// holding nothing, and every HousekeepingPeriod again from the next pod
// update on; an orphan that turns up without one is found by the idle
// rounds.
func TestHousekeepingOfAnEmptyNode(t *testing.T) {
	// The waits housekeeping asks for, in order (container GC's minute
	// left out).
	waits := make(chan time.Duration, 64)
	h := newControllerHarness(t, func(o *Options) {
		o.Align = func(d time.Duration) time.Duration {
			if d != gcPeriod {
				waits <- d
			}
			return d
		}
	})
	next := func(want time.Duration, when string) {
		t.Helper()
		select {
		case got := <-waits:
			if got != want {
				t.Fatalf("%s: housekeeping waits %s, want %s", when, got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: housekeeping asked for no wait", when)
		}
		// Its timer and container GC's armed: the next step fires it.
		h.waitFor("housekeeping's timer armed", func() bool { return h.clock.Waiters() == 2 })
	}
	next(DefaultHousekeepingPeriod, "at the start")
	h.clock.Step(DefaultHousekeepingPeriod)
	next(DefaultHousekeepingPeriod, "before the sources are ready")
	h.send(podsource.OpAdd)
	h.waitFor("the sources ready", h.c.SourcesReady)
	h.clock.Step(DefaultHousekeepingPeriod)
	next(idleHousekeepingPeriod, "after a round that found the node empty")
	// A pod update, whatever it carries, brings back the 2 s rounds.
	h.send(podsource.OpAdd)
	next(DefaultHousekeepingPeriod, "after a pod update")
	h.clock.Step(DefaultHousekeepingPeriod)
	next(idleHousekeepingPeriod, "after another empty round")

	orphan := churnPod(9)
	h.rt.mu.Lock()
	h.rt.orphans = []*v1.Pod{orphan}
	h.rt.mu.Unlock()
	h.clock.Step(idleHousekeepingPeriod)
	next(DefaultHousekeepingPeriod, "after a round that found an orphan")
	h.waitFor("the orphan stopped and removed", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.removed[orphan.UID] >= 1
	})
	h.rt.mu.Lock()
	h.rt.orphans = nil
	h.rt.mu.Unlock()
	h.waitFor("the orphan forgotten once stopped", func() bool { return !h.c.Store().Known(orphan.UID) })
	h.clock.Step(DefaultHousekeepingPeriod)
	next(idleHousekeepingPeriod, "after the orphan went")
	if err := h.c.SyncLoopHealthy(); err != nil {
		t.Errorf("SyncLoopHealthy with idle rounds: %v", err)
	}
}

// TestNothingIsRemovedBeforeEverySourceReported: neither housekeeping nor
// garbage collection touches the runtime until every source has reported
// (a pod not seen yet is not gone).
func TestNothingIsRemovedBeforeEverySourceReported(t *testing.T) {
	h := newControllerHarness(t)
	h.rt.orphans = []*v1.Pod{churnPod(7)}
	for range 3 {
		h.clock.Step(gcPeriod)
		time.Sleep(10 * time.Millisecond)
	}
	h.rt.mu.Lock()
	kills := len(h.rt.kills)
	h.rt.mu.Unlock()
	if kills != 0 || h.rt.gcs.Load() != 0 {
		t.Fatalf("before the sources reported: %d kills, %d garbage collections", kills, h.rt.gcs.Load())
	}
	h.send(podsource.OpAdd)
	// Housekeeping finds the orphan again every period (the fake runtime
	// keeps listing it), so it may be removed more than once.
	h.waitFor("the orphan stopped and removed", func() bool {
		h.clock.Step(DefaultHousekeepingPeriod)
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.removed["uid-7"] >= 1
	})
	h.waitFor("garbage collection", func() bool {
		h.clock.Step(gcPeriod)
		return h.rt.gcs.Load() > 0
	})
}

// TestShorterGracePeriodCutsAStopShort: a pod being stopped with its 30s
// grace period is stopped again with 1s when a deletion with 1s arrives.
func TestShorterGracePeriodCutsAStopShort(t *testing.T) {
	h := newControllerHarness(t)
	h.rt.killGate = make(chan struct{})
	pod := churnPod(1)
	h.send(podsource.OpAdd, pod)
	h.waitFor("the pod running", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.running[pod.UID]
	})
	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp, deleted.DeletionGracePeriodSeconds = &now, ptrTo[int64](30)
	h.send(podsource.OpDelete, deleted)
	h.waitFor("a stop with 30s", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return len(h.rt.kills) == 1
	})
	shorter := deleted.DeepCopy()
	shorter.DeletionGracePeriodSeconds = ptrTo[int64](1)
	h.send(podsource.OpDelete, shorter)
	h.waitFor("a second stop", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return len(h.rt.kills) >= 2
	})
	h.rt.mu.Lock()
	first, second := h.rt.kills[0], h.rt.kills[len(h.rt.kills)-1]
	close(h.rt.killGate)
	h.rt.mu.Unlock()
	if first == nil || *first != 30 || second == nil || *second != 1 {
		t.Errorf("grace periods of the stops: %v then %v, want 30 then 1", deref(first), deref(second))
	}
}

// TestKillPodAmendsTheFinalStatus: Controller.KillPod (an eviction) stops
// the pod, applies statusFn to its final status and returns once stopped.
func TestKillPodAmendsTheFinalStatus(t *testing.T) {
	h := newControllerHarness(t)
	pod := churnPod(2)
	h.send(podsource.OpAdd, pod)
	h.waitFor("the pod running", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.running[pod.UID]
	})
	err := h.c.KillPod(h.ctx, pod, ptrTo[int64](1), func(s *v1.PodStatus) {
		s.Phase, s.Reason, s.Message = v1.PodFailed, "Evicted", "The node was low on resource: memory."
	})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := h.statuses.GetPodStatus(pod.UID)
	if st.Phase != v1.PodFailed || st.Reason != "Evicted" {
		t.Errorf("final status %s/%s, want Failed/Evicted", st.Phase, st.Reason)
	}
	if h.c.store.Len() != 0 {
		t.Error("a killed pod is still active")
	}
	if err := h.c.KillPod(h.ctx, churnPod(3), nil, nil); err == nil {
		t.Error("KillPod of a pod the node does not run succeeded")
	}
}

// TestRemovedPodStatusIsDroppedAtOnce: the status of a pod removed from
// its source is dropped before its containers are stopped, not once the
// runtime removed it: the sink would keep trying to write a status for an
// object that is gone, and the Node authorizer refuses every try.
func TestRemovedPodStatusIsDroppedAtOnce(t *testing.T) {
	h := newControllerHarness(t)
	pod := churnPod(5)
	h.send(podsource.OpAdd, pod)
	h.waitFor("its running status", func() bool {
		st, ok := h.statuses.GetPodStatus(pod.UID)
		return ok && st.Phase == v1.PodRunning
	})
	gate := make(chan struct{})
	h.rt.mu.Lock()
	h.rt.killGate = gate
	h.rt.mu.Unlock()
	h.send(podsource.OpRemove, pod)
	h.waitFor("the kill started", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return len(h.rt.kills) > 0
	})
	if _, ok := h.statuses.GetPodStatus(pod.UID); ok {
		t.Error("the status of a pod removed from its source is kept while its containers stop")
	}
	close(gate)
	h.waitFor("the pod removed", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.removed[pod.UID] == 1
	})
}

// TestRemovedPodStatusIsNotWritten: a pod removed from its source (its
// API object deleted, say by a force deletion) is stopped and removed
// without a final status: there is no object left to write it to.
func TestRemovedPodStatusIsNotWritten(t *testing.T) {
	h := newControllerHarness(t)
	pod := churnPod(4)
	h.send(podsource.OpAdd, pod)
	h.waitFor("the pod running", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.running[pod.UID]
	})
	h.waitFor("its running status", func() bool {
		st, ok := h.statuses.GetPodStatus(pod.UID)
		return ok && st.Phase == v1.PodRunning
	})
	sets := h.statuses.setCount(pod.UID)
	h.send(podsource.OpRemove, pod)
	h.waitFor("the pod removed", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.removed[pod.UID] == 1
	})
	if n := h.statuses.setCount(pod.UID) - sets; n != 0 {
		t.Errorf("%d statuses set for a pod removed from its source, want none", n)
	}
	h.rt.mu.Lock()
	defer h.rt.mu.Unlock()
	if h.rt.running[pod.UID] {
		t.Error("the removed pod still runs")
	}
}

func ptrTo[T any](v T) *T { return &v }

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestKillPodThenPodTerminated: a pod the eviction manager kills is not
// terminated until its containers are stopped and its final status, amended
// by statusFn, is set; a pod the Controller does not know counts as
// terminated.
func TestKillPodThenPodTerminated(t *testing.T) {
	sources := &fakeSources{updates: make(chan podsource.Update, 1)}
	rt := newFakeRuntime()
	statuses := &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}
	c, ctx := runController(t, Options{Sources: sources, Runtime: rt, Statuses: statuses, Node: knownNode})

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}}
	sources.updates <- podsource.Update{Op: podsource.OpAdd, Pods: []*v1.Pod{pod}, Source: "api"}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		st, ok := statuses.GetPodStatus(pod.UID)
		return ok && st.Phase == v1.PodRunning, nil
	}); err != nil {
		t.Fatalf("the pod did not run: %v", err)
	}
	if c.PodTerminated(pod.UID) {
		t.Fatal("PodTerminated is true for a running pod")
	}
	if !c.PodTerminated("uid-unknown") {
		t.Error("PodTerminated is false for a pod the Controller does not know")
	}

	grace := int64(1)
	if err := c.KillPod(ctx, pod, &grace, func(st *v1.PodStatus) { st.Phase, st.Reason = v1.PodFailed, "Evicted" }); err != nil {
		t.Fatal(err)
	}
	if !c.PodTerminated(pod.UID) {
		t.Error("PodTerminated is false after KillPod returned")
	}
	if st, _ := statuses.GetPodStatus(pod.UID); st.Phase != v1.PodFailed || st.Reason != "Evicted" {
		t.Errorf("final status = %s/%s, want Failed/Evicted", st.Phase, st.Reason)
	}
	if n := len(c.Store().Active()); n != 0 {
		t.Errorf("%d active pods after the kill, want 0", n)
	}
}

// TestGarbageCollectWaitsForSources: an on-demand garbage collection does
// nothing until every source has reported, then runs the runtime's with the
// Controller's pods kept.
func TestGarbageCollectWaitsForSources(t *testing.T) {
	rt := newFakeRuntime()
	c, _, ctx := newIdleController(t, rt)
	if err := c.GarbageCollect(ctx); err != nil || len(rt.gcKeep) != 0 {
		t.Fatalf("GarbageCollect before the sources reported: err %v, %d runtime runs; want none", err, len(rt.gcKeep))
	}
	c.sourceHandled(podsource.APIServerSource)
	c.add(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}})
	if err := c.GarbageCollect(ctx); err != nil || len(rt.gcKeep) != 1 {
		t.Fatalf("GarbageCollect: err %v, %d runtime runs; want 1", err, len(rt.gcKeep))
	}
	if keep := rt.gcKeep[0]; !keep("uid-web") || keep("uid-other") {
		t.Error("the runtime's garbage collection does not keep exactly the pods the Controller knows")
	}
}

// newIdleController builds a Controller on rt, knowing its node, whose Run
// is not started: the test calls its methods directly. Its workers are
// waited for when the test ends.
func newIdleController(t *testing.T, rt Runtime) (*Controller, *fakeSources, context.Context) {
	t.Helper()
	sources := &fakeSources{updates: make(chan podsource.Update, 1)}
	statuses := &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}
	c, err := New(Options{Sources: sources, Runtime: rt, Statuses: statuses, Node: knownNode})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.workers.wait() })
	return c, sources, ctx
}

// knownNode is an Options.Node that knows the node at once: the loop admits
// no pod before it knows the node.
func knownNode() (*v1.Node, bool) {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, true
}

// deleterRuntime is a fakeRuntime that is an UnusedContainerDeleter.
type deleterRuntime struct {
	*fakeRuntime
	keep, active []func(types.UID) bool
}

func (r *deleterRuntime) DeleteAllUnusedContainers(_ context.Context, keep, active func(types.UID) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keep = append(r.keep, keep)
	r.active = append(r.active, active)
	return nil
}

// TestDeleteAllUnusedContainers: the eviction manager's reclaim runs the
// runtime's DeleteAllUnusedContainers once every source has reported, with
// the pods the Controller knows kept and only those it still runs active
// (a finished pod it knows is not); a runtime without it gets the ordinary
// garbage collection.
func TestDeleteAllUnusedContainers(t *testing.T) {
	rt := &deleterRuntime{fakeRuntime: newFakeRuntime()}
	c, _, ctx := newIdleController(t, rt)
	if err := c.DeleteAllUnusedContainers(ctx); err != nil || len(rt.keep) != 0 {
		t.Fatalf("DeleteAllUnusedContainers before the sources reported: err %v, %d runtime runs; want none", err, len(rt.keep))
	}
	c.sourceHandled(podsource.APIServerSource)
	c.add(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}})
	c.add(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: "default", UID: "uid-done"},
		Status: v1.PodStatus{Phase: v1.PodSucceeded}})
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return c.PodTerminated("uid-done"), nil
	}); err != nil {
		t.Fatalf("the finished pod never terminated: %v", err)
	}
	if err := c.DeleteAllUnusedContainers(ctx); err != nil || len(rt.keep) != 1 {
		t.Fatalf("DeleteAllUnusedContainers: err %v, %d runtime runs; want 1", err, len(rt.keep))
	}
	keep, active := rt.keep[0], rt.active[0]
	if !keep("uid-web") || !keep("uid-done") || keep("uid-other") {
		t.Error("keep does not report exactly the pods the Controller knows")
	}
	if !active("uid-web") || active("uid-done") || active("uid-other") {
		t.Error("active does not report exactly the pod the Controller runs")
	}
	if rt.gcs.Load() != 0 {
		t.Errorf("%d ordinary garbage collections, want none", rt.gcs.Load())
	}

	plain := newFakeRuntime()
	c2, _, _ := newIdleController(t, plain)
	c2.sourceHandled(podsource.APIServerSource)
	if err := c2.DeleteAllUnusedContainers(ctx); err != nil || plain.gcs.Load() != 1 {
		t.Errorf("DeleteAllUnusedContainers on a runtime without it: err %v, %d garbage collections; want 1", err, plain.gcs.Load())
	}
}

// histogram returns the sample count and sum of the histogram name.
func (h *controllerHarness) histogram(name string) (uint64, float64) {
	h.t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			hist := f.GetMetric()[0].GetHistogram()
			return hist.GetSampleCount(), hist.GetSampleSum()
		}
	}
	return 0, 0
}

// TestPodStartIsObservedOnTheSourcesUpdate: once the source shows all of a
// pod's containers started, its start is recorded once, from its creation
// (total and SLI; a pod with a persistent volume in total only) and from
// when the agent first saw it.
func TestPodStartIsObservedOnTheSourcesUpdate(t *testing.T) {
	h := newControllerHarness(t)
	seen := h.clock.Now()
	stateless, stateful := churnPod(1), churnPod(2)
	stateful.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}
	for _, p := range []*v1.Pod{stateless, stateful} {
		p.CreationTimestamp = metav1.NewTime(seen.Add(-2 * time.Second))
	}
	h.send(podsource.OpAdd, stateless, stateful)
	// send returns when the controller took the update, not when it saw the
	// pods: step the clock only once both are recorded.
	h.waitFor("both pods recorded", func() bool {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return len(h.c.pods) == 2
	})
	h.clock.Step(100 * time.Millisecond)
	started := func(p *v1.Pod) *v1.Pod {
		p = p.DeepCopy()
		p.Status.Phase = v1.PodRunning
		p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(seen)}}}}
		return p
	}
	waiting := stateless.DeepCopy()
	waiting.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	h.send(podsource.OpReconcile, waiting)
	if n, _ := h.histogram("kubelet_pod_start_total_duration_seconds"); n != 0 {
		t.Fatalf("%d starts recorded for a pod whose container waits", n)
	}
	h.send(podsource.OpReconcile, started(stateless), started(stateful))
	h.send(podsource.OpReconcile, started(stateless))
	h.waitFor("two starts recorded", func() bool {
		n, _ := h.histogram("kubelet_pod_start_total_duration_seconds")
		return n == 2
	})
	if n, sum := h.histogram("kubelet_pod_start_total_duration_seconds"); n != 2 || sum < 4.19 || sum > 4.21 {
		t.Errorf("total: %d samples summing to %.3f s, want 2 of 2.1 s", n, sum)
	}
	if n, sum := h.histogram("kubelet_pod_start_sli_duration_seconds"); n != 1 || sum < 2.09 || sum > 2.11 {
		t.Errorf("SLI: %d samples summing to %.3f s, want the stateless pod's 2.1 s", n, sum)
	}
	if n, sum := h.histogram("nodekit_pod_start_agent_duration_seconds"); n != 2 || sum < 0.19 || sum > 0.21 {
		t.Errorf("agent: %d samples summing to %.3f s, want 2 of 0.1 s", n, sum)
	}
}

// TestFailingTeardownBacksOff: a pod whose teardown keeps failing (its
// volumes stay mounted) is tried again 1 s, 2 s, 4 s ... later, up to a
// minute, with one error line per distinct error; KillPod callers that give
// up leave no waiter behind; once the teardown works the pod terminates
// and its back-off is forgotten.
func TestFailingTeardownBacksOff(t *testing.T) {
	h := newControllerHarness(t)
	var delays []time.Duration
	for range 9 {
		delays = append(delays, h.c.retryTerminate(h.ctx, "uid-x", "teardown failed", errors.New("device busy")))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}
	if !slices.Equal(delays, want) {
		t.Errorf("retry delays %v, want %v", delays, want)
	}
	h.c.mu.Lock()
	delete(h.c.terminateRetries, "uid-x")
	h.c.mu.Unlock()

	pod := churnPod(1)
	h.send(podsource.OpAdd, pod)
	h.waitFor("the pod running", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.running[pod.UID]
	})
	h.rt.mu.Lock()
	h.rt.killErr = errors.New("device busy")
	h.rt.mu.Unlock()
	for range 3 {
		ctx, cancel := context.WithTimeout(h.ctx, 20*time.Millisecond)
		if err := h.c.KillPod(ctx, pod, nil, nil); err == nil {
			t.Fatal("KillPod returned nil for a pod whose teardown fails")
		}
		cancel()
	}
	h.c.mu.Lock()
	waiters, retry := len(h.c.stopped), h.c.terminateRetries[pod.UID]
	h.c.mu.Unlock()
	if waiters != 0 {
		t.Errorf("%d KillPod waiters left after every caller gave up, want 0", waiters)
	}
	if retry == nil {
		t.Fatal("no back-off recorded for the failing teardown")
	}
	h.rt.mu.Lock()
	h.rt.killErr = nil
	h.rt.mu.Unlock()
	h.waitFor("the pod terminated", func() bool {
		h.clock.Step(time.Minute)
		return h.c.PodTerminated(pod.UID)
	})
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	if n := len(h.c.terminateRetries); n != 0 {
		t.Errorf("%d back-offs left once the pod terminated, want 0", n)
	}
}

// TestPanickingAdmitHandlerRejectsThePod: an admit handler that panics (a
// nil AdmitFunc among them) rejects the pod it was asked about with
// UnexpectedAdmissionError and a warning event; the loop goes on admitting
// the next pods.
func TestPanickingAdmitHandlerRejectsThePod(t *testing.T) {
	for name, h := range map[string]AdmitHandler{
		"panics":        AdmitFunc(func(a AdmitAttributes) AdmitResult { panic("handler bug") }),
		"nil AdmitFunc": AdmitFunc(nil),
	} {
		t.Run(name, func(t *testing.T) {
			sources := &fakeSources{updates: make(chan podsource.Update)}
			statuses := &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}
			rec := record.NewFakeRecorder(10)
			bad := AdmitFunc(func(a AdmitAttributes) AdmitResult {
				if a.Pod.Name == "bad" {
					return h.Admit(a)
				}
				return AdmitResult{Admit: true}
			})
			c, err := New(Options{Sources: sources, Runtime: newFakeRuntime(), Statuses: statuses, Node: knownNode, Recorder: rec, Admit: []AdmitHandler{bad}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := c.Run(ctx); err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			defer func() { cancel(); <-done }()
			badPod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default", UID: "uid-bad"}}
			good := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: "default", UID: "uid-good"}}
			for _, p := range []*v1.Pod{badPod, good} {
				select {
				case sources.updates <- podsource.Update{Op: podsource.OpAdd, Source: podsource.APIServerSource, Pods: []*v1.Pod{p}}:
				case <-time.After(30 * time.Second):
					t.Fatalf("the loop did not take pod %s: it is stuck", p.Name)
				}
			}
			if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				st, ok := statuses.GetPodStatus(good.UID)
				return ok && st.Phase == v1.PodRunning, nil
			}); err != nil {
				t.Fatalf("the pod after the panicking admission did not run: %v", err)
			}
			st, _ := statuses.GetPodStatus(badPod.UID)
			if st.Phase != v1.PodFailed || st.Reason != "UnexpectedAdmissionError" {
				t.Errorf("status of the pod whose admission panicked: %s/%s, want Failed/UnexpectedAdmissionError", st.Phase, st.Reason)
			}
			select {
			case ev := <-rec.Events:
				if !strings.HasPrefix(ev, "Warning UnexpectedAdmissionError") {
					t.Errorf("event %q, want a UnexpectedAdmissionError warning", ev)
				}
			default:
				t.Error("no event for the rejected pod")
			}
		})
	}
}

// panickingRuntime is a fakeRuntime whose SyncPod panics until calm is
// set: a backend with a bug.
type panickingRuntime struct {
	*fakeRuntime
	calm atomic.Bool
}

func (r *panickingRuntime) SyncPod(ctx context.Context, pod *v1.Pod) SyncResult {
	if !r.calm.Load() {
		panic("backend bug")
	}
	return r.fakeRuntime.SyncPod(ctx, pod)
}

// runController builds a Controller on opts and runs it until the test
// ends; it returns the Controller and Run's context.
func runController(t *testing.T, opts Options) (*Controller, context.Context) {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c, ctx
}

// TestPanickingSyncIsRetried: a Runtime whose SyncPod panics does not take
// the loop down: the pod gets a FailedSync warning event naming the panic,
// other pods run, and the pod is synced again after the error back-off and
// runs once the runtime stops panicking.
func TestPanickingSyncIsRetried(t *testing.T) {
	sources := &fakeSources{updates: make(chan podsource.Update)}
	statuses := &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}
	rec := record.NewFakeRecorder(10)
	clk := testclock.NewFakeClock(time.Now())
	rt := &panickingRuntime{fakeRuntime: newFakeRuntime()}
	_, ctx := runController(t, Options{Sources: sources, Runtime: rt, Statuses: statuses, Node: knownNode, Recorder: rec, Clock: clk})
	pod := churnPod(1)
	select {
	case sources.updates <- podsource.Update{Op: podsource.OpAdd, Source: podsource.APIServerSource, Pods: []*v1.Pod{pod}}:
	case <-time.After(30 * time.Second):
		t.Fatal("the loop did not take the pod")
	}
	select {
	case ev := <-rec.Events:
		if !strings.HasPrefix(ev, "Warning FailedSync Error syncing pod: pod sync panicked: backend bug") {
			t.Errorf("event %q, want a FailedSync warning naming the panic", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no FailedSync event for the panicking sync")
	}
	rt.calm.Store(true)
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		clk.Step(syncErrorBackOff)
		st, ok := statuses.GetPodStatus(pod.UID)
		return ok && st.Phase == v1.PodRunning, nil
	}); err != nil {
		t.Fatalf("the pod did not run once the runtime stopped panicking: %v", err)
	}
}

// TestNilAdmitFuncRemovesItsDefault: a nil AdmitFunc under a default's
// name removes the default, as a nil handler does; under another name it is
// an error.
func TestNilAdmitFuncRemovesItsDefault(t *testing.T) {
	def := defaultAdmitHandler(AdmitGeneralPredicates, OrderGeneralPredicates, AdmitFunc(func(AdmitAttributes) AdmitResult { return AdmitResult{Admit: true} }))
	got, err := ResolveAdmitHandlers([]OrderedAdmitHandler{def, {Name: AdmitGeneralPredicates, Handler: AdmitFunc(nil)}})
	if err != nil || len(got) != 0 {
		t.Errorf("nil AdmitFunc under the default's name: %d handlers, %v; want none", len(got), err)
	}
	if _, err := ResolveAdmitHandlers([]OrderedAdmitHandler{def, {Name: "GeneralPredicate", Handler: AdmitFunc(nil)}}); err == nil {
		t.Error("a nil AdmitFunc under a misspelt name was accepted")
	}
}

// TestStaticPodAddedBackWhileStoppingRestarts: a static pod whose manifest
// is moved out and back while its containers stop (the same content, so
// the same UID) runs again once the old copy stopped, as the kubelet's
// restartRequested; kubelet_restarted_pods_total{static="true"} counts it.
func TestStaticPodAddedBackWhileStoppingRestarts(t *testing.T) {
	h := newControllerHarness(t)
	pod := staticPod("static-uid")
	pod.Spec = v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "etcd", Image: "etcd"}}}
	running := func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.running[pod.UID]
	}
	h.send(podsource.OpAdd, pod)
	h.waitFor("the static pod running", running)

	gate := make(chan struct{})
	h.rt.mu.Lock()
	h.rt.killGate = gate
	h.rt.mu.Unlock()
	h.send(podsource.OpRemove, pod)
	h.waitFor("the stop started", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return len(h.rt.kills) == 1
	})
	h.send(podsource.OpAdd, pod.DeepCopy())
	// The loop took the update; wait until it handled it before the old
	// copy may stop, or the pod is simply added anew.
	h.waitFor("the restart requested", func() bool { return h.restartRequested(pod.UID) })
	if got := h.counter("kubelet_restarted_pods_total", "true"); got != 0 {
		t.Errorf("restarted_pods_total{static=true} = %v while the old copy still stops, want 0", got)
	}
	close(gate)
	h.waitFor("the old copy removed", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.removed[pod.UID] == 1
	})
	h.waitFor("the static pod running again", running)
	h.waitFor("the restart counted", func() bool { return h.counter("kubelet_restarted_pods_total", "true") == 1 })
	if got := h.counter("kubelet_restarted_pods_total", ""); got != 0 {
		t.Errorf(`restarted_pods_total{static=""} = %v, want 0`, got)
	}
	if !h.c.active(pod.UID) {
		t.Error("the restarted static pod is not active")
	}
}

// TestRemovedAgainBeforeRestartStaysGone: a pod added back while it stops
// and removed again before the old copy stopped is not restarted.
func TestRemovedAgainBeforeRestartStaysGone(t *testing.T) {
	h := newControllerHarness(t)
	pod := staticPod("static-uid-2")
	pod.Spec = v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "etcd", Image: "etcd"}}}
	h.send(podsource.OpAdd, pod)
	h.waitFor("the static pod running", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.running[pod.UID]
	})
	gate := make(chan struct{})
	h.rt.mu.Lock()
	h.rt.killGate = gate
	h.rt.mu.Unlock()
	h.send(podsource.OpRemove, pod)
	h.waitFor("the stop started", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return len(h.rt.kills) == 1
	})
	h.send(podsource.OpAdd, pod.DeepCopy())
	h.send(podsource.OpRemove, pod)
	// The loop took the removal; wait until it handled it (the restart
	// request dropped) before the old copy may stop.
	h.waitFor("the restart request dropped", func() bool { return !h.restartRequested(pod.UID) })
	close(gate)
	h.waitFor("every record gone", func() bool {
		return h.sizes() == "records=0 orphans=0 killWaiters=0 terminateRetries=0 workers=0 active=0 known=0 statuses=0"
	})
	if got := h.counter("kubelet_restarted_pods_total", "true"); got != 0 {
		t.Errorf("restarted_pods_total{static=true} = %v, want 0", got)
	}
}

// restartRequested reports whether the controller holds a restart request
// for uid (a pod added back while its worker stops it).
func (h *controllerHarness) restartRequested(uid types.UID) bool {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	_, ok := h.c.restarts[uid]
	return ok
}

// counter returns the value of the counter name with the static label, 0
// when there is no such series.
func (h *controllerHarness) counter(name, static string) float64 {
	h.t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "static" && l.GetValue() == static {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestReadinessGatesFollowAStatusOnlyUpdate: another writer sets a pod's
// readiness gate conditions through the status subresource (the source's
// RECONCILE update); the status the agent then generates is Ready from that
// pod object, not the one it admitted, and turns not Ready again when a gate
// goes False, as the kubelet's HandlePodReconcile.
func TestReadinessGatesFollowAStatusOnlyUpdate(t *testing.T) {
	h := newControllerHarness(t)
	h.rt.mu.Lock()
	h.rt.generate = true
	h.rt.mu.Unlock()
	pod := churnPod(1)
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "k8s.io/gate-a"}, {ConditionType: "k8s.io/gate-b"}}
	h.send(podsource.OpAdd, pod)
	ready := func() *v1.PodCondition {
		st, _ := h.statuses.GetPodStatus(pod.UID)
		for i := range st.Conditions {
			if st.Conditions[i].Type == v1.PodReady {
				return &st.Conditions[i]
			}
		}
		return nil
	}
	h.waitFor("Ready False for want of its gates", func() bool {
		c := ready()
		return c != nil && c.Status == v1.ConditionFalse && c.Reason == "ReadinessGatesNotReady"
	})
	// The API pod as the source sees it: the agent's status with both
	// gates set by another writer.
	gates := func(b v1.ConditionStatus) *v1.Pod {
		p := pod.DeepCopy()
		p.Status, _ = h.statuses.GetPodStatus(pod.UID)
		p.Status = *p.Status.DeepCopy()
		p.Status.Conditions = slices.DeleteFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return strings.HasPrefix(string(c.Type), "k8s.io/gate-") })
		p.Status.Conditions = append(p.Status.Conditions,
			v1.PodCondition{Type: "k8s.io/gate-a", Status: v1.ConditionTrue},
			v1.PodCondition{Type: "k8s.io/gate-b", Status: b})
		return p
	}
	h.send(podsource.OpReconcile, gates(v1.ConditionTrue))
	h.waitFor("Ready True once both gates are True", func() bool {
		c := ready()
		return c != nil && c.Status == v1.ConditionTrue
	})
	h.send(podsource.OpReconcile, gates(v1.ConditionFalse))
	h.waitFor("Ready False again once one gate is False", func() bool {
		c := ready()
		return c != nil && c.Status == v1.ConditionFalse && c.Reason == "ReadinessGatesNotReady"
	})
}
