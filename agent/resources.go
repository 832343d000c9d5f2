package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/devices"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/resources/cpumanager"
	"github.com/nodekit/nodekit/resources/memorymanager"
	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// Name and order of the topology manager's admit handler: after the
// eviction manager's and before the general predicates, as the kubelet's
// resource allocation handler.
const (
	AdmitTopologyManager = "TopologyManager"
	OrderTopologyManager = 170
)

// ResourceManagers are the kubelet's CPU, memory and topology managers
// (cpumanager, memorymanager, topologymanager) on the machine's topology
// (read from /sys when a policy needs it): the TopologyManager admit
// handler aligns and allocates each pod's exclusive CPUs and NUMA memory,
// rejecting it with the kubelet's reasons (TopologyAffinityError,
// SMTAlignmentError, UnexpectedAdmissionError); the cpusets and
// cpuset.mems go into the containers' CRI configs
// (PodManagerOptions.ContainerConfigHook) and the CPU manager's reconcile
// loop keeps every other container on the shared pool. CRI includes it.
var ResourceManagers = fx.Options(
	fx.Provide(provideMachineTopology, provideTopologyManager, provideCPUManager, provideMemoryManager),
	pods.AsAdmitHandler(AdmitTopologyManager, OrderTopologyManager, topologyAdmitHandler),
)

// provideMachineTopology discovers the machine when a policy needs it; with
// every policy none nothing reads it, and an agent among thousands in a
// process does not read sysfs.
func provideMachineTopology(cfg *Config) (*topology.Machine, error) {
	kc := &cfg.Kubelet
	if kc.CPUManagerPolicy == cpumanager.PolicyNone && kc.TopologyManagerPolicy == topologymanager.PolicyNone && kc.MemoryManagerPolicy == memorymanager.PolicyNone {
		return &topology.Machine{CPU: topology.NewCPUTopology(topology.CPUDetails{})}, nil
	}
	return topology.Discover("/sys", "/proc")
}

type resourceManagerParams struct {
	fx.In

	Config     *Config
	Machine    *topology.Machine
	Store      *pods.Store
	Registerer prometheus.Registerer `optional:"true"`
	Logger     logr.Logger           `optional:"true"`
}

func provideTopologyManager(p resourceManagerParams) (*topologymanager.Manager, error) {
	kc := &p.Config.Kubelet
	return topologymanager.New(topologymanager.Options{
		Policy:        kc.TopologyManagerPolicy,
		Scope:         kc.TopologyManagerScope,
		PolicyOptions: kc.TopologyManagerPolicyOptions,
		Machine:       p.Machine,
		ActivePods:    p.Store.Active,
		Registerer:    p.Registerer,
		Logger:        p.Logger,
	})
}

type cpuManagerParams struct {
	fx.In

	Config     *Config
	Machine    *topology.Machine
	Store      *pods.Store
	Registerer prometheus.Registerer `optional:"true"`
	Topology   *topologymanager.Manager
	Runtime    cri.RuntimeService
	runner.Deps
}

