package pods

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

type fakeSources struct {
	updates chan podsource.Update
	ready   atomic.Bool
}

func (s *fakeSources) Updates() <-chan podsource.Update { return s.updates }
func (s *fakeSources) AllReady() bool                   { return s.ready.Load() }

// fakeRuntime runs every pod at once; KillPod stops it.
type fakeRuntime struct {
	mu      sync.Mutex
	running map[types.UID]bool
	gcKeep  []func(types.UID) bool
	events  chan podstate.PodLifecycleEvent
}

func (r *fakeRuntime) PodStatus(_ context.Context, pod *v1.Pod, _ podstatus.GenerateOptions) (v1.PodStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[pod.UID] {
		return v1.PodStatus{Phase: v1.PodRunning}, nil
	}
	return v1.PodStatus{Phase: v1.PodPending}, nil
}

func (r *fakeRuntime) SyncPod(_ context.Context, pod *v1.Pod) SyncResult {
	r.mu.Lock()
	r.running[pod.UID] = true
	r.mu.Unlock()
	return SyncResult{}
}

func (r *fakeRuntime) KillPod(_ context.Context, pod *v1.Pod, _ *int64) error {
	r.mu.Lock()
	delete(r.running, pod.UID)
	r.mu.Unlock()
	return nil
}

func (r *fakeRuntime) RemovePod(context.Context, types.UID) error     { return nil }
func (r *fakeRuntime) RunningPods(context.Context) ([]*v1.Pod, error) { return nil, nil }
func (r *fakeRuntime) Events() <-chan podstate.PodLifecycleEvent      { return r.events }
func (r *fakeRuntime) GarbageCollect(_ context.Context, keep func(types.UID) bool) error {
	r.mu.Lock()
	r.gcKeep = append(r.gcKeep, keep)
	r.mu.Unlock()
	return nil
}

type fakeStatuses struct {
	mu       sync.Mutex
	statuses map[types.UID]v1.PodStatus
}

func (s *fakeStatuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.statuses[uid]
	return st, ok
}

func (s *fakeStatuses) SetPodStatus(pod *v1.Pod, st v1.PodStatus) {
	s.mu.Lock()
	s.statuses[pod.UID] = st
	s.mu.Unlock()
}

func (s *fakeStatuses) TerminatePod(*v1.Pod)    {}
func (s *fakeStatuses) RemovePod(uid types.UID) {}

// TestKillPodThenPodTerminated: a pod the eviction manager kills is not
// terminated until its containers are stopped and its final status, amended
// by statusFn, is set; a pod the Controller does not know counts as
// terminated.
func TestKillPodThenPodTerminated(t *testing.T) {
	sources := &fakeSources{updates: make(chan podsource.Update, 1)}
	rt := &fakeRuntime{running: map[types.UID]bool{}, events: make(chan podstate.PodLifecycleEvent)}
	statuses := &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}
	c, err := New(Options{Sources: sources, Runtime: rt, Statuses: statuses, Node: func() (*v1.Node, bool) { return nil, false }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()

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
	sources := &fakeSources{updates: make(chan podsource.Update, 1)}
	rt := &fakeRuntime{running: map[types.UID]bool{}, events: make(chan podstate.PodLifecycleEvent)}
	statuses := &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}
	c, err := New(Options{Sources: sources, Runtime: rt, Statuses: statuses, Node: func() (*v1.Node, bool) { return nil, false }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); c.workers.wait() }()
	if err := c.GarbageCollect(ctx); err != nil || len(rt.gcKeep) != 0 {
		t.Fatalf("GarbageCollect before the sources reported: err %v, %d runtime runs; want none", err, len(rt.gcKeep))
	}
	sources.ready.Store(true)
	c.add(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}})
	if err := c.GarbageCollect(ctx); err != nil || len(rt.gcKeep) != 1 {
		t.Fatalf("GarbageCollect: err %v, %d runtime runs; want 1", err, len(rt.gcKeep))
	}
	if keep := rt.gcKeep[0]; !keep("uid-web") || keep("uid-other") {
		t.Error("the runtime's garbage collection does not keep exactly the pods the Controller knows")
	}
}
