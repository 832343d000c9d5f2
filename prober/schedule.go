package prober

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/timers"
)

// schedulerResolution is how late the scheduler lets a probe run so it can
// start several with one wake-up: a run is never early, and at most this
// late (plus the machine's own latency).
const schedulerResolution = time.Millisecond

// workerHeap orders idle workers by their next run. Manager.mu guards it.
type workerHeap []*worker

func (h workerHeap) Len() int           { return len(h) }
func (h workerHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h workerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}
func (h *workerHeap) Push(x any) {
	w := x.(*worker)
	w.heapIndex = len(*h)
	*h = append(*h, w)
}
func (h *workerHeap) Pop() any {
	old := *h
	n := len(old)
	w := old[n-1]
	old[n-1] = nil
	w.heapIndex = -1
	*h = old[:n-1]
	return w
}

// schedule runs the scheduler until ctx is done: it hands every worker whose
// next run is due to the executor pool and sleeps on one timer until the
// next one is due or the heap changes.
func (m *Manager) schedule(ctx context.Context) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		m.mu.Lock()
		now := m.clock.Now()
		for len(m.heap) > 0 && !m.heap[0].next.After(now) {
			w := heap.Pop(&m.heap).(*worker)
			w.running = true
			m.inflight++
			if w.ctx == nil {
				w.ctx, w.cancel = context.WithCancel(ctx)
			}
			m.pool.submit(w, now)
		}
		var next time.Time
		if len(m.heap) > 0 {
			next = m.heap[0].next
		}
		m.mu.Unlock()
		// Runs held up by slow ones are looked at again when the next
		// fast run turns slow; surplus parked goroutines are retired
		// bit by bit.
		next = timers.Earliest(next, m.pool.check(now))
		next = timers.Earliest(next, m.pool.trim(now))

		var fired <-chan time.Time
		if !next.IsZero() {
			// Armed from now, stale by a fake clock's step made while
			// the heap was looked at, the timer would fire late.
			var due bool
			if timer, due = timers.Arm(m.clock, timer, next, m.resolution); due {
				continue
			}
			fired = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-fired:
		case <-m.wake:
			if timer != nil {
				timers.Stop(timer)
			}
		}
	}
}

// wakeScheduler makes the scheduler look at the heap again. It never blocks.
func (m *Manager) wakeScheduler() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// slowRun is how long a probe run may take before it no longer counts
// against the pool's parallelism: runs queued behind it are started on other
// goroutines.
const slowRun = 100 * time.Millisecond

// trimPeriod is how often the pool retires a part of its surplus parked
// goroutines.
const trimPeriod = time.Second

// pool runs probe runs on reusable goroutines. Up to limit runs proceed at
// once; further runs wait for one of them to finish, but never longer than
// slowRun: a run that has lasted slowRun no longer counts against the
// limit, so a slow or hung probe holds up only its own worker (the
// scheduler calls check when that happens). Parked goroutines are reused;
// those beyond limit are retired a quarter at a time every trimPeriod
// (trim), so a burst of slow runs does not make goroutines come and go. No
// more goroutines run probes than there are workers.
type pool struct {
	mu    sync.Mutex
	cond  sync.Cond
	clock clock.PassiveClock
	limit int
	run   func(*worker)

	// queue[head:] are the runs waiting for a goroutine.
	queue []*worker
	head  int
	// Goroutines by state: parked and not woken; woken and not yet back
	// at the queue; started and not yet at the queue; done with a run
	// (willReturn) and not yet back at the queue. The last three will take
	// a queued run without waiting on a probe: they are "coming".
	idle, woken, starting, returning int
	// fast counts runs in progress that started less than slowRun ago;
	// recent[rhead:] are the runs started within slowRun, oldest first
	// (entries of runs that ended are skipped).
	fast   int
	recent []recentRun
	rhead  int

	// retire counts parked goroutines woken to exit.
	retire   int
	nextTrim time.Time

	total   int
	started uint64 // goroutines ever started
	closed  bool
	wg      sync.WaitGroup
}

// runSlot is one pool goroutine's current run.
type runSlot struct {
	gen  uint64 // counts the goroutine's runs
	fast bool   // the run counts in pool.fast
}

type recentRun struct {
	slot  *runSlot
	gen   uint64
	start time.Time
}

