package agent

import (
	"path/filepath"

	"go.uber.org/fx"

	"github.com/nodekit/nodekit/devices"
	"github.com/nodekit/nodekit/dra"
	"github.com/nodekit/nodekit/podresources"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/resources/cpumanager"
	"github.com/nodekit/nodekit/resources/memorymanager"
)

// PodResources is the kubelet's pod resources API (podresources.Module) on
// <root-dir>/pod-resources/kubelet.sock: the active pods' devices from the
// device manager (Devices, when in the graph), their exclusive CPUs and
// NUMA memory from the CPU and memory managers (ResourceManagers), and
// their prepared ResourceClaims from the DRA manager (DRA, when in the
// graph). CRI includes it.
var PodResources = fx.Options(
	fx.Provide(providePodResourcesOptions),
	podresources.Module,
)

type podResourcesParams struct {
	fx.In

	Config  *Config
	Store   *pods.Store
	Devices *devices.Manager       `optional:"true"`
	CPUs    *cpumanager.Manager    `optional:"true"`
	Memory  *memorymanager.Manager `optional:"true"`
	DRA     *dra.Manager           `optional:"true"`
}

func providePodResourcesOptions(p podResourcesParams) podresources.Options {
	opts := podresources.Options{
		Dir:        filepath.Join(p.Config.RootDir, "pod-resources"),
		ActivePods: p.Store.Active,
	}
	if p.Devices != nil {
		opts.Devices = p.Devices
	}
	if p.CPUs != nil {
		opts.CPUs = p.CPUs
	}
	if p.Memory != nil {
		opts.Memory = p.Memory
	}
	if p.DRA != nil {
		opts.DynamicResources = p.DRA
	}
	return opts
}
