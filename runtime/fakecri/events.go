package fakecri

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// subscriber is one GetContainerEvents stream.
type subscriber struct {
	ch chan *runtimeapi.ContainerEventResponse
}

// subscribe registers a container event stream; the caller must
// unsubscribe it.
func (s *Server) subscribe() *subscriber {
	sub := &subscriber{ch: make(chan *runtimeapi.ContainerEventResponse, s.eventBuf)}
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
		select {
		case sub.ch <- ev:
		default:
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
