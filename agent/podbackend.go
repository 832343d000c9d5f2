package agent

import (
	"context"
	"k8s.io/client-go/tools/record"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/status"
)

// Optional capabilities of a pods.PodBackend the agent uses when present.
type (
	// BackendVersioner names the backend and its version for the node's
	// status.nodeInfo.containerRuntimeVersion ("<name>://<version>").
	BackendVersioner interface {
		Version(ctx context.Context) (name, version string, err error)
	}
	// BackendPinger tells whether the backend is healthy (virtual-kubelet's
	// NodeProvider.Ping): while Ping fails the node is NotReady with its
	// error.
	BackendPinger interface {
		Ping(ctx context.Context) error
	}
)

// backendPingPeriod is how often a BackendPinger is asked.
const backendPingPeriod = 5 * time.Second

// PodBackend is the runtime module of a node whose pods a pods.PodBackend
// runs (a cloud service, virtual machines, a simulator) instead of a CRI
// runtime: pass it to NewWith or RunWith in place of CRI. constructor is an
// fx constructor returning the backend (and optionally an error); it may
// take anything from the graph (*Config, kubernetes.Interface,
// logr.Logger, ...). The loop, admission, pod statuses, the Lease and node
// status are Core's, unchanged; the node's runtime version comes from a
// BackendVersioner and its Ready condition from a BackendPinger when the
// backend is one.
//
//	os.Exit(agent.RunWith(os.Args[1:], agent.PodBackend(newMyBackend)))
func PodBackend(constructor any) fx.Option {
	return fx.Options(
		fx.Provide(
			fx.Annotate(constructor, fx.As(new(pods.PodBackend))),
			provideBackendRuntime,
			backendStatusFuncs,
		),
	)
}

// BackendRuntimeResult is what PodBackend provides for the loop.
type BackendRuntimeResult struct {
	fx.Out

	Runtime pods.Runtime
	Backend *pods.BackendRuntime
}

func provideBackendRuntime(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, b pods.PodBackend, clk clock.Clock, rec record.EventRecorder) (BackendRuntimeResult, error) {
	r, err := pods.NewBackendRuntime(b, pods.BackendRuntimeOptions{Clock: clk, Recorder: rec})
	if err != nil {
		return BackendRuntimeResult{}, err
	}
	runner.Hook(lc, sd, logger, "podbackend", r.Run)
	return BackendRuntimeResult{Runtime: r, Backend: r}, nil
}

// BackendStatusFuncs are the node status setters' runtime funcs of a
// pod-level node.
type BackendStatusFuncs struct {
	fx.Out

	Version status.RuntimeVersionFunc
	Health  status.RuntimeHealthFunc
}

func backendStatusFuncs(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, b pods.PodBackend, clk clock.Clock) BackendStatusFuncs {
	out := BackendStatusFuncs{
		Version: func(context.Context) (string, string, error) { return "nodekit", nodekit.Version, nil },
		Health:  func(context.Context) (error, error) { return nil, nil },
	}
	if v, ok := b.(BackendVersioner); ok {
		out.Version = v.Version
	}
	if p, ok := b.(BackendPinger); ok {
		h := &pingHealth{ping: p, clock: clk}
		runner.Hook(lc, sd, logger, "podbackend-ping", h.run)
		out.Health = h.health
	}
	return out
}

// pingHealth asks a BackendPinger every backendPingPeriod in the
// background, so the Ready setter never blocks on the backend.
type pingHealth struct {
	ping  BackendPinger
	clock clock.Clock

	mu  sync.Mutex
	err error
}

func (h *pingHealth) run(ctx context.Context) error {
	t := h.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			callCtx, cancel := context.WithTimeout(ctx, backendPingPeriod)
			err := h.ping.Ping(callCtx)
			cancel()
			h.mu.Lock()
			h.err = err
			h.mu.Unlock()
			t.Reset(backendPingPeriod)
		}
	}
}

func (h *pingHealth) health(context.Context) (error, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err, nil
}
