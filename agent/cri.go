package agent

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/devices"
	"github.com/nodekit/nodekit/eviction"
	"github.com/nodekit/nodekit/imagepull"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/machine"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/resources/cpumanager"
	"github.com/nodekit/nodekit/resources/memorymanager"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/ticks"
	"github.com/nodekit/nodekit/volume"
)

// CRI runs the node's pods on a CRI runtime (containerd, CRI-O, or
// runtime/fakecri) from the *Config in the graph: the CRI connection
// (runtime.Module), a background poller of the runtime's status, version
// and images for the node status setters, the cgroup hierarchy
// (cgroupdriver.Module, left out with cgroupsPerQOS false), the pod manager,
// PLEG and the CRI backend that provides pods.Runtime (runtime.PodsModule),
// the PLEG's health check gating Ready, the stats provider (node, pod
// and container usage from the kernel and the CRI) the node API and the
// eviction manager read with the pods' volume usage (VolumeStats), the
// eviction manager (Eviction), the volume manager (Volumes), and image
// garbage collection and container log rotation (RuntimeGC), the image
// pull manager's check of a pod's credentials (ImagePulls), and the
// device manager (Devices), the CPU, memory and topology managers
// (ResourceManagers), Dynamic Resource Allocation (DRA), user namespaces
// (UserNamespaces) and the pod resources API (PodResources). The CRI
// services come from the
// graph: fx.Decorate cri.RuntimeService or cri.ImageManagerService to wrap
// them for pod syncing.
var CRI = fx.Options(
	fx.Provide(
		func(cfg *Config) runtime.Options { return cfg.RuntimeOptions() },
		provideStatusPoller,
		provideCgroups,
		podManagerOptions,
		// The images the containers mount, which the pod manager records
		// and the image GC reads.
		runtime.NewImageMounts,
		newServiceLister,
		statsOptions,
	),
	status.AsHealthCheck(plegHealthCheck),
	fx.Invoke(syncStatusOnRuntimeChanges),
	// failSwapOn and memorySwap, as the kubelet's container manager.
	fx.Invoke(checkSwap),
	runtime.Module,
	runtime.PodsModule,
	stats.Module,
	Volumes,
	RuntimeGC,
	ImagePulls,
	VolumeStats,
	Eviction,
	Devices,
	ResourceManagers,
	DRA,
	UserNamespaces,
	PodResources,
)

// RuntimeFuncs are the container runtime's answers the node status setters
// take, from the runtime.StatusPoller: they never block on the runtime.
type RuntimeFuncs struct {
	fx.Out

	Poller   *runtime.StatusPoller
	Version  status.RuntimeVersionFunc
	Health   status.RuntimeHealthFunc
	Images   status.ListImagesFunc
	Handlers status.RuntimeHandlersFunc
	Features status.RuntimeFeaturesFunc
}

// syncStatusOnRuntimeChanges makes a node status cycle at once whenever the
// runtime's health changes (runtime.StatusPoller.Changes): the Ready
// condition follows a runtime that went down, hung or came back without
// waiting for the next status period, so a frozen runtime turns the node
// NotReady DownThreshold (30 s) after its last answer rather than up to a
// status period later.
func syncStatusOnRuntimeChanges(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, p *runtime.StatusPoller, r *status.Reporter) {
	runner.Hook(lc, sd, logger, "runtimestatus-sync", func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-p.Changes():
				r.SyncNow()
			}
		}
	})
}

func provideStatusPoller(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, c *runtime.Client, clk clock.Clock, align ticks.Align) RuntimeFuncs {
	p := runtime.NewStatusPoller(c, runtime.StatusPollerOptions{Clock: clk, Align: align})
	runner.Hook(lc, sd, logger, "runtimestatus", p.Run)
	return RuntimeFuncs{Poller: p, Version: p.Version, Health: p.Health, Images: p.Images, Handlers: p.Handlers, Features: p.Features}
}

// cgroups is the cgroup hierarchy of a node with cgroupsPerQOS, nil
// without.
type cgroups struct {
	fx.Out

	Manager *cgroupdriver.Manager
	Pods    runtime.PodCgroups
	Driver  cgroupdriver.Driver
}

type cgroupParams struct {
	fx.In

	Config    *Config
	Machine   machine.Func
	Client    *runtime.Client
	Store     *pods.Store
	Clock     clock.Clock
	Metrics   prometheus.Registerer
	Logger    logr.Logger
	Lifecycle fx.Lifecycle
	Shut      fx.Shutdowner
}

// provideCgroups builds the QoS and pod cgroup hierarchy when cgroupsPerQOS
// is true (the default); without it no cgroup manager exists, nothing reads
// the cgroup filesystem and the runtime's cgroup driver is not checked, as
// the kubelet. The driver is built either way (without I/O): it tells the
// cgroup version when the first container is configured.
func provideCgroups(p cgroupParams) (cgroups, error) {
	limits, err := kubepodsResources(p.Config, p.Machine, p.Logger)
	if err != nil {
		return cgroups{}, err
	}
	opts := p.Config.CgroupOptions(limits, p.Store.Active,
		func(ctx context.Context) (runtimeapi.CgroupDriver, bool, error) { return p.Client.CgroupDriver(ctx) })
	opts.Clock = p.Clock
	driver, err := cgroupdriver.NewDriver(opts)
	if err != nil {
		return cgroups{}, err
	}
	if !p.Config.CgroupsPerQOS() {
		return cgroups{Driver: driver}, nil
	}
	opts.Driver = driver
	// kubelet_cgroup_manager_duration_seconds and _errors_total.
	opts.Registerer = p.Metrics
	m, err := cgroupdriver.New(opts)
	if err != nil {
		return cgroups{}, err
	}
	runner.Hook(p.Lifecycle, p.Shut, p.Logger, "cgroupdriver", m.Run)
	return cgroups{Manager: m, Pods: m, Driver: driver}, nil
}

