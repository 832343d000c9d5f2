package cpumanager

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubetypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/internal/atomicfile"
	"github.com/nodekit/nodekit/resources/cpumanager/internal/state"
	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// StateFile is the CPU manager's checkpoint in the root directory, the
// kubelet's.
const StateFile = "cpu_manager_state"

// DefaultReconcilePeriod is the kubelet's cpuManagerReconcilePeriod.
const DefaultReconcilePeriod = 10 * time.Second

// Runtime is what the reconcile loop needs of the CRI: the running
// containers (with the kubelet's pod UID and container name labels) and
// their cpusets. cri-api's RuntimeService satisfies it.
type Runtime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error
}

// Options configures a Manager.
type Options struct {
	// Policy is cpuManagerPolicy: none (default) or static.
	Policy string
	// PolicyOptions are cpuManagerPolicyOptions; only the GA ones
	// (OptionFullPCPUsOnly, OptionStrictCPUReservation,
	// OptionPreferAlignByUncoreCache) are accepted.
	PolicyOptions map[string]string
	// ReconcilePeriod is cpuManagerReconcilePeriod (default
	// DefaultReconcilePeriod).
	ReconcilePeriod time.Duration
	// ReservedCPUs is reservedSystemCPUs: the CPUs kept for the system.
	// When empty, the static policy reserves ceil(Reserved) CPUs picked by
	// topology.
	ReservedCPUs cpuset.CPUSet
	// Reserved is the CPU of kubeReserved plus systemReserved (with
	// reservedSystemCPUs, the kubelet sets systemReserved's cpu to their
	// number). The static policy requires it to be above zero.
	Reserved resource.Quantity
	// Machine is the machine's topology. Required.
	Machine *topology.Machine
	// StateDir holds StateFile (the kubelet's root directory); empty keeps
	// the state in memory only.
	StateDir string
	// Affinity returns the NUMA affinity the topology manager chose for a
	// container (topologymanager.Manager.GetAffinity); nil is no
	// preference.
	Affinity func(podUID, containerName string) topologymanager.TopologyHint
	// ActivePods returns the admitted pods that have not terminated; the
	// CPUs of containers of other pods are released (once SourcesReady).
	ActivePods func() []*v1.Pod
	// SourcesReady says whether every pod source has been seen, so a pod
	// missing from ActivePods is really gone (nil: always).
	SourcesReady func() bool
	// Runtime updates running containers' cpusets; nil leaves them as
	// created (no reconcile loop).
	Runtime Runtime
	// Clock paces the reconcile loop (default clock.RealClock{}).
	Clock clock.WithTicker
	// Registerer registers the kubelet's CPU manager metrics; nil
	// registers nothing.
	Registerer prometheus.Registerer
	// Logger logs allocations and the reconcile loop (default: discard).
	Logger logr.Logger
}

// memState is the policy's state: the shared pool and the exclusive CPUs.
type memState struct {
	defaultSet  cpuset.CPUSet
	assignments map[string]map[string]cpuset.CPUSet
}

func (s *memState) set(pod, container string, set cpuset.CPUSet) {
	if s.assignments[pod] == nil {
		s.assignments[pod] = map[string]cpuset.CPUSet{}
	}
	s.assignments[pod][container] = set
}

func (s *memState) delete(pod, container string) {
	delete(s.assignments[pod], container)
	if len(s.assignments[pod]) == 0 {
		delete(s.assignments, pod)
	}
}

func (s *memState) getOrDefault(pod, container string) cpuset.CPUSet {
	if set, ok := s.assignments[pod][container]; ok {
		return set
	}
	return s.defaultSet
}

