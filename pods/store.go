package pods

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Store holds the pods the node has admitted and not yet seen terminate:
// what the node's resources are committed to (the kubelet's active pods).
// The Controller writes it; others read it without depending on the
// Controller (the cgroup hierarchy sizes the Burstable QoS cgroup from it,
// the eviction manager ranks it), which keeps the graph free of cycles.
// Its methods are safe for concurrent use. A zero Store is not usable; use
// NewStore.
type Store struct {
	mu   sync.RWMutex
	pods map[types.UID]*v1.Pod
}

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{pods: map[types.UID]*v1.Pod{}} }

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
