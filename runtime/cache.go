package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/nodekit/nodekit/podstate"

	"k8s.io/apimachinery/pkg/types"
)

// PodCache holds the latest runtime status of every pod, as the PLEG reads
// it, and lets a pod worker wait for a status newer than its last sync (the
// kubelet's pod cache). Statuses in the cache are shared: readers must not
// modify them. All methods are safe for concurrent use.
type PodCache struct {
	mu sync.Mutex
	// pods are the statuses by pod UID, with the time they are valid for.
	pods map[types.UID]cacheEntry
	// timestamp is a time every status in the cache is known to be valid
	// at: the start of the PLEG's last complete relist.
	timestamp time.Time
	waiters   map[types.UID][]*cacheWaiter
	// waiting receives a value, without blocking (one at most is queued),
	// when a GetNewerThan call starts to wait: the PLEG, which marks the
	// cache fresh only while someone waits for it, then wakes up.
	waiting chan struct{}
}

type cacheEntry struct {
	status   *podstate.PodStatus
	err      error
	modified time.Time
}

type cacheWaiter struct {
	after time.Time
	ch    chan cacheEntry
}

// NewPodCache returns an empty cache.
func NewPodCache() *PodCache {
	return &PodCache{pods: map[types.UID]cacheEntry{}, waiters: map[types.UID][]*cacheWaiter{}, waiting: make(chan struct{}, 1)}
}

// Get returns the latest status of pod uid and the error of the last
// attempt to read it. A pod the cache does not know has an empty status
// with just its ID.
func (c *PodCache) Get(uid types.UID) (*podstate.PodStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.getLocked(uid)
	return e.status, e.err
}

func (c *PodCache) getLocked(uid types.UID) cacheEntry {
	e, ok := c.pods[uid]
	if !ok {
		return cacheEntry{status: &podstate.PodStatus{ID: uid}, modified: c.timestamp}
	}
	return e
}

// HasPod reports whether the runtime holds anything of pod uid (a sandbox
// or a container, running or not) as the PLEG last read it, and true for
// every pod until the PLEG has completed a first relist (UpdateTime). It
// does not call the runtime: a pod created since the last relist may be
// missing. For the volume manager's orphan cleanup.
func (c *PodCache) HasPod(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timestamp.IsZero() {
		return true
	}
	e, ok := c.pods[uid]
	return ok && e.status != nil && (len(e.status.Sandboxes) > 0 || len(e.status.Containers) > 0)
}

// fresh reports whether e (of pod uid) is newer than t: it was read after
// t, or a complete relist started after t (when nothing changed for the
// pod, its status is still the latest).
func (c *PodCache) fresh(e cacheEntry, t time.Time) bool {
	return e.modified.After(t) || c.timestamp.After(t)
}

// GetNewerThan blocks until the cache holds a status of pod uid newer than
// t and returns it with the error of reading it, or returns ctx's error.
func (c *PodCache) GetNewerThan(ctx context.Context, uid types.UID, t time.Time) (*podstate.PodStatus, error) {
	c.mu.Lock()
	e := c.getLocked(uid)
	if c.fresh(e, t) {
		c.mu.Unlock()
		return e.status, e.err
	}
	w := &cacheWaiter{after: t, ch: make(chan cacheEntry, 1)}
	c.waiters[uid] = append(c.waiters[uid], w)
	c.mu.Unlock()
	signal(c.waiting)
	select {
	case e := <-w.ch:
		return e.status, e.err
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		ws := c.waiters[uid]
		for i, x := range ws {
			if x == w {
				c.waiters[uid] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(c.waiters[uid]) == 0 {
			delete(c.waiters, uid)
		}
		select {
		case e := <-w.ch: // answered meanwhile
			return e.status, e.err
		default:
		}
		return nil, ctx.Err()
	}
}

// logPath returns the log path of container id of pod uid from the pod's
// cached status, and whether the cache has the container.
func (c *PodCache) logPath(uid types.UID, id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.pods[uid]
	if !ok {
		return "", false
	}
	for _, cs := range e.status.Containers {
		if cs.ID == id {
			return cs.LogPath, true
		}
	}
	return "", false
}

// hasWaiters reports whether a GetNewerThan call is waiting.
func (c *PodCache) hasWaiters() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters) > 0
}

// Set stores the status of pod uid read at modified (err: the read failed,
// status may be nil) and wakes the waiters it satisfies. A status read
// before the one the cache holds is dropped: the PLEG and the pod workers
// both write, and the newer read wins.
func (c *PodCache) Set(uid types.UID, status *podstate.PodStatus, err error, modified time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.pods[uid]; ok && e.modified.After(modified) {
		return
	}
	if status == nil {
		status = &podstate.PodStatus{ID: uid}
	}
	c.pods[uid] = cacheEntry{status: status, err: err, modified: modified}
	c.notifyLocked(uid)
}

// Delete forgets pod uid.
func (c *PodCache) Delete(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, uid)
	c.notifyLocked(uid)
}

// UpdateTime records that every status in the cache is valid at t and wakes
// the waiters that makes fresh.
func (c *PodCache) UpdateTime(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.After(c.timestamp) {
		return
	}
	c.timestamp = t
	for uid := range c.waiters {
		c.notifyLocked(uid)
	}
}

func (c *PodCache) notifyLocked(uid types.UID) {
	ws := c.waiters[uid]
	if len(ws) == 0 {
		return
	}
	e := c.getLocked(uid)
	kept := ws[:0]
	for _, w := range ws {
		if c.fresh(e, w.after) {
			w.ch <- e
		} else {
			kept = append(kept, w)
		}
	}
	if len(kept) == 0 {
		delete(c.waiters, uid)
	} else {
		c.waiters[uid] = kept
	}
}
