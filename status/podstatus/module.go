package podstatus

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/ticks"
)

// Interface is what the agent's pod workers need from a pod status manager;
// *Manager implements it. The methods must not block on the API server.
type Interface interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
	SetPodStatus(pod *v1.Pod, status v1.PodStatus)
	TerminatePod(pod *v1.Pod)
	RemovePod(uid types.UID)
}

var _ Interface = (*Manager)(nil)

// Module provides the pod status *Manager, also as Interface, and runs it
// for the application's lifetime under the name "podstatus". Options is
// optional in the graph; its zero fields are filled from the graph: Client
// from the optional kubernetes.Interface (without one the Manager keeps the
// statuses locally: a standalone node), Clock, Align, Registerer and Logger from the optional
// clock.Clock, ticks.Align, prometheus.Registerer and logr.Logger, and Pods from an
// optional PodGetter (the agent provides its pod source's).
var Module = fx.Options(
	fx.Provide(provide, func(m *Manager) Interface { return m }),
	fx.Invoke(func(*Manager) {}),
)

// params are Module's dependencies.
type params struct {
	fx.In

	Options    Options               `optional:"true"`
	Client     kubernetes.Interface  `optional:"true"`
	Pods       PodGetter             `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Align      ticks.Align           `optional:"true"`
	runner.Deps
}

func provide(p params) (*Manager, error) {
	opts := p.Options
	if opts.Client == nil {
		opts.Client = p.Client
	}
	if opts.Pods == nil {
		opts.Pods = p.Pods
	}
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	if opts.Align == nil {
		opts.Align = p.Align
	}
	if opts.Logger.GetSink() == nil {
		// NewManager defaults a zero logger to klog's.
		opts.Logger = p.Logger
	}
	return runner.Start(p.Deps, "podstatus", NewManager, opts)
}
