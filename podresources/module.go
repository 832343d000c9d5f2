package podresources

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/nodekit/nodekit/internal/runner"
)

// Module provides a *Server from the Options in the graph and runs it
// (Run) from fx's OnStart to OnStop; a Run that fails (the socket cannot be
// created) stops the application. The Options' Registerer defaults to the
// graph's prometheus.Registerer. Change what it reports with fx.Decorate of
// Options (another provider in Devices, CPUs, Memory or DynamicResources);
// replace the Server with fx.Decorate of *Server.
var Module = fx.Options(
	fx.Provide(provideServer),
	fx.Invoke(func(*Server) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	Registerer prometheus.Registerer `optional:"true"`
	runner.Deps
}

func provideServer(p Params) (*Server, error) {
	opts := p.Options
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "podresources", New, opts)
}