func provideCPUManager(p cpuManagerParams) (*cpumanager.Manager, error) {
	kc := &p.Config.Kubelet
	reserved, err := p.Config.reservedCPU()
	if err != nil {
		return nil, err
	}
	reservedCPUs, err := cpuset.Parse(kc.ReservedSystemCPUs)
	if err != nil {
		return nil, fmt.Errorf("unable to parse reserved-cpus list: %w", err)
	}
	m, err := cpumanager.New(cpumanager.Options{
		Policy:          kc.CPUManagerPolicy,
		PolicyOptions:   kc.CPUManagerPolicyOptions,
		ReconcilePeriod: kc.CPUManagerReconcilePeriod.Duration,
		ReservedCPUs:    reservedCPUs,
		Reserved:        reserved,
		Machine:         p.Machine,
		StateDir:        p.Config.RootDir,
		Affinity:        p.Topology.GetAffinity,
		ActivePods:      p.Store.Active,
		SourcesReady:    p.Store.SourcesReady,
		Runtime:         p.Runtime,
		Registerer:      p.Registerer,
		Logger:          p.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to initialize cpu manager: %w", err)
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "cpumanager", m.Run)
	return m, nil
}

type memoryManagerParams struct {
	fx.In

	Config     *Config
	Machine    *topology.Machine
	Store      *pods.Store
	Registerer prometheus.Registerer `optional:"true"`
	Topology   *topologymanager.Manager
	runner.Deps
}

func provideMemoryManager(p memoryManagerParams) (*memorymanager.Manager, error) {
	kc := &p.Config.Kubelet
	reservation, err := p.Config.memoryReservation(p.Machine)
	if err != nil {
		return nil, err
	}
	m, err := memorymanager.New(memorymanager.Options{
		Policy:                     kc.MemoryManagerPolicy,
		ReservedMemory:             kc.ReservedMemory,
		NodeAllocatableReservation: reservation,
		Machine:                    p.Machine,
		StateDir:                   p.Config.RootDir,
		Affinity:                   p.Topology.GetAffinity,
		ActivePods:                 p.Store.Active,
		SourcesReady:               p.Store.SourcesReady,
		Registerer:                 p.Registerer,
		Logger:                     p.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to initialize memory manager: %w", err)
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "memorymanager", m.Run)
	return m, nil
}

// memoryReservation is the memory and huge pages node allocatable keeps
// back: kubeReserved, systemReserved and the hard eviction threshold of
// memory.available (a quantity, or a percentage of the machine's memory),
// as the kubelet's GetNodeAllocatableReservation.
func (c *Config) memoryReservation(machine *topology.Machine) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for name, m := range map[string]map[string]string{"kubeReserved": c.Kubelet.KubeReserved, "systemReserved": c.Kubelet.SystemReserved} {
		for k, v := range m {
			if k != string(v1.ResourceMemory) && !strings.HasPrefix(k, v1.ResourceHugePagesPrefix) {
				continue
			}
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s=%q: %w", name, k, v, err)
			}
			t := out[v1.ResourceName(k)]
			t.Add(q)
			out[v1.ResourceName(k)] = t
		}
	}
	if v, ok := c.Kubelet.EvictionHard["memory.available"]; ok {
		var q resource.Quantity
		if pct, isPct := strings.CutSuffix(v, "%"); isPct {
			f, err := strconv.ParseFloat(pct, 64)
			if err != nil {
				return nil, fmt.Errorf("evictionHard: memory.available=%q: %w", v, err)
			}
			var capacity uint64
			for _, n := range machine.NUMANodes {
				capacity += n.MemoryBytes
			}
			q = *resource.NewQuantity(int64(float64(capacity)*f/100), resource.BinarySI)
		} else {
			var err error
			if q, err = resource.ParseQuantity(v); err != nil {
				return nil, fmt.Errorf("evictionHard: memory.available=%q: %w", v, err)
			}
		}
		t := out[v1.ResourceMemory]
		t.Add(q)
		out[v1.ResourceMemory] = t
	}
	return out, nil
}

type topologyAdmitParams struct {
	fx.In

	Topology *topologymanager.Manager
	Devices  *devices.Manager `optional:"true"`
	CPUs     *cpumanager.Manager
	Memory   *memorymanager.Manager
	Logger   logr.Logger `optional:"true"`
}

// topologyAdmitHandler admits a pod through the topology manager, which
// has the device, CPU and memory managers allocate: its hint providers,
// added here in the kubelet's order.
func topologyAdmitHandler(p topologyAdmitParams) pods.AdmitHandler {
	tm := p.Topology
	if p.Devices != nil {
		ctx := context.Background()
		if p.Logger.GetSink() != nil {
			ctx = logr.NewContext(ctx, p.Logger)
		}
		tm.AddHintProvider(p.Devices.HintProvider(ctx))
	}
	tm.AddHintProvider(p.CPUs)
	tm.AddHintProvider(p.Memory)
	return pods.AdmitFunc(func(a pods.AdmitAttributes) pods.AdmitResult {
		err := tm.Admit(a.Pod)
		if err == nil {
			return pods.AdmitResult{Admit: true}
		}
		reason := topologymanager.ReasonUnexpected
		var r interface{ Reason() string }
		if errors.As(err, &r) {
			reason = r.Reason()
		}
		return pods.AdmitResult{Reason: reason, Message: err.Error()}
	})
}

