package agent

import (
	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/volume"
	"github.com/nodekit/nodekit/volume/csi"
)

// Volumes is the volume manager of a CRI node (part of CRI): volume.Module
// configured from the *Config (Config.VolumeOptions) with the node's
// allocatable from the node watch, the pod sources' readiness and "pod
// known" (to the pod lifecycle loop, or the runtime still has something of
// it) for the cleanup of orphaned pod directories; the *volume.Manager as
// the runtime.VolumeManager the CRI backend mounts pods' volumes through
// before their containers start and unmounts them after they stopped; its
// watch-based configMaps and secrets as the pull secret source
// (runtime.SecretGetter; the pod manager's env sources come from it too);
// the VolumesInUse node status setter's funcs; and the CSI volume plugin
// (csi.Plugin) on the registered drivers (*csi.Drivers, when the graph has
// them) for CSI PersistentVolumes and inline CSI volumes. Decorate volume.Options
// to change the periods or the mounter; add plugins with volume.AsPlugin.
var Volumes = fx.Options(
	fx.Provide(
		volumeOptions,
		func(m *volume.Manager) runtime.VolumeManager { return m },
		func(m *volume.Manager) runtime.SecretGetter { return m.Secret },
		func(m *volume.Manager) status.VolumesInUseFuncs {
			return status.VolumesInUseFuncs{Synced: m.ReconcilerSynced, InUse: m.VolumesInUse}
		},
		newCSIPlugin,
	),
	volume.AsPlugin(func(p *csi.Plugin) volume.Plugin {
		if p == nil {
			return nil
		}
		return p
	}),
	volume.Module,
)

// volumeOptions completes Config.VolumeOptions from the graph. "Pod known"
// and the sources' readiness come from the pods.Store and the PLEG's
// runtime.PodCache, which the pod lifecycle loop and the PLEG write: the
// loop depends on the backend, which mounts through the volume manager, so
// the manager reads what they record instead of depending on them.
func volumeOptions(cfg *Config, node *status.NodeWatch, loop *pods.Store, runtimePods *runtime.PodCache, _ dataDirs) volume.Options {
	o := cfg.VolumeOptions()
	o.NodeAllocatable = node.Allocatable
	o.NodeLabels = func() map[string]string {
		if n, ok := node.Node(); ok {
			return n.Labels
		}
		return nil
	}
	o.SourcesReady = loop.SourcesReady
	o.PodKnown = func(uid types.UID) bool { return loop.Known(uid) || runtimePods.HasPod(uid) }
	return o
}

type csiPluginParams struct {
	fx.In

	Config  *Config
	Drivers *csi.Drivers         `optional:"true"`
	Client  kubernetes.Interface `optional:"true"`
}

// newCSIPlugin is the CSI volume plugin on the node's driver registry; nil
// (no plugin) without a registry.
func newCSIPlugin(p csiPluginParams) (*csi.Plugin, error) {
	if p.Drivers == nil {
		return nil, nil
	}
	return csi.NewPlugin(csi.PluginOptions{RootDir: p.Config.RootDir, NodeName: p.Config.NodeName, Drivers: p.Drivers, Client: p.Client})
}
