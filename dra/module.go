package dra

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/runner"
)

// Module provides a *Manager from the Options in the graph and runs it
// (Run) from fx's OnStart to OnStop; a Run that fails (the checkpoint
// cannot be read) stops the application. Options.Client and
// Options.Registerer left nil are taken from the graph's optional
// kubernetes.Interface and prometheus.Registerer. Module does not register
// the Manager with a plugin manager nor hand it to the runtime: add
// pluginmanager.AsHandler(PluginType, ...) and wire PrepareResources,
// UnprepareResources and ApplyContainerConfig where pods are run (the
// agent's DRA option does both).
var Module = fx.Options(
	fx.Provide(provideManager),
	fx.Invoke(func(*Manager) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	Client     kubernetes.Interface  `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	runner.Deps
}

func provideManager(p Params) (*Manager, error) {
	opts := p.Options
	if opts.Client == nil {
		opts.Client = p.Client
	}
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "dra", New, opts)
}
