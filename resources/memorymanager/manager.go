package memorymanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/atomicfile"
	"github.com/nodekit/nodekit/resources/memorymanager/internal/state"
	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// StateFile is the memory manager's checkpoint in the root directory, the
// kubelet's.
const StateFile = "memory_manager_state"

// The policies (kubelet memoryManagerPolicy).
const (
	PolicyNone   = "None"
	PolicyStatic = "Static"
)

// admissionWindow is how long a pod being admitted keeps its memory while
// it is not yet among the active pods.
const admissionWindow = 10 * time.Second

// Options configures a Manager.
type Options struct {
	// Policy is memoryManagerPolicy: None (default) or Static.
	Policy string
	// ReservedMemory is reservedMemory: the memory kept for the system on
	// each NUMA node. With Static, its totals must equal, type by type,
	// NodeAllocatableReservation's.
	ReservedMemory []kubeletconfig.MemoryReservation
	// NodeAllocatableReservation is what node allocatable keeps back:
	// kubeReserved plus systemReserved plus the hard eviction threshold
	// of memory (and huge pages).
	NodeAllocatableReservation v1.ResourceList
	// Machine is the machine's topology. Required.
	Machine *topology.Machine
	// StateDir holds StateFile (the kubelet's root directory); empty keeps
	// the state in memory only.
	StateDir string
	// Affinity returns the NUMA affinity the topology manager chose for a
	// container; nil is no preference.
	Affinity func(podUID, containerName string) topologymanager.TopologyHint
	// ActivePods returns the admitted pods that have not terminated; the
	// memory of other pods' containers is released (once SourcesReady).
	ActivePods func() []*v1.Pod
	// SourcesReady says whether every pod source has been seen (nil:
	// always).
	SourcesReady func() bool
	// Clock dates admissions and paces Run (default clock.RealClock{}).
	Clock clock.WithTicker
	// Registerer registers the kubelet's memory manager metrics; nil
	// registers nothing.
	Registerer prometheus.Registerer
	// Logger logs allocations (default: discard).
	Logger logr.Logger
}

// memState is the policy's state: the NUMA nodes and the containers'
// blocks.
type memState struct {
	machine state.NUMANodeMap
	entries state.ContainerMemoryAssignments
}

func (s *memState) set(pod, container string, blocks []state.Block) {
	if s.entries[pod] == nil {
		s.entries[pod] = map[string][]state.Block{}
	}
	s.entries[pod][container] = blocks
}

// Manager is the kubelet's memory manager. With the Static policy,
// containers of Guaranteed pods are given their memory and huge pages on
// NUMA nodes at admission (Allocate, through the topology manager, as a
// topologymanager.HintProvider) and are created with cpuset.mems set to
// them (ApplyContainerConfig); a pod's memory goes back when it is gone.
// The state lives in StateFile in the kubelet's format, so a handover
// keeps it. With None it does nothing but write that file. Its methods are
// safe for concurrent use.
type Manager struct {
	opts    Options
	policy  *static
	logger  logr.Logger
	path    string
	metrics *metrics

	mu            sync.Mutex
	loaded        bool
	loadErr       error
	state         memState
	allocatable   []state.Block
	admitting     string
	admittingFrom time.Time
}

