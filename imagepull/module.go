package imagepull

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"
)

// Module provides a *Manager from the Options in the graph (New) and
// opens its records (Init) on fx's OnStart, failing the start when their
// directories cannot be made. Options.Images, Clock and Registerer, when
// zero, are taken from the graph's cri.ImageManagerService, clock.Clock
// and prometheus.Registerer. It does not hand the Manager to the runtime
// or the image GC (see the package doc).
var Module = fx.Options(fx.Provide(provide))

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	Images     cri.ImageManagerService `optional:"true"`
	Clock      clock.Clock             `optional:"true"`
	Registerer prometheus.Registerer   `optional:"true"`
	Lifecycle  fx.Lifecycle
}

func provide(p Params) (*Manager, error) {
	o := p.Options
	if o.Images == nil {
		o.Images = p.Images
	}
	if o.Clock == nil {
		o.Clock = p.Clock
	}
	if o.Registerer == nil {
		o.Registerer = p.Registerer
	}
	m, err := New(o)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StartHook(m.Init))
	return m, nil
}
