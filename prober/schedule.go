package prober

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
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
			m.pool.submit(w)
		}
		var top time.Time
		if len(m.heap) > 0 {
			top = m.heap[0].next
		}
		m.mu.Unlock()

		var fired <-chan time.Time
		if !top.IsZero() {
			wait := max(top.Sub(now), m.resolution)
			if timer == nil {
				timer = m.clock.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			// The timer counts from the clock's time at Reset: if the
			// clock moved past the next run since now was read (a fake
			// clock's step), it would fire too late. Look again instead.
			if !m.clock.Now().Before(top) {
				stopTimer(timer)
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
				stopTimer(timer)
			}
		}
	}
}

// stopTimer stops t and drains a value it fired meanwhile (fake clocks keep
// it), so its next Reset starts clean.
func stopTimer(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
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

// pool runs probe runs on reusable goroutines. A run never waits for
// another: every queued run is matched by a goroutine that is about to look
// at the queue (starting, woken, or done with its run), parked goroutines are
// woken, and new ones start only when none is parked; so a slow or hung
// probe only ever holds up its own worker. At most maxIdle goroutines stay
// parked; the rest exit when they find nothing to do. As a worker is never
// run twice at once, no more goroutines run probes than there are workers.
type pool struct {
	mu   sync.Mutex
	cond sync.Cond
	// queue[head:] are the runs waiting for a goroutine.
	queue []*worker
	head  int
	// Goroutines by state: parked and not woken; woken and not yet back
	// at the queue; started and not yet at the queue; done with a run
	// (willReturn) and not yet back at the queue. The last three will look
	// at the queue without waiting on a probe.
	idle, woken, starting, returning int
	total                            int
	maxIdle                          int
	started                          uint64 // goroutines ever started
	closed                           bool
	// run runs w and calls willReturn once the probe is over.
	run func(*worker)
	wg  sync.WaitGroup
}

func newPool(maxIdle int, run func(*worker)) *pool {
	p := &pool{maxIdle: maxIdle, run: run}
	p.cond.L = &p.mu
	return p
}

// submit queues w. It blocks only on the pool's lock.
func (p *pool) submit(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, w)
	if len(p.queue)-p.head <= p.woken+p.starting+p.returning {
		// A goroutine on its way to the queue will take it.
		return
	}
	if p.idle > 0 {
		p.idle--
		p.woken++
		p.cond.Signal()
		return
	}
	p.starting++
	p.total++
	p.started++
	p.wg.Add(1)
	go p.loop()
}

func (p *pool) loop() {
	defer p.wg.Done()
	p.mu.Lock()
	p.starting--
	for {
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
			if p.closed || p.idle >= p.maxIdle {
				p.total--
				p.mu.Unlock()
				return
			}
			p.idle++
			p.cond.Wait()
			if !p.closed {
				p.woken--
			}
			continue
		}
		w := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		p.mu.Unlock()
		p.run(w)
		p.mu.Lock()
		p.returning--
	}
}

// willReturn tells the pool that the calling goroutine's probe run is over
// and, bar bookkeeping that never blocks, it is going back to the queue.
// run calls it exactly once per run.
func (p *pool) willReturn() {
	p.mu.Lock()
	p.returning++
	p.mu.Unlock()
}

// close makes the goroutines exit once the queue is drained and waits for
// all of them.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
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