// New checks the policy and the reserved memory with the kubelet's
// messages and returns a Manager; it does no I/O (the state file is read
// on first use or by Run).
func New(opts Options) (*Manager, error) {
	if opts.Policy == "" {
		opts.Policy = PolicyNone
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Machine == nil {
		return nil, errors.New("memory manager: no machine topology")
	}
	if opts.Affinity == nil {
		opts.Affinity = func(string, string) topologymanager.TopologyHint { return topologymanager.TopologyHint{} }
	}
	m := &Manager{opts: opts, logger: opts.Logger, state: memState{machine: state.NUMANodeMap{}, entries: state.ContainerMemoryAssignments{}}}
	if m.logger.GetSink() == nil {
		m.logger = logr.Discard()
	}
	if opts.StateDir != "" {
		m.path = filepath.Join(opts.StateDir, StateFile)
	}
	switch opts.Policy {
	case PolicyNone:
	case PolicyStatic:
		reserved, err := systemReserved(opts.Machine, opts.NodeAllocatableReservation, opts.ReservedMemory)
		if err != nil {
			return nil, err
		}
		var total uint64
		for _, n := range reserved {
			total += n[v1.ResourceMemory]
		}
		if total == 0 {
			return nil, errors.New("[memorymanager] you should specify the system reserved memory")
		}
		m.policy = &static{machine: opts.Machine, reserved: reserved, affinity: opts.Affinity, reuse: map[string]map[topologymanager.BitMask]map[v1.ResourceName]uint64{}}
	default:
		return nil, fmt.Errorf("unknown policy: %q", opts.Policy)
	}
	m.metrics = newMetrics(opts.Registerer)
	return m, nil
}

// systemReserved checks reservedMemory against the node allocatable
// reservation and converts it to bytes by NUMA node and type.
func systemReserved(machine *topology.Machine, allocatable v1.ResourceList, reservations []kubeletconfig.MemoryReservation) (map[int]map[v1.ResourceName]uint64, error) {
	out := map[int]map[v1.ResourceName]uint64{}
	for _, n := range machine.NUMANodes {
		out[n.ID] = map[v1.ResourceName]uint64{}
	}
	totals := map[v1.ResourceName]resource.Quantity{}
	for _, r := range reservations {
		if _, ok := out[int(r.NumaNode)]; !ok {
			return nil, fmt.Errorf("the reserved memory configuration references a NUMA node %d that does not exist on this machine", r.NumaNode)
		}
		for name, q := range r.Limits {
			t := totals[name]
			t.Add(q)
			totals[name] = t
			v, ok := q.AsInt64()
			if !ok {
				return nil, fmt.Errorf("could not covert a variable of type Quantity to int64")
			}
			out[int(r.NumaNode)][name] = uint64(v)
		}
	}
	types := map[v1.ResourceName]bool{}
	for name := range totals {
		types[name] = true
	}
	for name := range allocatable {
		if isMemoryResource(name) {
			types[name] = true
		}
	}
	for name := range types {
		want := resource.NewQuantity(0, resource.DecimalSI)
		if q, ok := allocatable[name]; ok {
			want.Add(q)
		}
		got := resource.NewQuantity(0, resource.DecimalSI)
		if q, ok := totals[name]; ok {
			got.Add(q)
		}
		if !want.Equal(*got) {
			return nil, fmt.Errorf("the total amount %q of type %q is not equal to the value %q determined by Node Allocatable feature", got.String(), name, want.String())
		}
	}
	return out, nil
}

// Policy returns the policy's name.
func (m *Manager) Policy() string { return m.opts.Policy }

func (m *Manager) ensureLoaded() error {
	if !m.loaded {
		m.loaded = true
		m.loadErr = m.load()
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
				return fmt.Errorf("could not restore state from checkpoint: %v, please drain this node and delete the memory manager checkpoint file %q before restarting Kubelet", err, m.path)
			}
			if s.PolicyName != m.opts.Policy {
				return fmt.Errorf("could not restore state from checkpoint: configured policy %q differs from state checkpoint policy %q, please drain this node and delete the memory manager checkpoint file %q before restarting Kubelet", m.opts.Policy, s.PolicyName, m.path)
			}
			m.state = memState{machine: s.MachineState, entries: s.Entries}
			if m.state.machine == nil {
				m.state.machine = state.NUMANodeMap{}
			}
			if m.state.entries == nil {
				m.state.entries = state.ContainerMemoryAssignments{}
			}
		}
	}
	if m.policy != nil {
		if err := m.policy.validate(&m.state); err != nil {
			return fmt.Errorf("invalid state, please drain node and remove policy state file %q: %w", m.path, err)
		}
		for id, n := range m.state.machine {
			for name, t := range n.MemoryMap {
				if t.Allocatable > 0 {
					m.allocatable = append(m.allocatable, state.Block{NUMAAffinity: []int{id}, Type: name, Size: t.Allocatable})
				}
			}
		}
		sort.Slice(m.allocatable, func(i, j int) bool {
			a, b := m.allocatable[i], m.allocatable[j]
			if a.NUMAAffinity[0] != b.NUMAAffinity[0] {
				return a.NUMAAffinity[0] < b.NUMAAffinity[0]
			}
			return a.Type < b.Type
		})
	}
	return m.store()
}

func (m *Manager) store() error {
	if m.path == "" {
		return nil
	}
	blob, err := state.Marshal(state.State{PolicyName: m.opts.Policy, MachineState: m.state.machine, Entries: m.state.entries})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.path), 0o750); err != nil {
		return fmt.Errorf("write memory manager checkpoint: %w", err)
	}
	if err := atomicfile.Write(m.path, blob); err != nil {
		return fmt.Errorf("write memory manager checkpoint: %w", err)
	}
	return nil
}

func (m *Manager) storeOrLog() {
	if err := m.store(); err != nil {
		m.logger.Error(err, "Failed to store memory manager state to checkpoint")
	}
}

// admit notes the pod being admitted (see the CPU manager's).
func (m *Manager) admit(pod *v1.Pod) {
	if m.admitting != string(pod.UID) {
		m.admitting = string(pod.UID)
		m.admittingFrom = m.opts.Clock.Now()
	}
}

