package pods

import (
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Store holds the pod lifecycle loop's state that others read: the pods
// the node has admitted and not yet seen terminate (what the node's
// resources are committed to, the kubelet's active pods), the pods the
// loop still has business with (Known) and whether every source has been
// handled (SourcesReady). The Controller writes it; others read it without
// depending on the Controller (the cgroup hierarchy sizes the Burstable QoS
// cgroup from it, the eviction manager ranks it, the volume manager's
// orphan cleanup asks it), which keeps the graph free of cycles: the loop
// depends on them. Its methods are safe for concurrent use. A zero Store is
// not usable; use NewStore. One Controller writes a Store.
type Store struct {
	mu   sync.RWMutex
	pods map[types.UID]*v1.Pod
	// known are the pods the Controller has business with, and why.
	known        map[types.UID]knownBy
	sourcesReady atomic.Bool
}

// knownBy are the reasons the Controller knows a pod, bits of one mask: the
// pod is known while any is set.
type knownBy uint8

const (
	// knownRecord: a source delivered it and it was not removed yet.
	knownRecord knownBy = 1 << iota
	// knownWorker: it has a pod worker (it may be stopping).
	knownWorker
	// knownOrphan: housekeeping is stopping it although no source knows it.
	knownOrphan
)

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{pods: map[types.UID]*v1.Pod{}, known: map[types.UID]knownBy{}}
}

// SourcesReady reports whether the loop has handled the first update of
// every pod source (admitted its pods, started their workers): from then
// on a pod the loop does not know (Known) is one no source wants, and its
// containers, volumes and directories may be removed. Housekeeping,
// container garbage collection and the volume manager's orphan cleanup wait
// for it, as the kubelet's sourcesReady. It never turns false; it does not
// block.
func (s *Store) SourcesReady() bool { return s.sourcesReady.Load() }

// Known reports whether the loop still has business with pod uid: a source
// delivered it and it was not removed yet, it has a worker (it may be
// stopping), or housekeeping is stopping it as an orphan. A pod it does not
// know may have leftovers on the node that are safe to clean up (the
// volume manager's orphaned pod directories), once SourcesReady. It does
// not block.
func (s *Store) Known(uid types.UID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.known[uid] != 0
}

// setKnown sets (on) or clears one reason the loop knows pod uid.
func (s *Store) setKnown(uid types.UID, by knownBy, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.known[uid] &^ by
	if on {
		k |= by
	}
	if k == 0 {
		delete(s.known, uid)
		return
	}
	s.known[uid] = k
}

// knowsNone reports whether the loop has business with no pod at all.
func (s *Store) knowsNone() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.known) == 0
}

// Active returns the admitted pods that have not terminated, in no
// particular order. The slice is the caller's; the pods are shared and must
// not be modified.
func (s *Store) Active() []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*v1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, p)
	}
	return out
}

// Len returns the number of active pods.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.pods)
}

// set records pod as active, or updates its spec.
func (s *Store) set(pod *v1.Pod) {
	s.mu.Lock()
	s.pods[pod.UID] = pod
	s.mu.Unlock()
}

// update replaces an active pod's object; a pod that is not active stays
// so.
func (s *Store) update(pod *v1.Pod) {
	s.mu.Lock()
	if _, ok := s.pods[pod.UID]; ok {
		s.pods[pod.UID] = pod
	}
	s.mu.Unlock()
}

// delete records that the pod is no longer active.
func (s *Store) delete(uid types.UID) {
	s.mu.Lock()
	delete(s.pods, uid)
	s.mu.Unlock()
}
