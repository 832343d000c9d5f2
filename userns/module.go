package userns

import (
	"context"

	"go.uber.org/fx"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/runner"
)

// Module provides a *Manager from the Options in the graph (New, with the
// graph's logger) and runs it (Run: the cleanup of orphans' ranges) from
// fx's OnStart to OnStop. It does not hand the Manager to the runtime: set
// runtime.PodManagerOptions.UserNamespaces to it (the agent's
// UserNamespaces option does).
var Module = fx.Options(
	fx.Provide(provideManager),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options Options
	runner.Deps
}

func provideManager(p Params) (*Manager, error) {
	logger := p.Logger
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	ctx := klog.NewContext(context.Background(), logger.WithName("userns"))
	return runner.Start(p.Deps, "userns", func(o Options) (*Manager, error) { return New(ctx, o) }, p.Options)
}
