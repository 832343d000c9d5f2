package fakecri

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ExecRequest is one ExecSync call, with what the fake knows of the
// container it targets.
type ExecRequest struct {
	ContainerID   string
	ContainerName string
	// PodName, PodNamespace and PodUID come from the container's sandbox.
	PodName, PodNamespace, PodUID string
	// Cmd is the command as requested. It belongs to the handler.
	Cmd []string
}

// ExecResult is what an ExecSync call returns. A non-zero Delay makes the
// call take that long on the Server's clock; a call whose Delay exceeds its
// timeout fails with codes.DeadlineExceeded, as a command that hangs does.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int32
	Delay          time.Duration
}

// ExecHandler answers ExecSync calls. It is called without the Server's lock
// held, possibly concurrently, and must not block.
type ExecHandler func(ExecRequest) ExecResult

// SetExecHandler makes h answer later ExecSync calls; nil restores the
// default (exit code 0, no output).
func (s *Server) SetExecHandler(h ExecHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exec = h
}

func (s *Server) execSync(done <-chan struct{}, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "exec command is empty")
	}
	s.mu.Lock()
	s.advanceLocked()
	c, err := s.lookupContainer(req.GetContainerId())
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not in running state", c.id)
	}
	er := ExecRequest{ContainerID: c.id, ContainerName: c.config.GetMetadata().GetName(), Cmd: append([]string(nil), req.GetCmd()...)}
	if sb := s.sandboxes[c.sandboxID]; sb != nil {
		md := sb.config.GetMetadata()
		er.PodName, er.PodNamespace, er.PodUID = md.GetName(), md.GetNamespace(), md.GetUid()
	}
	handler := s.exec
	s.mu.Unlock()

	var res ExecResult
	if handler != nil {
		res = handler(er)
	}
	timeout := time.Duration(req.GetTimeout()) * time.Second
	if res.Delay > 0 {
		wait := res.Delay
		if timeout > 0 && timeout < wait {
			wait = timeout
		}
		t := s.clock.NewTimer(wait)
		defer t.Stop()
		select {
		case <-done:
			return nil, status.Error(codes.Canceled, "exec canceled")
		case <-t.C():
		}
		if timeout > 0 && res.Delay > timeout {
			return nil, status.Errorf(codes.DeadlineExceeded, "command %q timed out after %v", req.GetCmd(), timeout)
		}
	}
	return &runtimeapi.ExecSyncResponse{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, nil
}