// Manager is the kubelet's CPU manager. With the static policy, containers
// of Guaranteed pods with integer CPU requests are given CPUs of their own
// at admission (Allocate, through the topology manager, as a
// topologymanager.HintProvider), created on them (ApplyContainerConfig
// sets the CRI cpuset), and every other container is kept on the shared
// pool by the reconcile loop (Run), which also gives a pod's CPUs back
// when it is gone. The assignments live in StateFile in the kubelet's
// format, so they survive restarts and a kubelet→nodekit handover. With
// the none policy it does nothing but write that file. Its methods are
// safe for concurrent use.
type Manager struct {
	opts    Options
	policy  *static
	logger  logr.Logger
	path    string
	metrics *metrics
	kick    chan struct{}

	mu      sync.Mutex
	loaded  bool
	loadErr error
	state   memState
	// applied is the cpuset last given to each running container, by ID.
	applied map[string]cpuset.CPUSet
	// admitting is the pod being admitted, and since when: the pods loop
	// adds it to the active pods only once every admit handler agreed, so
	// until then (or until another pod is admitted, or a reconcile period
	// passed: a later handler rejected it) its CPUs are not stale.
	admitting     string
	admittingFrom time.Time
}

// New checks the policy and its options with the kubelet's messages and
// returns a Manager; it does no I/O (the state file is read on first use
// or by Run).
func New(opts Options) (*Manager, error) {
	if opts.Policy == "" {
		opts.Policy = PolicyNone
	}
	if opts.ReconcilePeriod <= 0 {
		opts.ReconcilePeriod = DefaultReconcilePeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Machine == nil {
		return nil, errors.New("cpu manager: no machine topology")
	}
	if opts.Affinity == nil {
		opts.Affinity = func(string, string) topologymanager.TopologyHint { return topologymanager.TopologyHint{} }
	}
	m := &Manager{
		opts:    opts,
		logger:  opts.Logger,
		kick:    make(chan struct{}, 1),
		applied: map[string]cpuset.CPUSet{},
		state:   memState{defaultSet: cpuset.New(), assignments: map[string]map[string]cpuset.CPUSet{}},
	}
	if m.logger.GetSink() == nil {
		m.logger = logr.Discard()
	}
	if opts.StateDir != "" {
		m.path = filepath.Join(opts.StateDir, StateFile)
	}
	switch opts.Policy {
	case PolicyNone:
		if len(opts.PolicyOptions) > 0 {
			return nil, fmt.Errorf("new none policy error: None policy: received unsupported options=%v", opts.PolicyOptions)
		}
	case PolicyStatic:
		if opts.Reserved.IsZero() {
			return nil, errors.New("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")
		}
		sopts, err := parseOptions(opts.PolicyOptions)
		if err != nil {
			return nil, fmt.Errorf("new static policy error: %w", err)
		}
		if !opts.ReservedCPUs.IsSubsetOf(opts.Machine.CPU.CPUDetails.CPUs()) {
			return nil, fmt.Errorf("reserved-cpus: %s is not a subset of online-cpus: %s", opts.ReservedCPUs, opts.Machine.CPU.CPUDetails.CPUs())
		}
		n := int(math.Ceil(float64(opts.Reserved.MilliValue()) / 1000))
		p, err := newStatic(opts.Machine.CPU, n, opts.ReservedCPUs, sopts, opts.Affinity)
		if err != nil {
			return nil, fmt.Errorf("new static policy error: %w", err)
		}
		m.policy = p
	default:
		return nil, fmt.Errorf("unknown policy: %q", opts.Policy)
	}
	m.metrics = newMetrics(opts.Registerer)
	return m, nil
}

// Policy returns the policy's name.
func (m *Manager) Policy() string { return m.opts.Policy }

// ensureLoaded reads the state file once (under mu), or initializes and
// writes it; the kubelet refuses to start on a state it cannot use, and so
// does Run (every allocation fails meanwhile).
func (m *Manager) ensureLoaded() error {
	if m.loaded {
		return m.loadErr
	}
	m.loaded = true
	m.loadErr = m.load()
	if m.loadErr == nil {
		m.updateGauges()
	}
	return m.loadErr
}

func (m *Manager) load() error {
	if m.path != "" {
		blob, err := os.ReadFile(m.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return fmt.Errorf("could not restore state from checkpoint: %w", err)
		default:
			s, err := state.Unmarshal(blob)
			if err != nil {
				return fmt.Errorf("could not restore state from checkpoint: %v, please drain this node and delete the CPU manager checkpoint file %q before restarting Kubelet", err, m.path)
			}
			if s.PolicyName != m.opts.Policy {
				return fmt.Errorf("could not restore state from checkpoint: configured policy %q differs from state checkpoint policy %q, please drain this node and delete the CPU manager checkpoint file %q before restarting Kubelet", m.opts.Policy, s.PolicyName, m.path)
			}
			m.state = memState{defaultSet: s.DefaultSet, assignments: s.Assignments}
		}
	}
	if m.policy != nil {
		if err := m.policy.validate(&m.state); err != nil {
			return fmt.Errorf("invalid state, please drain node and remove policy state file %q: %w", m.path, err)
		}
		m.logger.Info("CPU manager static policy", "reserved", m.policy.reserved.String(), "defaultCPUSet", m.state.defaultSet.String())
	}
	return m.store()
}

// store writes the state file (atomically: a temporary file renamed).
func (m *Manager) store() error {
	if m.path == "" {
		return nil
	}
	blob, err := state.Marshal(state.State{PolicyName: m.opts.Policy, DefaultSet: m.state.defaultSet, Assignments: m.state.assignments})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.path), 0o750); err != nil {
		return fmt.Errorf("write CPU manager checkpoint: %w", err)
	}
	if err := atomicfile.Write(m.path, blob); err != nil {
		return fmt.Errorf("write CPU manager checkpoint: %w", err)
	}
	return nil
}

