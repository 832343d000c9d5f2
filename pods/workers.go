package pods

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/timers"
)

// podWork is the latest intent for one pod, as its worker sees it.
type podWork struct {
	// Pod is the newest spec from the sources; owned by the worker's sync
	// function for the duration of a call, never modified.
	Pod *v1.Pod
	// Terminate is set once the pod must stop: deleted in the API,
	// removed from its source, or finished. It never goes back to false.
	Terminate bool
	// GracePeriod overrides the pod's grace period when set.
	GracePeriod *int64
	// Removed is set when the pod is gone from every source: once its
	// containers are stopped the worker ends.
	Removed bool
}

// podSyncFunc syncs one pod. It returns when to sync again when nothing
// else triggers it (zero means only on a trigger) and whether the pod is
// done: stopped and removed, so its worker ends. The time is on the
// workers' clock, and a time already passed means at once.
type podSyncFunc func(ctx context.Context, work podWork) (requeueAt time.Time, done bool)

// podWorkers runs one goroutine per pod so that a pod's syncs never overlap
// while different pods sync in parallel, as the kubelet's pod workers. A
// worker syncs when its pod is updated, when it is poked (a runtime event
// for the pod) and when its requeue timer fires; triggers that arrive during
// a sync coalesce into one more sync.
type podWorkers struct {
	sync  podSyncFunc
	clock clock.Clock
	// observe, when set, is told each sync's operation type (OpCreate,
	// OpUpdate, OpSync, OpKill) and duration.
	observe func(op string, d time.Duration)
	// finished, when set, is called on a worker's context once the worker
	// of the pod with uid has ended and is gone, so a pod with that UID
	// gets a new worker from then on.
	finished func(ctx context.Context, uid types.UID)
	// track, when set, is told under mu when the pod with uid gets a
	// worker (true) and when its worker is gone (false).
	track func(uid types.UID, running bool)

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	wg      sync.WaitGroup
}

type podWorker struct {
	notify chan struct{}

	mu   sync.Mutex
	work podWork
	// cancel cancels the sync in flight, if any; killGrace is the grace
	// period that sync is stopping the pod with (nil: the pod's own, or no
	// stop in flight when killing is false).
	cancel    context.CancelFunc
	killing   bool
	killGrace *int64
}

func newPodWorkers(sync podSyncFunc, clk clock.Clock, observe func(op string, d time.Duration)) *podWorkers {
	return &podWorkers{sync: sync, clock: clk, observe: observe, workers: map[types.UID]*podWorker{}}
}

// update records the newest state of pod and triggers its worker, starting
// one on ctx when the pod has none. terminate and removed only ever turn a
// pod's flags on. It does not block.
func (p *podWorkers) update(ctx context.Context, pod *v1.Pod, terminate, removed bool, grace *int64) {
	p.mu.Lock()
	w, ok := p.workers[pod.UID]
	if !ok {
		if ctx.Err() != nil {
			p.mu.Unlock()
			return
		}
		w = &podWorker{notify: make(chan struct{}, 1)}
		p.workers[pod.UID] = w
		if p.track != nil {
			p.track(pod.UID, true)
		}
		p.wg.Add(1)
		go p.run(ctx, pod.UID, w)
	}
	p.mu.Unlock()

	w.mu.Lock()
	w.work.Pod = pod
	w.work.Terminate = w.work.Terminate || terminate || removed
	w.work.Removed = w.work.Removed || removed
	if grace != nil && (w.work.GracePeriod == nil || *grace < *w.work.GracePeriod) {
		w.work.GracePeriod = grace
		// A stop in flight with a longer grace period is cut short and
		// started again with this one, as the kubelet's pod workers do.
		if w.killing && w.cancel != nil && (w.killGrace == nil || *grace < *w.killGrace) {
			w.cancel()
		}
	}
	w.mu.Unlock()
	w.poke()
}

// reconcile hands pod, of which only the status changed in its source, to
// its worker and triggers a sync, if the pod has a worker: the sync
// generates the status from this object, so conditions other writers own
// (readiness gates) are the ones just seen. A pod without a worker (rejected,
// or its worker ended) is left alone.
func (p *podWorkers) reconcile(pod *v1.Pod) {
	p.mu.Lock()
	w := p.workers[pod.UID]
	p.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	w.work.Pod = pod
	w.mu.Unlock()
	w.poke()
}

// poke triggers a sync of the pod with uid, if it has a worker.
func (p *podWorkers) poke(uid types.UID) {
	p.mu.Lock()
	w := p.workers[uid]
	p.mu.Unlock()
	if w != nil {
		w.poke()
	}
}

// removing reports whether the pod with uid has a worker that stops it
// because it is gone from its sources (Removed): a new worker for that UID
// can only start once that one ends.
func (p *podWorkers) removing(uid types.UID) bool {
	p.mu.Lock()
	w := p.workers[uid]
	p.mu.Unlock()
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.work.Removed
}

// known reports whether the pod with uid has a worker.
func (p *podWorkers) known(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.workers[uid]
	return ok
}

// wait blocks until every worker has returned (after ctx of update is done).
func (p *podWorkers) wait() { p.wg.Wait() }

func (w *podWorker) poke() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (p *podWorkers) run(ctx context.Context, uid types.UID, w *podWorker) {
	defer p.wg.Done()
	var timer clock.Timer
	var timerC <-chan time.Time
	// last is the pod object of the previous sync, nil before the first.
	var last *v1.Pod
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// again is set when the requeue time came before the timer was armed.
	again := false
	for {
		if !again {
			select {
			case <-ctx.Done():
				return
			case <-w.notify:
			case <-timerC:
			}
		} else if ctx.Err() != nil {
			return
		}
		again = false
		syncCtx, cancel := context.WithCancel(ctx)
		w.mu.Lock()
		work := w.work
		w.cancel, w.killing, w.killGrace = cancel, work.Terminate, work.GracePeriod
		w.mu.Unlock()

		op := OpSync
		switch {
		case work.Terminate:
			op = OpKill
		case last == nil:
			op = OpCreate
		case work.Pod != last:
			op = OpUpdate
		}
		last = work.Pod
		start := p.clock.Now()
		requeueAt, done := p.sync(syncCtx, work)
		if p.observe != nil {
			p.observe(op, p.clock.Since(start))
		}
		w.mu.Lock()
		w.cancel, w.killing, w.killGrace = nil, false, nil
		w.mu.Unlock()
		cancel()
		if done {
			p.mu.Lock()
			delete(p.workers, uid)
			if p.track != nil {
				p.track(uid, false)
			}
			p.mu.Unlock()
			if p.finished != nil {
				p.finished(ctx, uid)
			}
			return
		}
		timerC = nil
		if !requeueAt.IsZero() {
			// A time, not a wait: a wait the sync computed from a
			// reading stale by a fake clock's step made since would
			// fire late.
			if timer, again = timers.Arm(p.clock, timer, requeueAt, time.Millisecond); !again {
				timerC = timer.C()
			}
		} else if timer != nil {
			timers.Stop(timer)
		}
	}
}
