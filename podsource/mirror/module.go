package mirror

import (
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes"
)

// Module provides the *Client, built from the graph's Options; a zero
// Options.Client is filled from the graph's kubernetes.Interface.
var Module = fx.Options(
	fx.Provide(provide),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options Options
	Client  kubernetes.Interface
}

func provide(p Params) (*Client, error) {
	opts := p.Options
	if opts.Client == nil {
		opts.Client = p.Client
	}
	return New(opts)
}
