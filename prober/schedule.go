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
		wait := time.Duration(-1)
		if len(m.heap) > 0 {
			wait = max(m.heap[0].next.Sub(now), m.resolution)
		}
		m.mu.Unlock()

		var fired <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = m.clock.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fired = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-fired:
		case <-m.wake:
			if timer != nil && !timer.Stop() {
				// Drain a value that fired meanwhile (fake clocks and
				// pre-1.23 timer semantics keep it).
				select {
				case <-timer.C():
				default:
				}
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

// pool runs probe runs on reusable goroutines. A run never waits for
// another: when no goroutine is idle a new one starts, so a slow or hung
// probe only ever holds up its own worker. At most maxIdle goroutines stay
// parked; the rest exit when they find nothing to do. As a worker is never
// run twice at once, the pool never holds more goroutines than there are
// workers plus maxIdle.
type pool struct {
	mu      sync.Mutex
	cond    sync.Cond
	queue   []*worker
	head    int
	idle    int // parked goroutines not yet signalled
	total   int
	maxIdle int
	started uint64 // goroutines ever started
	closed  bool
	run     func(*worker)
	wg      sync.WaitGroup
}

func newPool(maxIdle int, run func(*worker)) *pool {
	p := &pool{maxIdle: maxIdle, run: run}
	p.cond.L = &p.mu
	return p
}

// submit queues w for a run on an idle or a new goroutine. It never blocks
// for long (only on the pool's lock).
func (p *pool) submit(w *worker) {
	p.mu.Lock()
	p.queue = append(p.queue, w)
	if p.idle > 0 {
		p.idle--
		p.cond.Signal()
	} else {
		p.total++
		p.started++
		p.wg.Add(1)
		go p.loop()
	}
	p.mu.Unlock()
}

func (p *pool) loop() {
	defer p.wg.Done()
	p.mu.Lock()
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
			continue
		}
		w := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		p.mu.Unlock()
		p.run(w)
		p.mu.Lock()
	}
}

// close makes idle goroutines exit once the queue is drained and waits for
// all of them.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.idle = 0
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
