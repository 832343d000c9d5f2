package agent

import (
	"go.uber.org/fx"

	"github.com/nodekit/nodekit/dra"
	"github.com/nodekit/nodekit/pluginmanager"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/ticks"
)

// DRA is the kubelet's Dynamic Resource Allocation manager (dra.Module):
// DRA drivers' kubelet plugins registered through the plugin manager
// (type DRAPlugin), the ResourceClaims of the node's pods prepared before
// their sandboxes are created and released once their containers stopped,
// the claims' CDI devices in the containers' CRI configs (the pod manager's
// runtime.DynamicResources), the claim checkpoint
// <root-dir>/dra_manager_state, and the claims of pods no longer active
// released once the pod sources are ready. It tells the PodFeatures admit
// handler to admit pods with resourceClaims (without DRA they are refused
// with PodFeatureUnsupported). It is the pod lifecycle loop's
// pods.ResourceHealthProvider: the health drivers report for the claims'
// devices in the containers' statuses (allocatedResourcesStatus,
// ResourceHealthStatus). CRI includes it. Change its
// inputs with fx.Decorate of dra.Options.
var DRA = fx.Options(
	fx.Provide(
		provideDRAOptions,
		func(m *dra.Manager) runtime.DynamicResources { return m },
		// The claims' devices' health in the pods' statuses.
		fx.Annotated{Group: pods.ResourceHealthGroup, Target: func(m *dra.Manager) pods.ResourceHealthProvider { return m }},
	),
	pluginmanager.AsHandler(dra.PluginType, func(m *dra.Manager) pluginmanager.Handler { return m }),
	// Pods with resourceClaims are admitted: their claims are prepared.
	pods.AsSupportedPodFeature(pods.FeatureResourceClaims),
	dra.Module,
)

func provideDRAOptions(cfg *Config, store *pods.Store, align ticks.Align) dra.Options {
	return dra.Options{
		NodeName:     cfg.NodeName,
		StateDir:     cfg.RootDir,
		ActivePods:   store.Active,
		SourcesReady: store.SourcesReady,
		Align:        align,
	}
}
