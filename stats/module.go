package stats

import (
	"go.uber.org/fx"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/cgroupdriver"
)

// Module provides the *Provider, built by New from the Options in the
// graph. Options fields left zero are filled from the graph when it has
// them: Runtime from cri.RuntimeService and Images from
// cri.ImageManagerService (the runtime package's Module provides both),
// Cgroups from *cgroupdriver.Manager, VolumeStats from a VolumeStatsFunc,
// and Clock from clock.Clock. The Provider runs nothing in the background,
// so Module adds no lifecycle hook.
//
// Replace the provider's inputs with fx.Decorate (for example
// func(o stats.Options) stats.Options { o.MaxAge = 5 * time.Second; return o }),
// or consume *Provider through the small interfaces of its users
// (CPUAndMemorySource, or a Summary method set of one's own).
var Module = fx.Options(fx.Provide(provide))

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options     Options
	Runtime     cri.RuntimeService      `optional:"true"`
	Images      cri.ImageManagerService `optional:"true"`
	Cgroups     *cgroupdriver.Manager   `optional:"true"`
	VolumeStats VolumeStatsFunc         `optional:"true"`
	Clock       clock.Clock             `optional:"true"`
}

func provide(p Params) (*Provider, error) {
	o := p.Options
	if o.Runtime == nil && p.Runtime != nil {
		o.Runtime = p.Runtime
	}
	if o.Images == nil && p.Images != nil {
		o.Images = p.Images
	}
	if o.Cgroups == nil && p.Cgroups != nil {
		o.Cgroups = p.Cgroups
	}
	if o.VolumeStats == nil {
		o.VolumeStats = p.VolumeStats
	}
	if o.Clock == nil {
		o.Clock = p.Clock
	}
	return New(o)
}
