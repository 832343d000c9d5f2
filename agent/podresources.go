package agent

import (
	"path/filepath"

	"go.uber.org/fx"

	"github.com/nodekit/nodekit/devices"
	"github.com/nodekit/nodekit/dra"
	"github.com/nodekit/nodekit/podresources"
	"github.com/nodekit/nodekit/pods"
)

// PodResources is the kubelet's pod resources API (podresources.Module) on
// <root-dir>/pod-resources/kubelet.sock: the active pods' devices from the
// device manager (Devices, when in the graph) and their prepared
// ResourceClaims from the DRA manager (DRA, when in the graph). nodekit has
// no CPU or memory manager yet, so CPU IDs and memory are empty, as the
// kubelet reports them with its default policies; an embedder with such
// managers sets them with fx.Decorate of podresources.Options. CRI
// includes it.
var PodResources = fx.Options(
	fx.Provide(providePodResourcesOptions),
	podresources.Module,
)

type podResourcesParams struct {
	fx.In

	Config  *Config
	Store   *pods.Store
	Devices *devices.Manager `optional:"true"`
	DRA     *dra.Manager     `optional:"true"`
}

func providePodResourcesOptions(p podResourcesParams) podresources.Options {
	opts := podresources.Options{
		Dir:        filepath.Join(p.Config.RootDir, "pod-resources"),
		ActivePods: p.Store.Active,
	}
	if p.Devices != nil {
		opts.Devices = p.Devices
	}
	if p.DRA != nil {
		opts.DynamicResources = p.DRA
	}
	return opts
}
