package volume

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/fxgroup"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/ticks"
)

// Module provides the volume *Manager built from the volume.Options in the
// graph and runs it (Run) for the application's lifetime. Options fields
// left zero are filled from the graph: Client from kubernetes.Interface,
// Recorder, Clock, Align and Registerer from the optional
// record.EventRecorder, clock.Clock, ticks.Align and prometheus.Registerer. Plugins provided to the value
// group PluginGroup ("volume_plugins") are added to Options.Plugins. The
// Manager logs with the optional logr.Logger (klog's by default) under the
// name "volume".
var Module = fx.Options(
	fx.Provide(provide),
	fx.Invoke(func(*Manager) {}),
)

// AsPlugin returns an fx option that adds a Plugin, or what an fx
// constructor returns (a Plugin, optionally with an error), to the
// PluginGroup.
func AsPlugin(plugin any) fx.Option {
	return fxgroup.Provide(PluginGroup, plugin, func(p Plugin) Plugin { return p })
}

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	Plugins    []Plugin              `group:"volume_plugins"`
	Client     kubernetes.Interface  `optional:"true"`
	Recorder   record.EventRecorder  `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Align      ticks.Align           `optional:"true"`
	runner.Deps
}

func provide(p Params) (*Manager, error) {
	opts := p.Options
	if opts.Client == nil {
		opts.Client = p.Client
	}
	if opts.Recorder == nil {
		opts.Recorder = p.Recorder
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
	opts.Plugins = append(append([]Plugin(nil), opts.Plugins...), p.Plugins...)
	return runner.Start(p.Deps, "volume", New, opts)
}
