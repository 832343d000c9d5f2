package fakecri

import (
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// subscriber is one GetContainerEvents stream: the events sent to it and
// not yet taken, at most max (the Server's EventBuffer). Its queue grows
// with what is pending and is dropped once drained, so an idle stream holds
// no buffer: a fleet's agents each keep one open on their own fake runtime.
type subscriber struct {
	max int
	// ready has one slot, filled when an event is queued.
	ready chan struct{}

	mu    sync.Mutex
	queue []*runtimeapi.ContainerEventResponse
}

// push queues ev, false when max events are queued already.
func (sub *subscriber) push(ev *runtimeapi.ContainerEventResponse) bool {
	sub.mu.Lock()
	if len(sub.queue) >= sub.max {
		sub.mu.Unlock()
		return false
	}
	sub.queue = append(sub.queue, ev)
	sub.mu.Unlock()
	select {
	case sub.ready <- struct{}{}:
	default:
	}
	return true
}

// pop takes the oldest queued event, false when none is queued; a caller
// that finds none waits for ready before it tries again.
func (sub *subscriber) pop() (*runtimeapi.ContainerEventResponse, bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.queue) == 0 {
		return nil, false
	}
	ev := sub.queue[0]
	sub.queue[0] = nil
	if sub.queue = sub.queue[1:]; len(sub.queue) == 0 {
		sub.queue = nil
	}
	return ev, true
}

// subscribe registers a container event stream; the caller must
// unsubscribe it.
func (s *Server) subscribe() *subscriber {
	sub := &subscriber{max: s.eventBuf, ready: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subscribers[sub] = struct{}{}
	return sub
}

func (s *Server) unsubscribe(sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subscribers, sub)
}

// emitContainerLocked sends an event about container c.
func (s *Server) emitContainerLocked(t runtimeapi.ContainerEventType, c *container, at int64) {
	s.emitLocked(t, c.id, s.sandboxes[c.sandboxID], at)
}

// emitLocked sends a container event to every stream, as containerd does:
// the event carries the status of the container's sandbox and of all the
// sandbox's containers (sandbox lifecycle events carry the sandbox ID as
// their container ID). A stream whose buffer is full loses the event; the
// kubelet's relist covers such gaps.
func (s *Server) emitLocked(t runtimeapi.ContainerEventType, containerID string, sb *sandbox, at int64) {
	if len(s.subscribers) == 0 {
		return
	}
	ev := &runtimeapi.ContainerEventResponse{ContainerId: containerID, ContainerEventType: t, CreatedAt: at}
	if sb != nil {
		ev.PodSandboxStatus = s.sandboxStatusLocked(sb)
		for _, c := range s.sandboxContainers(sb.id) {
			ev.ContainersStatuses = append(ev.ContainersStatuses, s.containerStatusLocked(c))
		}
	}
	for sub := range s.subscribers {
		if !sub.push(ev) {
			s.dropped++
		}
	}
}

// DroppedEvents returns how many container events were lost because a
// GetContainerEvents stream did not keep up.
func (s *Server) DroppedEvents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// EventStreams returns how many GetContainerEvents streams are open.
func (s *Server) EventStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subscribers)
}
