package pluginmanager

import (
	"context"
	"time"

	"go.uber.org/fx"

	"github.com/nodekit/nodekit/internal/fxgroup"
)

// Handler consumes the plugins of one type, as the kubelet's
// cache.PluginHandler. For each socket the Manager calls, in order and
// never concurrently for the same socket: ValidatePlugin, then (when it
// returned nil) RegisterPlugin, and DeRegisterPlugin after the socket is
// gone, or before the plugin registers again from a socket created anew.
// Calls for different sockets may run concurrently. ctx carries the
// Manager's logger and is cancelled when the Manager stops.
type Handler interface {
	// ValidatePlugin returns an error when the plugin cannot be registered
	// (a version not supported, a name already taken by a newer one); the
	// error is sent to the plugin.
	ValidatePlugin(ctx context.Context, pluginName, endpoint string, versions []string) error
	// RegisterPlugin makes the plugin available. pluginClientTimeout, when
	// not nil, bounds the handler's calls to the plugin. An error is sent
	// to the plugin and the registration is retried with back-off.
	RegisterPlugin(ctx context.Context, pluginName, endpoint string, versions []string, pluginClientTimeout *time.Duration) error
	// DeRegisterPlugin forgets a plugin RegisterPlugin accepted.
	DeRegisterPlugin(ctx context.Context, pluginName, endpoint string)
}

// HandlerGroup is the fx value group of TypedHandlers Module's Manager
// dispatches to; add to it with AsHandler.
const HandlerGroup = "plugin_handlers"

// TypedHandler is a Handler with the plugin type it handles (the
// pluginregistration v1 PluginInfo.Type: "CSIPlugin", "DRAPlugin", ...).
type TypedHandler struct {
	Type    string
	Handler Handler
}

// AsHandler returns an fx option that adds handler, a Handler or an fx
// constructor returning one (and optionally an error), to HandlerGroup for
// plugins of pluginType. Two handlers of one type make Module fail.
func AsHandler(pluginType string, handler any) fx.Option {
	return fxgroup.Provide(HandlerGroup, handler, func(h Handler) TypedHandler {
		return TypedHandler{Type: pluginType, Handler: h}
	})
}
