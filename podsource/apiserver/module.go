package apiserver

import (
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/podsource"
)

// Module adds the API server Source, built from the graph's Options, to the
// podsource.SourceGroup value group, where podsource.Module merges it. A
// zero Options.Client is filled from the graph's kubernetes.Interface and a
// zero Clock from the optional clock.Clock.
var Module = fx.Options(
	podsource.AsSource(provide),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options Options
	Client  kubernetes.Interface
	Clock   clock.Clock `optional:"true"`
}

func provide(p Params) (podsource.Source, error) {
	opts := p.Options
	if opts.Client == nil {
		opts.Client = p.Client
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	return New(opts)
}
