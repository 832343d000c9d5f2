package cgroupdriver

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
)

// Module provides the Driver, built from the graph's Options by NewDriver,
// and the *Manager, built from the Options with that Driver, and runs the
// Manager for the application's lifetime (Run starts on OnStart, stops on
// OnStop; a failed Start, such as a cgroup driver mismatch with the
// runtime, shuts the application down). Options fields left zero are filled
// from the graph: Clock and Registerer from the optional clock.Clock and
// prometheus.Registerer. The Manager logs with the optional logr.Logger
// (klog's by default) under the name "cgroupdriver".
//
// Swap or wrap the driver with fx.Decorate(func(d cgroupdriver.Driver)
// cgroupdriver.Driver { ... }): the Manager uses the decorated one.
var Module = fx.Options(
	fx.Provide(NewDriver, provideManager),
	fx.Invoke(func(*Manager) {}),
)

// params are the Manager provider's dependencies in Module.
type params struct {
	fx.In

	Options    Options
	Driver     Driver
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	runner.Deps
}

func provideManager(p params) (*Manager, error) {
	opts := p.Options
	opts.Driver = p.Driver
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "cgroupdriver", New, opts)
}
