package prober

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ProbeType is the kind of a container probe: liveness, readiness or
// startup.
type ProbeType int

// Probe types, in the kubelet's order.
const (
	Liveness ProbeType = iota
	Readiness
	Startup
	numProbeTypes
)

// String returns the type as the kubelet spells it in events and in the
// probe_type label of its metrics: "Liveness", "Readiness" or "Startup".
func (t ProbeType) String() string {
	switch t {
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	case Startup:
		return "Startup"
	default:
		return "UNKNOWN"
	}
}

// Kind names the action of a probe: the v1.ProbeHandler field that is set.
// Handlers are keyed by it.
type Kind string

// The kinds of probe action Kubernetes defines.
const (
	KindExec      Kind = "exec"
	KindHTTPGet   Kind = "httpGet"
	KindTCPSocket Kind = "tcpSocket"
	KindGRPC      Kind = "grpc"
)

// KindOf returns the kind of p's action, checked in the kubelet's order
// (exec, httpGet, tcpSocket, grpc), or "" when p is nil or sets none.
func KindOf(p *v1.Probe) Kind {
	switch {
	case p == nil:
		return ""
	case p.Exec != nil:
		return KindExec
	case p.HTTPGet != nil:
		return KindHTTPGet
	case p.TCPSocket != nil:
		return KindTCPSocket
	case p.GRPC != nil:
		return KindGRPC
	}
	return ""
}

// Result is the outcome of one run of a probe action, as the kubelet's
// pkg/probe.Result.
type Result string

// Probe action outcomes. Warning is a success with something worth telling
// (an HTTP redirect to another host): the container counts as healthy and a
// ProbeWarning event is recorded. Unknown, like Failure, counts as a
// failure.
const (
	Success Result = "success"
	Warning Result = "warning"
	Failure Result = "failure"
	Unknown Result = "unknown"
)

// Target is what a Handler probes: one container of one pod, at one moment.
// The Manager owns it and reuses it for the worker's next run: a Handler
// reads it during Probe and must neither modify nor retain it or anything
// it points to.
type Target struct {
	// ProbeType is the probe being run.
	ProbeType ProbeType
	// Pod and Container are the pod and the container spec the worker was
	// started for.
	Pod       *v1.Pod
	Container *v1.Container
	// Probe is the probe of Container being run (liveness, readiness or
	// startup), with the API defaults applied to its zero fields.
	Probe *v1.Probe
	// ContainerID is the runtime's ID of the container instance (the part
	// of v1.ContainerStatus.ContainerID after "://").
	ContainerID string
	// PodIP is the pod's primary IP from its latest status; hosts default
	// to it.
	PodIP string
	// Timeout is the probe's timeoutSeconds.
	Timeout time.Duration
}

// Handler runs one kind of probe action. The Manager calls Probe from
// several goroutines at once (one call per probe run, never two for the same
// worker at a time); a Handler must be safe for that.
//
// Probe returns the outcome and its output: the message of a failure or a
// warning, which goes into the Unhealthy or ProbeWarning event. A non-nil
// error means the probe could not be run (a port name that does not resolve,
// a CRI error other than a non-zero exit or a timeout): the Manager retries
// it up to three times in a row, then records an Unhealthy event and
// discards the run, as the kubelet does. Probe must honour t.Timeout itself
// (the kubelet's timeouts produce failure messages users know) and return
// promptly when ctx is cancelled (the worker was stopped or the Manager is
// shutting down).
type Handler interface {
	// Kind is the action this handler runs. A Handler given to the Manager
	// with the kind of a default handler replaces it.
	Kind() Kind
	Probe(ctx context.Context, t *Target) (Result, string, error)
}

// ExecRunner runs a command in a container and waits for it, as the CRI's
// ExecSync: cri-api's RuntimeService (and so nodekit's runtime client)
// satisfies it. A command that ran and exited non-zero is reported as an
// error that implements k8s.io/utils/exec.ExitError (cri-client's
// CodeExitError); one that did not finish within timeout as an error that
// wraps cri-client's ErrCommandTimedOut. It must return promptly when ctx is
// cancelled.
type ExecRunner interface {
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
}

// PodStatusFunc returns the latest API status the agent generated for a
// pod (podstatus.Manager.GetPodStatus), and false when it has none. Workers
// read container IDs, states, Started and the pod IP from it. It is called
// from many goroutines, once per probe run, and must not block. The Manager
// does not modify the returned status.
type PodStatusFunc func(uid types.UID) (v1.PodStatus, bool)
