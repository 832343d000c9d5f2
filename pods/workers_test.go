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
	testclock "k8s.io/utils/clock/testing"
)

func workPod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)}}
}

func TestPodWorkersSerializePerPodAndRunPodsInParallel(t *testing.T) {
	var (
		mu      sync.Mutex
		running = map[types.UID]bool{}
		overlap atomic.Bool
		calls   = map[types.UID]int{}
	)
	release := make(chan struct{})
	bothIn := make(chan types.UID, 10)
	sync := func(ctx context.Context, w podWork) (time.Time, bool) {
		mu.Lock()
		if running[w.Pod.UID] {
			overlap.Store(true)
		}
		running[w.Pod.UID] = true
		calls[w.Pod.UID]++
		mu.Unlock()
		bothIn <- w.Pod.UID
		<-release
		mu.Lock()
		running[w.Pod.UID] = false
		mu.Unlock()
		return time.Time{}, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	pw := newPodWorkers(sync, testclock.NewFakeClock(time.Now()), nil)
	pw.update(ctx, workPod("a"), false, false, nil)
	pw.update(ctx, workPod("b"), false, false, nil)
	// Both pods are inside their sync at once: different pods run in parallel.
	<-bothIn
	<-bothIn
	// Three more triggers for "a" while it syncs coalesce into one more sync.
	pw.update(ctx, workPod("a"), false, false, nil)
	pw.poke("a")
	pw.poke("a")
	close(release)
	<-bothIn // the coalesced second sync of "a"
	cancel()
	pw.wait()
	if overlap.Load() {
		t.Fatal("two syncs of one pod overlapped")
	}
	if calls["a"] != 2 || calls["b"] != 1 {
		t.Fatalf("calls = %v, want a:2 b:1", calls)
	}
}

func TestPodWorkersRequeueTerminateAndFinish(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	works := make(chan podWork, 10)
	sync := func(ctx context.Context, w podWork) (time.Time, bool) {
		works <- w
		if w.Removed {
			return time.Time{}, true
		}
		return clk.Now().Add(10 * time.Second), false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pw := newPodWorkers(sync, clk, nil)
	pw.update(ctx, workPod("a"), false, false, nil)
	if w := <-works; w.Terminate {
		t.Fatal("a new pod must not be terminating")
	}
	// The requeue timer drives the next sync.
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(10 * time.Second)
	<-works

	grace := int64(5)
	pw.update(ctx, workPod("a"), true, false, &grace)
	w := <-works
	if !w.Terminate || w.GracePeriod == nil || *w.GracePeriod != 5 {
		t.Fatalf("work = %+v, want terminating with grace 5", w)
	}
	// Termination never goes back, and a longer grace does not replace a shorter one.
	longer := int64(30)
	pw.update(ctx, workPod("a"), false, false, &longer)
	if w := <-works; !w.Terminate || *w.GracePeriod != 5 {
		t.Fatalf("work = %+v, want still terminating with grace 5", w)
	}
	pw.update(ctx, workPod("a"), false, true, nil)
	if w := <-works; !w.Removed {
		t.Fatalf("work = %+v, want removed", w)
	}
	cancel()
	pw.wait()
	if pw.known("a") {
		t.Fatal("the worker of a finished pod must end")
	}
}

// TestPodWorkersRequeueAtATimePassedSyncAtOnce: a requeue time the clock
// passed before the worker armed its timer (a fake clock's step after the
// sync read it, a back-off's end already reached) is a sync at once, not a
// wait for the clock's next step.
func TestPodWorkersRequeueAtATimePassedSyncAtOnce(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	start := clk.Now()
	works := make(chan podWork, 10)
	syncs := 0 // one worker: its syncs do not overlap
	sync := func(ctx context.Context, w podWork) (time.Time, bool) {
		works <- w
		if syncs++; syncs == 1 {
			// The clock steps after the sync chose its time.
			clk.Step(10 * time.Second)
			return start.Add(5 * time.Second), false
		}
		return time.Time{}, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pw := newPodWorkers(sync, clk, nil)
	pw.update(ctx, workPod("a"), false, false, nil)
	<-works
	select {
	case <-works:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no sync at a requeue time already passed")
	}
	cancel()
	pw.wait()
}

// TestPodWorkersReportOperationTypes checks the operation_type of each sync
// as kubelet_pod_worker_duration_seconds labels it: the first sync is a
// create, a sync after a new pod object an update, a poke or requeue a
// sync, a terminating one a kill; each with the sync's duration on the
// clock.
func TestPodWorkersReportOperationTypes(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	type obs struct {
		op string
		d  time.Duration
	}
	seen := make(chan obs, 10)
	step := make(chan struct{}, 10)
	sync := func(ctx context.Context, w podWork) (time.Time, bool) {
		clk.Step(time.Second) // every sync takes a second on the clock
		step <- struct{}{}
		return time.Time{}, w.Removed
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pw := newPodWorkers(sync, clk, func(op string, d time.Duration) { seen <- obs{op, d} })
	pod := workPod("a")
	next := func(trigger func(), want string) {
		t.Helper()
		trigger()
		<-step
		if got := <-seen; got.op != want || got.d != time.Second {
			t.Fatalf("observed %+v, want %s for 1s", got, want)
		}
	}
	next(func() { pw.update(ctx, pod, false, false, nil) }, OpCreate)
	next(func() { pw.poke("a") }, OpSync)
	next(func() { pw.update(ctx, pod, false, false, nil) }, OpSync) // the same object: nothing changed
	next(func() { pw.update(ctx, workPod("a"), false, false, nil) }, OpUpdate)
	next(func() { pw.update(ctx, workPod("a"), true, true, nil) }, OpKill)
	cancel()
	pw.wait()
}
