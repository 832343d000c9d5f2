package agent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/apiserver"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/status/podstatus"
)

// podModule runs pods: the API server pod source, the pod status manager,
// the cgroup hierarchy, the runtime's pod manager and PLEG, and the
// PodController that drives them. Admission runs the general predicates
// first, then the AdmitHandlerGroup's handlers (in no particular order).
var podModule = fx.Options(
	fx.Provide(
		apiserverSourceOptions,
		func(c *podsource.Config) podstatus.PodGetter { return c },
		cgroupOptions,
		podManagerOptions,
		providePodController,
		func() *lateBound { return &lateBound{} },
		newServiceLister,
		fx.Annotate(plegHealthCheck, fx.ResultTags(`group:"`+status.HealthCheckGroup+`"`)),
	),
	apiserver.Module,
	podsource.Module,
	podstatus.Module,
	cgroupdriver.Module,
	runtime.PodsModule,
	fx.Invoke(func(*PodController) {}),
	fx.Invoke(func(l *lateBound, r *status.Reporter) { l.reporter.Store(r) }),
)

// lateBound breaks the graph's cycles: the cgroup manager needs the
// PodController's active pods and the node's allocatable from the status
// Reporter, while both depend on it through the runtime's pod manager (the
// Reporter through the PLEG's health check). Each pointer is set as soon as
// its owner is built, before anything starts.
type lateBound struct {
	controller atomic.Pointer[PodController]
	reporter   atomic.Pointer[status.Reporter]
}

func (l *lateBound) activePods() []*v1.Pod {
	if c := l.controller.Load(); c != nil {
		return c.ActivePods()
	}
	return nil
}

func (l *lateBound) allocatable() v1.ResourceList {
	if r := l.reporter.Load(); r != nil {
		if n, ok := r.Node(); ok {
			return n.Status.Allocatable
		}
	}
	return nil
}

func apiserverSourceOptions(cfg *Config, r *status.Reporter) apiserver.Options {
	return apiserver.Options{NodeName: cfg.NodeName, NodeHasSynced: r.HasSynced}
}

func cgroupOptions(cfg *Config, c *runtime.Client, late *lateBound) cgroupdriver.Options {
	kc := &cfg.Kubelet
	return cgroupdriver.Options{
		CgroupDriver:        kc.CgroupDriver,
		CgroupsPerQOS:       kc.CgroupsPerQOS,
		CgroupRoot:          kc.CgroupRoot,
		CPUCFSQuota:         kc.CPUCFSQuota,
		CPUCFSQuotaPeriod:   kc.CPUCFSQuotaPeriod.Duration,
		PodPidsLimit:        *kc.PodPidsLimit,
		NodeAllocatable:     late.allocatable,
		ActivePods:          late.activePods,
		RuntimeCgroupDriver: c.CgroupDriver,
	}
}

type podManagerParams struct {
	fx.In

	Dirs     dataDirs
	Config   *Config
	Clients  *Clients
	Cgroups  *cgroupdriver.Manager
	Late     *lateBound
	Services *serviceLister
}

// maxParallelImagePulls maps the kubelet's serializeImagePulls and
// maxParallelImagePulls to the pod manager's bound: 1 when serialized, the
// configured bound, or -1 (no bound) when neither says otherwise.
func maxParallelImagePulls(serialize *bool, max *int32) int {
	switch {
	case serialize != nil && *serialize:
		return 1
	case max != nil:
		return int(*max)
	default:
		return -1
	}
}