// apiClients is the agent's API clients when it has an API server; a
// standalone agent has none.
type apiClients struct {
	fx.In

	Clients *Clients `optional:"true"`
}

// kubepodsResources returns what the kubepods cgroup enforces
// (cgroupdriver.KubepodsLimits) from the configuration's kubeReserved,
// systemReserved and enforceNodeAllocatable and the host's CPUs and memory
// (host). It is known from the start, before the node's object. When the
// machine cannot be read it returns nil (kubepods left as it is) and logs
// why.
func kubepodsResources(cfg *Config, host machine.Func, logger logr.Logger) (func() v1.ResourceList, error) {
	kc := &cfg.Kubelet
	kubeReserved, err := parseResourceList(kc.KubeReserved)
	if err != nil {
		return nil, fmt.Errorf("kubeReserved: %w", err)
	}
	systemReserved, err := parseResourceList(kc.SystemReserved)
	if err != nil {
		return nil, fmt.Errorf("systemReserved: %w", err)
	}
	enforce := slices.Contains(kc.EnforceNodeAllocatable, eviction.NodeAllocatableEnforcementKey)
	return func() v1.ResourceList {
		m, err := host()
		if err != nil {
			logger.Error(err, "Cannot read the machine's capacity for the kubepods cgroup")
			return nil
		}
		capacity := v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(int64(m.NumCores)*1000, resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(m.MemoryCapacity, resource.BinarySI),
		}
		return cgroupdriver.KubepodsLimits(capacity, enforce, kubeReserved, systemReserved)
	}, nil
}

type podManagerParams struct {
	fx.In

	Dirs     dataDirs
	Config   *Config
	Cgroups  *cgroupdriver.Manager `optional:"true"`
	Driver   cgroupdriver.Driver
	Node     *status.NodeWatch
	Services ServiceLister `optional:"true"`
	Volumes  *volume.Manager
	Devices  *devices.Manager       `optional:"true"`
	CPUs     *cpumanager.Manager    `optional:"true"`
	Memory   *memorymanager.Manager `optional:"true"`
	Mounts   *runtime.ImageMounts
	Pulls    *imagepull.Manager `optional:"true"`
}

// podManagerOptions configures the CRI pod manager from the configuration
// and the graph: cgroup parents from the hierarchy, services, config maps
// and secrets for the containers' environment (from the volume manager's
// watches: no GET per sync; on a standalone node, without an API client,
// a container that refers to a config map or secret waits with
// CreateContainerConfigError, and gets no service variables), the node's
// allocatable for the downward API.
func podManagerOptions(p podManagerParams) (runtime.PodManagerOptions, error) {
	var parent func(context.Context, *v1.Pod) (string, error)
	if p.Cgroups != nil {
		parent = p.Cgroups.EnsurePod
	}
	o, err := p.Config.PodManagerOptions(parent, p.Driver.Version)
	if err != nil {
		return o, err
	}
	if p.Cgroups != nil {
		o.UpdatePodCgroup = p.Cgroups.UpdatePod
	}
	o.Allocatable = p.Node.Allocatable
	o.ImageMounts = p.Mounts
	if p.Pulls != nil {
		o.ImagePulls = p.Pulls
	}
	o.ConfigMaps = p.Volumes.ConfigMap
	o.Secrets = p.Volumes.Secret
	if p.Services != nil {
		o.Services = p.Services
	}
	var hooks []containerConfigHook
	if p.Devices != nil {
		hooks = append(hooks, p.Devices.ApplyContainerConfig)
	}
	if p.CPUs != nil {
		hooks = append(hooks, p.CPUs.ApplyContainerConfig)
	}
	if p.Memory != nil {
		hooks = append(hooks, p.Memory.ApplyContainerConfig)
	}
	o.ContainerConfigHook = chainConfigHooks(hooks...)
	return o, nil
}

// plegParams are the *Config and the PLEG, for the options of the loops
// that ask the PLEG before they list the runtime (statsOptions,
// logRotatorOptions). The PLEG is optional: an embedder's graph may have
// none.
type plegParams struct {
	fx.In

	Config *Config
	PLEG   *runtime.PLEG `optional:"true"`
}

// statsOptions are Config.StatsOptions with HasPods answered by the PLEG
// (runtime.PLEG.HasPods; nil without a PLEG): on a node the runtime holds
// no pod of, the eviction manager's stats round makes no listing call
// every 10 s.
func statsOptions(p plegParams) stats.Options {
	o := p.Config.StatsOptions()
	if p.PLEG != nil {
		o.HasPods = p.PLEG.HasPods
	}
	return o
}

// plegHealthCheck gates Ready on the PLEG, as the kubelet's "PLEG is not
// healthy" message.
func plegHealthCheck(p *runtime.PLEG) status.HealthCheck {
	return status.HealthCheck{Name: "PLEG", Healthy: p.Healthy}
}
