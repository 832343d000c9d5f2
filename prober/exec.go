package prober

import (
	"bytes"
	"context"
	"errors"

	criclient "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

// maxOutputLength caps what a probe keeps of a command's output or an HTTP
// response body, as the kubelet's (10 KiB).
const maxOutputLength = 10 << 10

// errNoExecRunner is what the exec handler reports without a runner.
var errNoExecRunner = errors.New("no exec runner configured for exec probes")

type execHandler struct{ runner ExecRunner }

// NewExecHandler returns the default exec handler, the kubelet's: it runs
// the probe's command in the container with runner.ExecSync and the probe's
// timeout, after expanding $(VAR) references to the container's env vars
// that have a literal value (not valueFrom). Exit code 0 is Success, any
// other exit code Failure, with stdout then stderr (at most 10 KiB) as the
// output; a command that timed out is Failure with the error as output;
// other errors are prober errors. A nil runner makes every run an error.
func NewExecHandler(runner ExecRunner) Handler { return execHandler{runner: runner} }

// Kind returns KindExec.
func (execHandler) Kind() Kind { return KindExec }

// Probe runs t's exec probe.
func (h execHandler) Probe(ctx context.Context, t *Target) (Result, string, error) {
	if h.runner == nil {
		return Unknown, "", errNoExecRunner
	}
	cmd := expandCommand(t.Probe.Exec.Command, t.Container.Env)
	stdout, stderr, err := h.runner.ExecSync(ctx, t.ContainerID, cmd, t.Timeout)
	var out bytes.Buffer
	out.Write(stdout[:min(len(stdout), maxOutputLength)])
	out.Write(stderr[:min(len(stderr), maxOutputLength-out.Len())])
	if err != nil {
		var exit utilexec.ExitError
		if errors.As(err, &exit) {
			if exit.ExitStatus() == 0 {
				return Success, out.String(), nil
			}
			return Failure, out.String(), nil
		}
		if errors.Is(err, criclient.ErrCommandTimedOut) {
			return Failure, err.Error(), nil
		}
		return Unknown, "", err
	}
	return Success, out.String(), nil
}