func (m *Manager) storeOrLog() {
	if err := m.store(); err != nil {
		m.logger.Error(err, "Failed to store CPU manager state to checkpoint")
	}
}

// removeStaleLocked releases the CPUs of containers whose pod is no
// longer active, once the pod sources are ready.
func (m *Manager) removeStaleLocked() {
	if m.policy == nil || m.opts.ActivePods == nil || (m.opts.SourcesReady != nil && !m.opts.SourcesReady()) {
		return
	}
	active := map[string]map[string]bool{}
	if m.admitting != "" && m.opts.Clock.Since(m.admittingFrom) < m.opts.ReconcilePeriod {
		active[m.admitting] = nil
	}
	for _, p := range m.opts.ActivePods() {
		cs := map[string]bool{}
		for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range list {
				cs[list[i].Name] = true
			}
		}
		active[string(p.UID)] = cs
	}
	changed := false
	for pod, cs := range m.state.assignments {
		for c := range cs {
			if cs, ok := active[pod]; ok && (cs == nil || cs[c]) {
				continue
			}
			m.logger.V(2).Info("CPU manager: releasing the CPUs of a container that is gone", "podUID", pod, "containerName", c, "cpus", cs[c].String())
			m.policy.release(&m.state, pod, c)
			changed = true
		}
	}
	if changed {
		m.storeOrLog()
		m.updateGauges()
		m.poke()
	}
}

// admit notes that pod is being admitted (under mu).
func (m *Manager) admit(pod *v1.Pod) {
	if m.admitting != string(pod.UID) {
		m.admitting = string(pod.UID)
		m.admittingFrom = m.opts.Clock.Now()
	}
}

// poke runs the reconcile loop soon.
func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// GetTopologyHints is the static policy's NUMA hints for c's exclusive
// CPUs (topologymanager.HintProvider); nil when c gets none.
func (m *Manager) GetTopologyHints(pod *v1.Pod, c *v1.Container) map[string][]topologymanager.TopologyHint {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.policy == nil || m.ensureLoaded() != nil {
		return nil
	}
	m.admit(pod)
	m.removeStaleLocked()
	return m.policy.containerHints(&m.state, pod, c)
}

// GetPodTopologyHints is GetTopologyHints for the pod scope.
func (m *Manager) GetPodTopologyHints(pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.policy == nil || m.ensureLoaded() != nil {
		return nil
	}
	m.admit(pod)
	m.removeStaleLocked()
	return m.policy.podHints(&m.state, pod)
}

