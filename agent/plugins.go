package agent

import (
	"path/filepath"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/pluginmanager"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/volume/csi"
)

// Plugins is the node's plugin registration (part of Core and Standalone):
// pluginmanager.Module watching <root-dir>/plugins_registry, with the CSI
// driver registry *csi.Drivers as the handler of CSIPlugin. The graph gets
// the *pluginmanager.Manager and the *csi.Drivers (for the CSI volume
// plugin's NodeClient). With an API server the Drivers publish the node's
// CSINode, created at start, and its drivers' node IDs and topology on
// the Node; standalone they keep the registry on the node. Add handlers of
// other plugin types with pluginmanager.AsHandler; decorate
// pluginmanager.Options or csi.DriversOptions to change them.
var Plugins = fx.Options(
	fx.Provide(
		func(cfg *Config, _ dataDirs) pluginmanager.Options { return cfg.PluginManagerOptions() },
		func(cfg *Config) csi.DriversOptions { return cfg.CSIDriversOptions() },
		provideCSIDrivers,
	),
	pluginmanager.AsHandler(registerapi.CSIPlugin, func(d *csi.Drivers) pluginmanager.Handler { return d }),
	pluginmanager.Module,
)

// PluginManagerOptions returns the plugin manager's options: the
// registration directory <root-dir>/plugins_registry.
func (cfg *Config) PluginManagerOptions() pluginmanager.Options {
	return pluginmanager.Options{Dir: filepath.Join(cfg.RootDir, "plugins_registry")}
}

// CSIDriversOptions returns the CSI driver registry's options (the node's
// name; the Client and Registerer come from the graph or the caller).
func (cfg *Config) CSIDriversOptions() csi.DriversOptions {
	return csi.DriversOptions{NodeName: cfg.NodeName}
}

type csiDriversParams struct {
	fx.In

	Options    csi.DriversOptions
	Client     kubernetes.Interface  `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	// Node, the node watch, gives the Drivers the Node's registration
	// (the status Reporter runs with it in Core and Standalone).
	Node       *status.NodeWatch `optional:"true"`
	Logger     logr.Logger       `optional:"true"`
	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
}

func provideCSIDrivers(p csiDriversParams) (*csi.Drivers, error) {
	opts := p.Options
	if opts.Client == nil {
		opts.Client = p.Client
	}
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	if opts.Registration == nil && p.Node != nil {
		opts.Registration = p.Node
	}
	d, err := csi.NewDrivers(opts)
	if err != nil {
		return nil, err
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "csidrivers", d.Run)
	return d, nil
}
