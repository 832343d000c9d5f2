package lease

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/ticks"
)

// Module provides the node lease *Controller, built from the graph's
// Options, and runs it for the application's lifetime: it starts on
// OnStart, stops on OnStop. Options fields left zero are filled from the
// graph: Client from kubernetes.Interface, Clock, Align and Registerer
// from the optional clock.Clock, ticks.Align and prometheus.Registerer (on
// the node's shared ticks the renewals keep the kubelet's timing and
// drift onto the ticks within minutes: Options.Align). The controller logs with
// the optional logr.Logger (klog's by default) under the name "lease".
var Module = fx.Options(
	fx.Provide(provide),
	fx.Invoke(func(*Controller) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	Client     kubernetes.Interface
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Align      ticks.Align           `optional:"true"`
	runner.Deps
}

func provide(p Params) (*Controller, error) {
	opts := p.Options
	if opts.Client == nil {
		opts.Client = p.Client
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	if opts.Align == nil {
		opts.Align = p.Align
	}
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "lease", New, opts)
}