// Allocate gives c its exclusive CPUs (static policy), aligned with the
// affinity the topology manager chose; a container that already has CPUs
// (a pod admitted again after a restart) keeps them. A request that
// full-pcpus-only cannot meet fails with SMTAlignmentError.
func (m *Manager) Allocate(pod *v1.Pod, c *v1.Container) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ensureLoaded(); err != nil {
		return err
	}
	if m.policy == nil {
		return nil
	}
	m.admit(pod)
	m.removeStaleLocked()
	n, err := m.policy.allocate(&m.state, pod, c)
	if n > 0 {
		m.metrics.pinningRequests.Inc()
	}
	if err != nil {
		m.metrics.pinningErrors.Inc()
		m.logger.Error(err, "CPU manager: cannot allocate exclusive CPUs", "pod", klog.KObj(pod), "containerName", c.Name, "numCPUs", n)
		return err
	}
	if n > 0 {
		set := m.state.assignments[string(pod.UID)][c.Name]
		m.logger.Info("CPU manager: allocated exclusive CPUs", "pod", klog.KObj(pod), "containerName", c.Name, "cpus", set.String())
		m.storeOrLog()
		m.updateGauges()
		m.poke()
	}
	return nil
}

// CPUAffinity returns the CPUs c runs on: its exclusive CPUs, or the
// shared pool (empty with the none policy).
func (m *Manager) CPUAffinity(podUID, containerName string) cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLoaded() != nil {
		return cpuset.New()
	}
	return m.state.getOrDefault(podUID, containerName)
}

// ExclusiveCPUs returns c's exclusive CPUs (empty when it has none).
func (m *Manager) ExclusiveCPUs(podUID, containerName string) cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLoaded() != nil {
		return cpuset.New()
	}
	if set, ok := m.state.assignments[podUID][containerName]; ok {
		return set
	}
	return cpuset.New()
}

// SharedCPUs returns the shared pool (empty with the none policy).
func (m *Manager) SharedCPUs() cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLoaded() != nil {
		return cpuset.New()
	}
	return m.state.defaultSet
}

// ApplyContainerConfig sets the container's CRI cpuset to the CPUs it
// runs on (CPUAffinity), as the kubelet before it creates a container; it
// leaves the config alone with the none policy.
func (m *Manager) ApplyContainerConfig(_ context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	if m.policy == nil {
		return nil
	}
	m.mu.Lock()
	err := m.ensureLoaded()
	set := m.state.getOrDefault(string(pod.UID), c.Name)
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("CPU manager: %w", err)
	}
	if set.IsEmpty() {
		return nil
	}
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.Resources == nil {
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	cfg.Linux.Resources.CpusetCpus = set.String()
	return nil
}

// ContainerCPUs returns c's exclusive CPU IDs, for the pod resources API.
func (m *Manager) ContainerCPUs(pod *v1.Pod, c *v1.Container) []int64 {
	return ids(m.ExclusiveCPUs(string(pod.UID), c.Name))
}

// AllocatableCPUs returns the CPUs that can be given exclusively (none
// with the none policy), for the pod resources API.
func (m *Manager) AllocatableCPUs() []int64 {
	if m.policy == nil {
		return nil
	}
	return ids(m.policy.allocatable())
}

func ids(set cpuset.CPUSet) []int64 {
	var out []int64
	for _, c := range set.List() {
		out = append(out, int64(c))
	}
	return out
}

// Run reads (or creates) the state file and, with the static policy and a
// Runtime, reconciles the running containers' cpusets every
// ReconcilePeriod (and soon after an allocation or release) until ctx is
// done. With policy none (or no Runtime) there is nothing to reconcile:
// it returns nil once the state file is read, so an idle manager holds no
// goroutine. It fails when the state file cannot be used, as the kubelet
// refuses to start.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	err := m.ensureLoaded()
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("CPU manager: %w", err)
	}
	if m.policy == nil || m.opts.Runtime == nil {
		return nil
	}
	logger := m.logger
	logger.Info("CPU manager reconciling", "policy", m.opts.Policy, "reconcilePeriod", m.opts.ReconcilePeriod)
	t := m.opts.Clock.NewTicker(m.opts.ReconcilePeriod)
	defer t.Stop()
	for {
		m.reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-m.kick:
		}
	}
}

