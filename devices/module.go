package devices

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/nodekit/nodekit/internal/runner"
)

// Module provides a *Manager from the Options in the graph and runs it
// (Run) from fx's OnStart to OnStop; a Run that fails (the registration
// socket cannot be served) stops the application. The Options' Registerer
// defaults to the graph's prometheus.Registerer. Replace the Manager with
// fx.Decorate of *Manager, or change its Options with fx.Decorate.
var Module = fx.Options(
	fx.Provide(provideManager),
	fx.Invoke(func(*Manager) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	Registerer prometheus.Registerer `optional:"true"`
	runner.Deps
}

func provideManager(p Params) (*Manager, error) {
	opts := p.Options
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "devices", New, opts)
}
