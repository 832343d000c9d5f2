// Package pluginmanager registers the node's plugins the way the kubelet's
// plugin manager (pkg/kubelet/pluginmanager) does, so an unmodified
// node-driver-registrar sidecar, or a DRA driver's kubelet plugin library,
// registers with a nodekit agent.
//
// A plugin announces itself by creating a unix socket under the
// registration directory, <root-dir>/plugins_registry (or a directory below
// it), that serves the pluginregistration v1 Registration service
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1). For every new socket the
// Manager dials it, calls GetInfo, hands the answer to the Handler of the
// plugin's type (CSIPlugin, DRAPlugin, ...) — ValidatePlugin, then
// RegisterPlugin — and tells the plugin the outcome with
// NotifyRegistrationStatus. When the socket disappears the Handler's
// DeRegisterPlugin is called; a socket created again (a plugin restarted)
// is de-registered and registered anew. A failed registration is retried
// with exponential back-off (0.5 s doubling to 2 min 2 s, as the kubelet's
// operation executor). Sockets present when Run starts are registered as
// new ones, so the node's plugins are found again after an agent restart.
// Names beginning with "." and files that are not sockets are ignored.
// Stopping the Manager de-registers nothing: the plugins stay registered
// in the cluster for the next start to find.
//
// The directory is watched with inotify, one instance shared by the
// Managers of a process. Where inotify is not available (another
// platform, or the user's fs.inotify.max_user_instances used up by other
// processes) the Manager says so in its log and lists the directory every
// second instead.
//
// # Swapping pieces
//
// Handlers are a value group: add one with AsHandler(pluginType, handler)
// (handler is a Handler or an fx constructor of one), and Module's Manager
// dispatches that type to it. Options (the directory) comes from the graph
// and can be decorated with fx.Decorate. Without fx, build a Manager with
// New, add handlers with Options.Handlers and call Run.
//
// The gauge plugin_manager_total_plugins{socket_path, state} (the
// kubelet's, states desired_state_of_world and actual_state_of_world) is
// registered on Options.Registerer.
package pluginmanager
