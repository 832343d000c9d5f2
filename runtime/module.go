package runtime

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"
)

// Module provides a *Client built from the Options in the graph, and its
// cri.RuntimeService and cri.ImageManagerService. The Client is closed when
// the application stops.
var Module = fx.Module("runtime", fx.Provide(provide))

// Params are the dependencies of Module. Options.Registerer and
// Options.Clock, when zero, are taken from the graph's Registerer and Clock.
type Params struct {
	fx.In

	Options    Options
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Lifecycle  fx.Lifecycle
}

// Result is what Module provides.
type Result struct {
	fx.Out

	Client         *Client
	RuntimeService cri.RuntimeService
	ImageService   cri.ImageManagerService
}

func provide(p Params) (Result, error) {
	opts := p.Options
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	c, err := New(opts)
	if err != nil {
		return Result{}, err
	}
	p.Lifecycle.Append(fx.StopHook(c.Close))
	return Result{Client: c, RuntimeService: c.RuntimeService(), ImageService: c.ImageService()}, nil
}