// containerConfigHook is runtime.PodManagerOptions' ContainerConfigHook.
type containerConfigHook = func(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error

// chainConfigHooks runs the non-nil hooks in order (nil when none is).
func chainConfigHooks(hooks ...containerConfigHook) containerConfigHook {
	var set []containerConfigHook
	for _, h := range hooks {
		if h != nil {
			set = append(set, h)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return func(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
		for _, h := range set {
			if err := h(ctx, pod, c, cfg); err != nil {
				return err
			}
		}
		return nil
	}
}

// reservedCPU is kubeReserved's plus systemReserved's cpu.
func (c *Config) reservedCPU() (resource.Quantity, error) {
	var total resource.Quantity
	for name, m := range map[string]map[string]string{"kubeReserved": c.Kubelet.KubeReserved, "systemReserved": c.Kubelet.SystemReserved} {
		v, ok := m[string(v1.ResourceCPU)]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return total, fmt.Errorf("%s: cpu=%q: %w", name, v, err)
		}
		total.Add(q)
	}
	return total, nil
}

// applyReservedSystemCPUs makes reservedSystemCPUs the node's CPU
// reservation, as the kubelet does at startup: kubeReserved's cpu is
// dropped and systemReserved's is the number of reserved CPUs (node
// allocatable and the CPU manager follow).
func (c *Config) applyReservedSystemCPUs() {
	kc := &c.Kubelet
	set, err := cpuset.Parse(kc.ReservedSystemCPUs)
	if err != nil || set.Size() == 0 {
		return
	}
	if kc.KubeReserved != nil {
		delete(kc.KubeReserved, string(v1.ResourceCPU))
	}
	if kc.SystemReserved == nil {
		kc.SystemReserved = map[string]string{}
	}
	kc.SystemReserved[string(v1.ResourceCPU)] = strconv.Itoa(set.Size())
}

// validateResourceManagers checks the CPU, memory and topology manager
// settings with the kubelet's configuration validation messages (the
// policies themselves are checked when the managers are built, as the
// kubelet's container manager does).
func (c *Config) validateResourceManagers() []error {
	kc := &c.Kubelet
	var errs []error
	switch kc.TopologyManagerPolicy {
	case kubeletconfig.NoneTopologyManagerPolicy, kubeletconfig.BestEffortTopologyManagerPolicy,
		kubeletconfig.RestrictedTopologyManagerPolicy, kubeletconfig.SingleNumaNodeTopologyManagerPolicy:
	default:
		errs = append(errs, fmt.Errorf("invalid configuration: topologyManagerPolicy (--topology-manager-policy) %q must be one of: %q", kc.TopologyManagerPolicy,
			[]string{kubeletconfig.NoneTopologyManagerPolicy, kubeletconfig.BestEffortTopologyManagerPolicy, kubeletconfig.RestrictedTopologyManagerPolicy, kubeletconfig.SingleNumaNodeTopologyManagerPolicy}))
	}
	switch kc.TopologyManagerScope {
	case kubeletconfig.ContainerTopologyManagerScope, kubeletconfig.PodTopologyManagerScope:
	default:
		errs = append(errs, fmt.Errorf("invalid configuration: topologyManagerScope (--topology-manager-scope) %q must be one of: %q, or %q", kc.TopologyManagerScope,
			kubeletconfig.ContainerTopologyManagerScope, kubeletconfig.PodTopologyManagerScope))
	}
	errs = append(errs, validateReservedMemory(kc.ReservedMemory)...)
	if kc.ReservedSystemCPUs != "" {
		if kc.SystemReservedCgroup != "" || kc.KubeReservedCgroup != "" {
			errs = append(errs, errors.New("invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)"))
		}
		if _, err := cpuset.Parse(kc.ReservedSystemCPUs); err != nil {
			errs = append(errs, fmt.Errorf("invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) %v, error: %w", kc.ReservedSystemCPUs, err))
		}
	}
	return errs
}

// validateReservedMemory checks reservedMemory with the kubelet's
// configuration validation messages.
func validateReservedMemory(reservations []kubeletconfig.MemoryReservation) []error {
	var errs []error
	seen := map[int32]map[v1.ResourceName]bool{}
	for _, r := range reservations {
		if seen[r.NumaNode] == nil {
			seen[r.NumaNode] = map[v1.ResourceName]bool{}
		}
		for name, q := range r.Limits {
			if name != v1.ResourceMemory && !strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
				errs = append(errs, fmt.Errorf("invalid configuration: the limit type %q for NUMA node %d is not supported, only %v is accepted", name, r.NumaNode, []v1.ResourceName{v1.ResourceMemory, v1.ResourceHugePagesPrefix + "<HugePageSize>"}))
			}
			if q.IsZero() {
				errs = append(errs, fmt.Errorf("invalid configuration: reserved memory may not be zero for NUMA node %d and resource %q", r.NumaNode, name))
			}
			if seen[r.NumaNode][name] {
				errs = append(errs, fmt.Errorf("invalid configuration: the reserved memory has a duplicate value for NUMA node %d and resource %q", r.NumaNode, name))
			}
			seen[r.NumaNode][name] = true
		}
	}
	return errs
}