// removeStaleLocked releases the memory of containers whose pod is gone.
func (m *Manager) removeStaleLocked() {
	if m.policy == nil || m.opts.ActivePods == nil || (m.opts.SourcesReady != nil && !m.opts.SourcesReady()) {
		return
	}
	active := map[string]map[string]bool{}
	if m.admitting != "" && m.opts.Clock.Since(m.admittingFrom) < admissionWindow {
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
	for pod, cs := range m.state.entries {
		for c, blocks := range cs {
			if a, ok := active[pod]; ok && (a == nil || a[c]) {
				continue
			}
			m.logger.V(2).Info("Memory manager: releasing the memory of a container that is gone", "podUID", pod, "containerName", c)
			delete(cs, c)
			release(m.state.machine, blocks)
			changed = true
		}
		if len(cs) == 0 {
			delete(m.state.entries, pod)
		}
	}
	if changed {
		m.storeOrLog()
	}
}

// GetTopologyHints is the Static policy's NUMA hints for c's memory and
// huge pages (topologymanager.HintProvider); nil when it gets none.
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

// Allocate gives c its memory blocks (Static), on the affinity the
// topology manager chose; a container that already has them keeps them.
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
	pinned, err := m.policy.allocate(&m.state, pod, c)
	if pinned {
		m.metrics.requests.Inc()
	}
	if err != nil {
		m.metrics.errors.Inc()
		m.logger.Error(err, "Memory manager: cannot allocate memory", "pod", klog.KObj(pod), "containerName", c.Name)
		return err
	}
	if pinned {
		m.logger.Info("Memory manager: allocated memory", "pod", klog.KObj(pod), "containerName", c.Name, "numaNodes", m.numaNodes(string(pod.UID), c.Name))
		m.storeOrLog()
	}
	return nil
}

// numaNodes are the NUMA nodes of the container's blocks (under mu).
func (m *Manager) numaNodes(podUID, container string) []int {
	set := map[int]bool{}
	for _, b := range m.state.entries[podUID][container] {
		for _, id := range b.NUMAAffinity {
			set[id] = true
		}
	}
	var out []int
	for id := range set {
		out = append(out, id)
	}
	sort.Ints(out)
	return out
}

// MemoryNUMANodes returns the NUMA nodes the container's memory is on
// (none when the memory manager gave it nothing).
func (m *Manager) MemoryNUMANodes(podUID, containerName string) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLoaded() != nil {
		return nil
	}
	return m.numaNodes(podUID, containerName)
}

// ApplyContainerConfig sets the container's CRI cpuset.mems to the NUMA
// nodes of its memory, as the kubelet before it creates a container.
func (m *Manager) ApplyContainerConfig(_ context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	if m.policy == nil {
		return nil
	}
	m.mu.Lock()
	err := m.ensureLoaded()
	nodes := m.numaNodes(string(pod.UID), c.Name)
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("memory manager: %w", err)
	}
	if len(nodes) == 0 {
		return nil
	}
	ids := make([]string, len(nodes))
	for i, id := range nodes {
		ids[i] = strconv.Itoa(id)
	}
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.Resources == nil {
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	cfg.Linux.Resources.CpusetMems = strings.Join(ids, ",")
	return nil
}

func toPodResources(blocks []state.Block) []*podresourcesv1.ContainerMemory {
	var out []*podresourcesv1.ContainerMemory
	for _, b := range blocks {
		ti := &podresourcesv1.TopologyInfo{}
		for _, id := range b.NUMAAffinity {
			ti.Nodes = append(ti.Nodes, &podresourcesv1.NUMANode{ID: int64(id)})
		}
		out = append(out, &podresourcesv1.ContainerMemory{MemoryType: string(b.Type), Size: b.Size, Topology: ti})
	}
	return out
}

// ContainerMemory returns c's memory blocks, for the pod resources API.
func (m *Manager) ContainerMemory(pod *v1.Pod, c *v1.Container) []*podresourcesv1.ContainerMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLoaded() != nil {
		return nil
	}
	return toPodResources(m.state.entries[string(pod.UID)][c.Name])
}

// AllocatableMemory returns each NUMA node's allocatable memory and huge
// pages (none with None), for the pod resources API.
func (m *Manager) AllocatableMemory() []*podresourcesv1.ContainerMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLoaded() != nil {
		return nil
	}
	return toPodResources(m.allocatable)
}

// Run reads (or creates) the state file and, with the Static policy,
// gives back the memory of pods no longer active every 10 seconds (the
// kubelet does when their containers stop) until ctx is done. With policy
// None it returns nil once the state file is read: there is nothing to
// give back, and an idle manager holds no goroutine. It fails when the
// state file cannot be used, as the kubelet refuses to start.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	err := m.ensureLoaded()
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("memory manager: %w", err)
	}
	if m.policy == nil {
		return nil
	}
	t := m.opts.Clock.NewTicker(admissionWindow)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			m.mu.Lock()
			m.removeStaleLocked()
			m.mu.Unlock()
		}
	}
}

// metrics are the kubelet's memory manager metrics.
type metrics struct {
	requests prometheus.Counter
	errors   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "kubelet", Name: "memory_manager_pinning_requests_total",
			Help: "[ALPHA] The number of memory pages allocations which required pinning."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "kubelet", Name: "memory_manager_pinning_errors_total",
			Help: "[ALPHA] The number of memory pages allocations which required pinning that failed."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.errors)
	}
	return m
}