// podManagerOptions configures the runtime's pod manager from the
// KubeletConfiguration; runtime.PodsModule fills in the CRI services,
// recorder, clock and registerer.
func podManagerOptions(p podManagerParams) (runtime.PodManagerOptions, error) {
	kc := &p.Config.Kubelet
	var dns []net.IP
	for _, s := range kc.ClusterDNS {
		ip := net.ParseIP(s)
		if ip == nil {
			return runtime.PodManagerOptions{}, fmt.Errorf("clusterDNS: %q is not an IP address", s)
		}
		dns = append(dns, ip)
	}
	core := p.Clients.Client.CoreV1()
	version, err := p.Cgroups.Driver().Version()
	if err != nil {
		return runtime.PodManagerOptions{}, fmt.Errorf("cgroup version: %w", err)
	}
	cgroupV2 := version == 2
	return runtime.PodManagerOptions{
		NodeName:              p.Config.NodeName,
		NodeIPs:               p.Config.NodeIPs,
		PodLogsDir:            kc.PodLogsDir,
		PodsDir:               filepath.Join(p.Config.RootDir, "pods"),
		ClusterDNS:            dns,
		ClusterDomain:         kc.ClusterDomain,
		ResolverConfig:        *kc.ResolverConfig,
		CgroupParent:          p.Cgroups.EnsurePod,
		QOSClass:              cgroupdriver.PodQOS,
		CPUCFSQuota:           kc.CPUCFSQuota,
		CPUCFSQuotaPeriod:     kc.CPUCFSQuotaPeriod.Duration,
		MaxParallelImagePulls: maxParallelImagePulls(kc.SerializeImagePulls, kc.MaxParallelImagePulls),
		CgroupV2:              cgroupV2,
		Services:              p.Services.List,
		RegistryPullQPS:       float32(*kc.RegistryPullQPS),
		RegistryBurst:         int(kc.RegistryBurst),
		ConfigMaps: func(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
			return core.ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		},
		Secrets: func(ctx context.Context, ns, name string) (*v1.Secret, error) {
			return core.Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		},
		Allocatable: p.Late.allocatable,
	}, nil
}

// plegHealthCheck gates Ready on the PLEG, as the kubelet's "PLEG is not
// healthy" message.
func plegHealthCheck(p *runtime.PLEG) status.HealthCheck {
	return status.HealthCheck{Name: "PLEG", Healthy: p.Healthy}
}

// nodeIPs returns the node's IPs as its status reports them (the first
// InternalIP of each family), or the configured --node-ip before the node is
// known.
func nodeIPs(cfg *Config, r *status.Reporter) func() []net.IP {
	return func() []net.IP {
		n, ok := r.Node()
		if !ok {
			return cfg.NodeIPs
		}
		var v4, v6 net.IP
		for _, a := range n.Status.Addresses {
			ip := net.ParseIP(a.Address)
			if a.Type != v1.NodeInternalIP || ip == nil {
				continue
			}
			if ip.To4() != nil && v4 == nil {
				v4 = ip
			} else if ip.To4() == nil && v6 == nil {
				v6 = ip
			}
		}
		var out []net.IP
		for _, ip := range []net.IP{v4, v6} {
			if ip != nil {
				out = append(out, ip)
			}
		}
		if len(out) == 0 {
			return cfg.NodeIPs
		}
		return out
	}
}

type podControllerParams struct {
	fx.In

	Config     *Config
	Sources    *podsource.Config
	Pods       *runtime.PodManager
	PLEG       *runtime.PLEG
	Statuses   podstatus.Interface
	Cgroups    *cgroupdriver.Manager
	Reporter   *status.Reporter
	Clients    *Clients
	Admit      []AdmitHandler `group:"pod_admit_handlers"`
	Late       *lateBound
	Recorder   record.EventRecorder
	Clock      clock.Clock
	Logger     logr.Logger
	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
}

func providePodController(p podControllerParams) (*PodController, error) {
	core := p.Clients.Client.CoreV1()
	c, err := NewPodController(PodControllerOptions{
		Sources:  p.Sources,
		Runtime:  p.Pods,
		Events:   p.PLEG.Events(),
		Statuses: p.Statuses,
		Cgroups:  p.Cgroups,
		Node:     p.Reporter.Node,
		Admit:    append([]AdmitHandler{GeneralPredicates(p.Logger)}, p.Admit...),
		PullSecrets: func(ctx context.Context, ns, name string) (*v1.Secret, error) {
			return core.Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		},
		HostIPs:       nodeIPs(p.Config, p.Reporter),
		QOSClass:      cgroupdriver.PodQOS,
		SyncFrequency: p.Config.Kubelet.SyncFrequency.Duration,
		Recorder:      p.Recorder,
		Clock:         p.Clock,
	})
	if err != nil {
		return nil, err
	}
	p.Late.controller.Store(c)
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "pods", c.Run)
	return c, nil
}
