package prober

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/tools/record"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/fxgroup"
	"github.com/nodekit/nodekit/internal/runner"
)

// HandlerGroup is the fx value group of Handler: a handler in it replaces
// the default handler of its Kind, or adds one.
const HandlerGroup = "probe_handlers"

// AsHandler returns an fx option that adds a Handler, or what an fx
// constructor returns (a Handler, optionally with an error), to the
// HandlerGroup.
func AsHandler(handler any) fx.Option {
	return fxgroup.Provide(HandlerGroup, handler, func(h Handler) Handler { return h })
}

// MetricsRegistererName names the prometheus.Registerer Module prefers for
// the prober's metrics: the kubelet serves them on /metrics/probes, from a
// registry of their own.
const MetricsRegistererName = "probe_metrics"

// Module provides a *Manager and runs it from the application's start to
// its stop. See Params for what it takes from the graph.
var Module = fx.Options(fx.Provide(provide))

// Params are the dependencies of Module. Fields of Options left zero are
// filled from the graph: PodStatus from a PodStatusFunc; Exec from an
// ExecRunner, else from cri-api's RuntimeService (runtime.Module provides
// it); Handlers from the HandlerGroup group (appended after Options'
// own); Recorder, Clock; Registerer from the one named
// MetricsRegistererName, else the unnamed one.
type Params struct {
	fx.In

	Options         Options               `optional:"true"`
	PodStatus       PodStatusFunc         `optional:"true"`
	Exec            ExecRunner            `optional:"true"`
	RuntimeService  cri.RuntimeService    `optional:"true"`
	Handlers        []Handler             `group:"probe_handlers"`
	Recorder        record.EventRecorder  `optional:"true"`
	Clock           clock.Clock           `optional:"true"`
	ProbeRegisterer prometheus.Registerer `name:"probe_metrics" optional:"true"`
	Registerer      prometheus.Registerer `optional:"true"`
	runner.Deps
}

func provide(p Params) (*Manager, error) {
	opts := p.Options
	if opts.PodStatus == nil {
		opts.PodStatus = p.PodStatus
	}
	if opts.Exec == nil {
		opts.Exec = p.Exec
	}
	if opts.Exec == nil && p.RuntimeService != nil {
		opts.Exec = p.RuntimeService
	}
	opts.Handlers = append(append([]Handler(nil), opts.Handlers...), p.Handlers...)
	if opts.Recorder == nil {
		opts.Recorder = p.Recorder
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	if opts.Registerer == nil {
		opts.Registerer = p.ProbeRegisterer
	}
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "prober", New, opts)
}
