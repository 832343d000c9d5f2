package runtime

import (
	"container/heap"
	"context"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// DefaultMaxParallelPodStarts returns the default of
// PodManagerOptions.MaxParallelPodStarts on this machine: four pods per CPU
// (runtime.NumCPU), at least 4. nodebench swept 1 to 16 and no bound
// against containerd 1.6 on a 2-core machine, beside the kubelet
// (docs/performance.md): 8 finished the first half of a 30-pod burst in
// under half the kubelet's time and the last pod well before it; fewer
// left the runtime idle between calls (its calls wait on I/O), more or no
// bound advanced every pod together as the kubelet does.
func DefaultMaxParallelPodStarts() int {
	return max(4, 4*goruntime.NumCPU())
}

// startQueue bounds how many pods create their sandbox and start their
// containers at once. A free turn goes to the waiting pod bound earliest
// (then to the one that asked first), so that under a burst the runtime
// finishes the first pods instead of advancing all of them together. A pod
// gives its turn up while it pulls an image: pulls are bounded apart
// (MaxParallelImagePulls) and a pull does not hold up pods whose images are
// present.
type startQueue struct {
	mu      sync.Mutex
	free    int
	seq     uint64
	waiting startWaiters
}

// newStartQueue returns a queue of limit turns; nil (no bound) when limit
// is negative.
func newStartQueue(limit int) *startQueue {
	if limit < 0 {
		return nil
	}
	return &startQueue{free: max(limit, 1)}
}

// startWaiter is a pod waiting for a turn.
type startWaiter struct {
	bound time.Time
	seq   uint64
	// granted is closed once the waiter holds a turn.
	granted chan struct{}
	index   int
}

// acquire blocks until the caller holds a turn, pods bound at an earlier
// time first; it fails only when ctx is done (the caller then holds none).
// A nil queue grants at once.
func (q *startQueue) acquire(ctx context.Context, bound time.Time) error {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	q.seq++
	if q.free > 0 && len(q.waiting) == 0 {
		q.free--
		q.mu.Unlock()
		return nil
	}
	w := &startWaiter{bound: bound, seq: q.seq, granted: make(chan struct{})}
	heap.Push(&q.waiting, w)
	q.mu.Unlock()
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		select {
		case <-w.granted:
			// Granted meanwhile: hand the turn on.
			q.releaseLocked()
		default:
			heap.Remove(&q.waiting, w.index)
		}
		return ctx.Err()
	}
}

// release gives a turn back: to the earliest-bound waiter, if any.
func (q *startQueue) release() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked()
}

func (q *startQueue) releaseLocked() {
	if len(q.waiting) == 0 {
		q.free++
		return
	}
	w := heap.Pop(&q.waiting).(*startWaiter)
	close(w.granted)
}

// startWaiters is a heap of waiters, earliest bound (then first come)
// first.
type startWaiters []*startWaiter

func (h startWaiters) Len() int { return len(h) }
func (h startWaiters) Less(i, j int) bool {
	if !h[i].bound.Equal(h[j].bound) {
		return h[i].bound.Before(h[j].bound)
	}
	return h[i].seq < h[j].seq
}
func (h startWaiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *startWaiters) Push(x any) {
	w := x.(*startWaiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *startWaiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

// startTurn is one sync's turn in a startQueue: held while the sync
// creates the sandbox and starts containers, given up around image pulls.
// A nil *startTurn (no queue) does nothing.
type startTurn struct {
	q     *startQueue
	bound time.Time
	held  bool
	// clock and waited, if waited is set, time each resume's wait.
	clock  clock.PassiveClock
	waited prometheus.Observer
}

// pause gives the turn up (before an image pull).
func (t *startTurn) pause() {
	if t == nil || !t.held {
		return
	}
	t.held = false
	t.q.release()
}

// resume takes a turn again, ahead of pods bound later.
func (t *startTurn) resume(ctx context.Context) error {
	if t == nil || t.held {
		return nil
	}
	var start time.Time
	if t.waited != nil {
		start = t.clock.Now()
	}
	if err := t.q.acquire(ctx, t.bound); err != nil {
		return err
	}
	if t.waited != nil {
		t.waited.Observe(t.clock.Since(start).Seconds())
	}
	t.held = true
	return nil
}

// boundTime is when pod was bound to the node: its PodScheduled condition's
// transition to True, else (a static pod, or a pod created with its node
// set) its creation. Both have a resolution of one second: pods bound in
// the same second take turns in the order they ask.
func boundTime(pod *v1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	return pod.CreationTimestamp.Time
}