func newPool(limit int, clk clock.PassiveClock, run func(*worker)) *pool {
	p := &pool{limit: limit, clock: clk, run: run}
	p.cond.L = &p.mu
	return p
}

func (p *pool) queued() int { return len(p.queue) - p.head }
func (p *pool) coming() int { return p.woken + p.starting + p.returning }

// submit queues w. It blocks only on the pool's lock.
func (p *pool) submit(w *worker, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, w)
	p.pruneLocked(now)
	p.dispatchLocked()
}

// check starts goroutines for queued runs whose way was blocked by runs
// that have become slow. It returns when to check again: when the oldest
// fast run becomes slow, if runs wait; zero otherwise.
func (p *pool) check(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pruneLocked(now)
	p.dispatchLocked()
	if p.queued() > p.coming() && p.rhead < len(p.recent) {
		return p.recent[p.rhead].start.Add(slowRun)
	}
	return time.Time{}
}

// trim retires a quarter (at least one) of the parked goroutines beyond
// limit, at most once per trimPeriod. It returns when to trim again, zero
// when nothing is to be retired.
func (p *pool) trim(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	surplus := p.idle - p.limit
	if surplus <= 0 {
		return time.Time{}
	}
	if now.Before(p.nextTrim) {
		return p.nextTrim
	}
	for range max(1, surplus/4) {
		p.idle--
		p.retire++
		p.cond.Signal()
	}
	p.nextTrim = now.Add(trimPeriod)
	if p.idle > p.limit {
		return p.nextTrim
	}
	return time.Time{}
}

// pruneLocked stops counting runs started slowRun ago or earlier as fast.
func (p *pool) pruneLocked(now time.Time) {
	cutoff := now.Add(-slowRun)
	for p.rhead < len(p.recent) && !p.recent[p.rhead].start.After(cutoff) {
		r := p.recent[p.rhead]
		p.recent[p.rhead] = recentRun{}
		p.rhead++
		if r.slot.gen == r.gen && r.slot.fast {
			r.slot.fast = false
			p.fast--
		}
	}
	if p.rhead == len(p.recent) {
		p.recent, p.rhead = p.recent[:0], 0
	}
}

// dispatchLocked wakes parked goroutines, or starts new ones, for queued
// runs no coming goroutine will take, while fewer than limit fast runs are
// in progress or about to start.
func (p *pool) dispatchLocked() {
	for p.queued() > p.coming() && p.fast+p.coming() < p.limit {
		if p.idle > 0 {
			p.idle--
			p.woken++
			p.cond.Signal()
			continue
		}
		p.starting++
		p.total++
		p.started++
		p.wg.Add(1)
		go p.loop()
	}
}

func (p *pool) loop() {
	defer p.wg.Done()
	slot := &runSlot{}
	p.mu.Lock()
	p.starting--
	for {
		if p.queued() == 0 {
			p.queue, p.head = p.queue[:0], 0
			if p.closed {
				p.total--
				p.mu.Unlock()
				return
			}
			p.idle++
			p.cond.Wait()
			switch {
			case p.closed:
				// The counts no longer matter.
			case p.retire > 0:
				// Signals wake parked goroutines in no particular
				// order: whichever wakes takes a retirement first.
				p.retire--
				p.total--
				p.mu.Unlock()
				return
			default:
				p.woken--
			}
			continue
		}
		w := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		slot.gen++
		slot.fast = true
		p.fast++
		p.recent = append(p.recent, recentRun{slot: slot, gen: slot.gen, start: p.clock.Now()})
		w.slot = slot
		p.mu.Unlock()
		p.run(w)
		p.mu.Lock()
		p.returning--
	}
}

// willReturn tells the pool that the run in slot is over and its
// goroutine, bar bookkeeping that never blocks, is going back to the queue.
// run calls it exactly once per run.
func (p *pool) willReturn(slot *runSlot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slot.fast {
		slot.fast = false
		p.fast--
	}
	p.returning++
}

// close makes the goroutines exit once the queue is drained and waits for
// all of them.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	for p.queued() > p.coming()+p.idle {
		// Runs beyond the limit: let new goroutines drain them.
		p.starting++
		p.total++
		p.started++
		p.wg.Add(1)
		go p.loop()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

// stats returns the goroutines alive and ever started.
func (p *pool) stats() (alive int, started uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total, p.started
}