// reconcile releases what gone pods held and brings every running
// container of an active pod onto its cpuset.
func (m *Manager) reconcile(ctx context.Context) {
	m.mu.Lock()
	m.removeStaleLocked()
	active := map[string]bool{}
	if m.opts.ActivePods != nil {
		for _, p := range m.opts.ActivePods() {
			active[string(p.UID)] = true
		}
	}
	m.mu.Unlock()
	cs, err := m.opts.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	})
	if err != nil {
		if ctx.Err() == nil {
			m.logger.Error(err, "CPU manager: cannot list the running containers")
		}
		return
	}
	seen := map[string]bool{}
	for _, c := range cs {
		pod, name := c.Labels[kubetypes.KubernetesPodUIDLabel], c.Labels[kubetypes.KubernetesContainerNameLabel]
		if !active[pod] || name == "" {
			continue
		}
		seen[c.Id] = true
		m.mu.Lock()
		want := m.state.getOrDefault(pod, name)
		last, ok := m.applied[c.Id]
		m.mu.Unlock()
		if want.IsEmpty() || (ok && last.Equals(want)) {
			continue
		}
		err := m.opts.Runtime.UpdateContainerResources(ctx, c.Id, &runtimeapi.ContainerResources{
			Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: want.String()},
		})
		if err != nil {
			if ctx.Err() == nil {
				m.logger.Error(err, "CPU manager: failed to update container", "podUID", pod, "containerName", name, "containerID", c.Id, "cpuSet", want.String())
			}
			continue
		}
		m.logger.V(4).Info("CPU manager: updated container cpuset", "podUID", pod, "containerName", name, "containerID", c.Id, "cpuSet", want.String())
		m.mu.Lock()
		m.applied[c.Id] = want
		m.mu.Unlock()
	}
	m.mu.Lock()
	for id := range m.applied {
		if !seen[id] {
			delete(m.applied, id)
		}
	}
	m.mu.Unlock()
}

// updateGauges sets the shared pool and exclusive CPU gauges (under mu).
func (m *Manager) updateGauges() {
	if m.policy == nil {
		return
	}
	m.metrics.sharedPool.Set(float64(m.state.defaultSet.Size() * 1000))
	exclusive := cpuset.New()
	for _, cs := range m.state.assignments {
		for _, set := range cs {
			exclusive = exclusive.Union(set)
		}
	}
	m.metrics.exclusive.Set(float64(exclusive.Size()))
}

// metrics are the kubelet's CPU manager metrics.
type metrics struct {
	pinningRequests prometheus.Counter
	pinningErrors   prometheus.Counter
	sharedPool      prometheus.Gauge
	exclusive       prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		pinningRequests: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "kubelet", Name: "cpu_manager_pinning_requests_total",
			Help: "[ALPHA] The number of cpu core allocations which required pinning."}),
		pinningErrors: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "kubelet", Name: "cpu_manager_pinning_errors_total",
			Help: "[ALPHA] The number of cpu core allocations which required pinning failed."}),
		sharedPool: prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubelet", Name: "cpu_manager_shared_pool_size_millicores",
			Help: "[ALPHA] The size of the shared CPU pool for non-guaranteed QoS pods, in millicores."}),
		exclusive: prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubelet", Name: "cpu_manager_exclusive_cpu_allocation_count",
			Help: "[ALPHA] The total number of CPUs exclusively allocated to containers running on this node"}),
	}
	if reg != nil {
		reg.MustRegister(m.pinningRequests, m.pinningErrors, m.sharedPool, m.exclusive)
	}
	return m
}
