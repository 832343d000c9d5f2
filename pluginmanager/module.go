package pluginmanager

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/nodekit/nodekit/internal/runner"
)

// Module provides the *Manager built from the Options in the graph, with
// the handlers of the value group HandlerGroup (add them with AsHandler)
// added to Options.Handlers, and runs it for the application's lifetime.
// Options.Registerer left nil is filled from the optional
// prometheus.Registerer. The Manager logs with the optional logr.Logger
// (klog's by default) under the name "pluginmanager".
var Module = fx.Options(
	fx.Provide(provide),
	fx.Invoke(func(*Manager) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	Handlers   []TypedHandler        `group:"plugin_handlers"`
	Registerer prometheus.Registerer `optional:"true"`
	runner.Deps
}

func provide(p Params) (*Manager, error) {
	opts := p.Options
	handlers := make(map[string]Handler, len(opts.Handlers)+len(p.Handlers))
	for t, h := range opts.Handlers {
		handlers[t] = h
	}
	for _, h := range p.Handlers {
		if _, dup := handlers[h.Type]; dup {
			return nil, fmt.Errorf("pluginmanager: two handlers for plugin type %q", h.Type)
		}
		handlers[h.Type] = h.Handler
	}
	opts.Handlers = handlers
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "pluginmanager", New, opts)
}
