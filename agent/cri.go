package agent

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/status"
)

// CRI runs the node's pods on a CRI runtime (containerd, CRI-O, or
// runtime/fakecri) from the *Config in the graph: the CRI connection
// (runtime.Module), a background poller of the runtime's status, version
// and images for the node status setters, the cgroup hierarchy
// (cgroupdriver.Module, left out with cgroupsPerQOS false), the pod manager,
// PLEG and the CRI backend that provides pods.Runtime (runtime.PodsModule),
// the PLEG's health check gating Ready, and the stats provider (node, pod
// and container usage from the kernel and the CRI) the node API and the
// eviction manager read. The CRI services come from the
// graph: fx.Decorate cri.RuntimeService or cri.ImageManagerService to wrap
// them for pod syncing.
var CRI = fx.Module("cri",
	fx.Provide(
		func(cfg *Config) runtime.Options { return cfg.RuntimeOptions() },
		provideStatusPoller,
		provideCgroups,
		podManagerOptions,
		newServiceLister,
		pullSecrets,
		fx.Annotate(plegHealthCheck, fx.ResultTags(`group:"`+status.HealthCheckGroup+`"`)),
		func(cfg *Config) stats.Options { return cfg.StatsOptions() },
	),
	runtime.Module,
	runtime.PodsModule,
	stats.Module,
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

func provideStatusPoller(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, c *runtime.Client, clk clock.Clock) RuntimeFuncs {
	p := runtime.NewStatusPoller(c, runtime.StatusPollerOptions{Clock: clk})
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
	Client    *runtime.Client
	Store     *pods.Store
	Node      *status.NodeWatch
	Clock     clock.Clock
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
	opts := p.Config.CgroupOptions(p.Node.Allocatable, p.Store.Active,
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

// pullSecrets reads image pull secrets from the API server; without one
// (standalone) a pod that names one cannot pull with it.
func pullSecrets(a apiClients) runtime.SecretGetter {
	if a.Clients == nil {
		return func(_ context.Context, ns, name string) (*v1.Secret, error) {
			return nil, fmt.Errorf("secret %s/%s: no API server (standalone node)", ns, name)
		}
	}
	core := a.Clients.Client.CoreV1()
	return func(ctx context.Context, ns, name string) (*v1.Secret, error) {
		return core.Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	}
}

type podManagerParams struct {
	fx.In

	Dirs     dataDirs
	Config   *Config
	Clients  *Clients              `optional:"true"`
	Cgroups  *cgroupdriver.Manager `optional:"true"`
	Driver   cgroupdriver.Driver
	Node     *status.NodeWatch
	Services *serviceLister `optional:"true"`
}

// podManagerOptions configures the CRI pod manager from the configuration
// and the graph: cgroup parents from the hierarchy, services, config maps
// and secrets for the containers' environment (none on a standalone node:
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
	o.Allocatable = p.Node.Allocatable
	if p.Clients == nil {
		return o, nil
	}
	core := p.Clients.Client.CoreV1()
	if p.Services != nil {
		o.Services = p.Services.List
	}
	o.ConfigMaps = func(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
		return core.ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	}
	o.Secrets = func(ctx context.Context, ns, name string) (*v1.Secret, error) {
		return core.Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	}
	return o, nil
}

// plegHealthCheck gates Ready on the PLEG, as the kubelet's "PLEG is not
// healthy" message.
func plegHealthCheck(p *runtime.PLEG) status.HealthCheck {
	return status.HealthCheck{Name: "PLEG", Healthy: p.Healthy}
}
