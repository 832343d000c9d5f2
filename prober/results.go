package prober

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/podstate"
)

// resultCache holds the latest verdict of every worker, by probe type and
// runtime container ID: the kubelet's three results managers in one. It
// also guards the fields of workers that say which entry is theirs
// (worker.fullID, worker.id) and whether they may still write (worker.stopped),
// so a stopped worker's late write can never land.
type resultCache struct {
	mu      sync.RWMutex
	results [numProbeTypes]map[string]podstate.ProbeResult
}

func newResultCache() *resultCache {
	c := &resultCache{}
	for i := range c.results {
		c.results[i] = make(map[string]podstate.ProbeResult)
	}
	return c
}

// get returns the verdict of probe type t for the container, and whether
// there is one.
func (c *resultCache) get(t ProbeType, id string) (podstate.ProbeResult, bool) {
	c.mu.RLock()
	r, ok := c.results[t][id]
	c.mu.RUnlock()
	return r, ok
}

// resultState is a worker's container and its cached result.
type resultState struct {
	id string
	r  podstate.ProbeResult
	ok bool
}

// state returns w's container and its cached result.
func (c *resultCache) state(w *worker) resultState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	st := resultState{id: w.id}
	if w.id != "" && !w.stopped {
		st.r, st.ok = c.results[w.probeType][w.id]
	}
	return st
}

// set records r as w's verdict on its current container, unless w is
// stopped or has seen no container.
func (c *resultCache) set(w *worker, r podstate.ProbeResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.stopped || w.id == "" {
		return
	}
	c.results[w.probeType][w.id] = r
}

// switchContainer makes fullID (ContainerStatus.ContainerID) w's container,
// dropping the verdict on the previous one. It reports false, changing
// nothing, when w is stopped.
func (c *resultCache) switchContainer(w *worker, fullID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.stopped {
		return false
	}
	if w.id != "" {
		delete(c.results[w.probeType], w.id)
	}
	w.fullID, w.id = fullID, runtimeID(fullID)
	return true
}

// stop marks w stopped and drops its verdict.
func (c *resultCache) stop(w *worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.stopped = true
	if w.id != "" {
		delete(c.results[w.probeType], w.id)
	}
}

// runtimeID returns the runtime's container ID from an API ContainerID
// ("containerd://abc" → "abc"); a value without a scheme is returned as is.
func runtimeID(containerID string) string {
	for i := 0; i+2 < len(containerID); i++ {
		if containerID[i] == ':' && containerID[i+1] == '/' && containerID[i+2] == '/' {
			return containerID[i+3:]
		}
	}
	return containerID
}

// notifier coalesces "this pod's results changed" into at most one pending
// UID per pod and hands them to the consumer in order. notify never blocks.
type notifier struct {
	mu      sync.Mutex
	pending map[types.UID]struct{}
	queue   []types.UID
	head    int
	// sending is the UID taken from the queue and not yet received.
	sending types.UID
	signal  chan struct{}
	out     chan types.UID
}

func newNotifier() *notifier {
	return &notifier{
		pending: make(map[types.UID]struct{}),
		signal:  make(chan struct{}, 1),
		out:     make(chan types.UID),
	}
}

// notify queues uid unless it is queued already.
func (n *notifier) notify(uid types.UID) {
	n.mu.Lock()
	if _, ok := n.pending[uid]; !ok {
		n.pending[uid] = struct{}{}
		n.queue = append(n.queue, uid)
	}
	n.mu.Unlock()
	select {
	case n.signal <- struct{}{}:
	default:
	}
}

// next takes the oldest queued uid.
func (n *notifier) next() (types.UID, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.head == len(n.queue) {
		n.queue, n.head = n.queue[:0], 0
		return "", false
	}
	uid := n.queue[n.head]
	n.queue[n.head] = ""
	n.head++
	delete(n.pending, uid)
	n.sending = uid
	return uid, true
}

// sent records that the UID in hand was received (or dropped).
func (n *notifier) sent() {
	n.mu.Lock()
	n.sending = ""
	n.mu.Unlock()
}

// run forwards queued UIDs to out until ctx is done.
func (n *notifier) run(ctx context.Context) {
	for {
		uid, ok := n.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-n.signal:
				continue
			}
		}
		select {
		case <-ctx.Done():
			n.sent()
			return
		case n.out <- uid:
			n.sent()
		}
	}
}
