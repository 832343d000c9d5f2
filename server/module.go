package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/fxgroup"
	"github.com/nodekit/nodekit/internal/runner"
)

// RouteGroup is the fx value group of Route an embedder adds to, to serve
// another endpoint or to replace (same Path) or remove (nil Handler) a
// default one.
const RouteGroup = "node_api_routes"

// AsRoute returns an fx option that adds a Route, or what an fx constructor
// returns (a Route, optionally with an error), to the RouteGroup: a new
// endpoint, a replacement of the default one of the same Path, or, with a
// nil Handler, its removal.
func AsRoute(route any) fx.Option {
	return fxgroup.Provide(RouteGroup, route, func(r Route) Route { return r })
}

// Module provides the node API *Server, built from the graph's Options and
// the routes in the RouteGroup value group, and runs it from the
// application's start to its stop. Options fields left zero are filled
// from the graph: Client from kubernetes.Interface, Clock from the optional
// clock.Clock (when it has tickers), Registerer from the optional
// prometheus.Registerer. The server logs with the optional logr.Logger
// (klog's by default) under the name "server".
var Module = fx.Options(
	fx.Provide(Provide),
	fx.Invoke(func(*Server) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	Routes     []Route               `group:"node_api_routes"`
	Client     kubernetes.Interface  `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	runner.Deps
}

// Provide is Module's constructor: the *Server of p.Options, with the
// defaults Module documents filled from p, run by p's lifecycle from start
// to stop. An embedder that decides itself whether a node API exists
// provides the *Server with a function of its own that calls Provide (or
// returns nil) instead of using Module.
func Provide(p Params) (*Server, error) {
	opts := p.Options
	if opts.Client == nil {
		opts.Client = p.Client
	}
	if opts.Clock == nil {
		if c, ok := p.Clock.(clock.WithTicker); ok {
			opts.Clock = c
		}
	}
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	opts.Routes = append(append([]Route(nil), opts.Routes...), p.Routes...)
	return runner.Start(p.Deps, "server", New, opts)
}
