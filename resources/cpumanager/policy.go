package cpumanager

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/resources/internal/qos"
	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// The policies (kubelet cpuManagerPolicy).
const (
	PolicyNone   = "none"
	PolicyStatic = "static"
)

// The static policy's options (cpuManagerPolicyOptions) that are GA in
// Kubernetes 1.37, the ones nodekit implements.
const (
	// OptionFullPCPUsOnly ("true") gives containers whole physical cores
	// only: a request that is not a multiple of the threads per core, or
	// more cores than are free, is rejected with SMTAlignmentError.
	OptionFullPCPUsOnly = "full-pcpus-only"
	// OptionStrictCPUReservation ("true") keeps the reserved CPUs out of
	// the shared pool too: only system daemons run on them.
	OptionStrictCPUReservation = "strict-cpu-reservation"
	// OptionPreferAlignByUncoreCache ("true") packs a container's CPUs
	// into as few uncore (last-level) caches as it can.
	OptionPreferAlignByUncoreCache = "prefer-align-cpus-by-uncorecache"
)

// notImplementedOptions are the kubelet's beta and alpha options, which
// nodekit refuses rather than ignore.
var notImplementedOptions = map[string]bool{
	"distribute-cpus-across-numa":  true,
	"align-by-socket":              true,
	"distribute-cpus-across-cores": true,
}

// ReasonSMTAlignment is the kubelet's admission reason for a request that
// full-pcpus-only cannot satisfy.
const ReasonSMTAlignment = "SMTAlignmentError"

// SMTAlignmentError rejects a container whose request full-pcpus-only
// cannot satisfy with whole cores.
type SMTAlignmentError struct {
	RequestedCPUs         int
	CpusPerCore           int
	AvailablePhysicalCPUs int
	CausedByPhysicalCPUs  bool
}

// Error is the kubelet's message.
func (e SMTAlignmentError) Error() string {
	if e.CausedByPhysicalCPUs {
		return fmt.Sprintf("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = %d, requested CPUs = %d, CPUs per core = %d", e.AvailablePhysicalCPUs, e.RequestedCPUs, e.CpusPerCore)
	}
	return fmt.Sprintf("SMT Alignment Error: requested %d cpus not multiple cpus per core = %d", e.RequestedCPUs, e.CpusPerCore)
}

// Reason is ReasonSMTAlignment.
func (e SMTAlignmentError) Reason() string { return ReasonSMTAlignment }

type staticOptions struct {
	fullPCPUsOnly bool
	strict        bool
	preferUncore  bool
}

func parseOptions(opts map[string]string) (staticOptions, error) {
	var out staticOptions
	for name, value := range opts {
		var dst *bool
		switch name {
		case OptionFullPCPUsOnly:
			dst = &out.fullPCPUsOnly
		case OptionStrictCPUReservation:
			dst = &out.strict
		case OptionPreferAlignByUncoreCache:
			dst = &out.preferUncore
		default:
			if notImplementedOptions[name] {
				return out, fmt.Errorf("CPU Manager Policy option %q is not implemented by nodekit (only the GA options %s, %s and %s are)", name, OptionFullPCPUsOnly, OptionStrictCPUReservation, OptionPreferAlignByUncoreCache)
			}
			return out, fmt.Errorf("unknown CPU Manager Policy option: %q", name)
		}
		v, err := strconv.ParseBool(value)
		if err != nil {
			return out, fmt.Errorf("bad value for option %q: %w", name, err)
		}
		*dst = v
	}
	return out, nil
}

// static is the kubelet's static policy: Guaranteed pods' containers with
// integer CPU requests get CPUs of their own; every other container runs
// on the shared pool (the default set), which always keeps the reserved
// CPUs (unless strict-cpu-reservation).
type static struct {
	topo         *topology.CPUTopology
	reserved     cpuset.CPUSet
	reservedPhys cpuset.CPUSet
	opts         staticOptions
	affinity     func(podUID, container string) topologymanager.TopologyHint
	// reuse are the CPUs of a pod's finished (non-restartable) init
	// containers, which its next containers may take again.
	reuse map[string]cpuset.CPUSet
}

// newStatic reserves numReserved CPUs: reservedCPUs when given (it must
// have that many), otherwise picked by topology as the kubelet's.
func newStatic(topo *topology.CPUTopology, numReserved int, reservedCPUs cpuset.CPUSet, opts staticOptions, affinity func(string, string) topologymanager.TopologyHint) (*static, error) {
	p := &static{topo: topo, opts: opts, affinity: affinity, reuse: map[string]cpuset.CPUSet{}}
	reserved := reservedCPUs
	if reserved.Size() == 0 {
		reserved, _ = takeByTopology(topo, topo.CPUDetails.CPUs(), numReserved, opts.preferUncore)
	}
	if reserved.Size() != numReserved {
		return nil, fmt.Errorf("[cpumanager] unable to reserve the required amount of CPUs (size of %s did not equal %d)", reserved, numReserved)
	}
	p.reserved = reserved
	p.reservedPhys = cpuset.New()
	for _, cpu := range reserved.UnsortedList() {
		core, err := topo.CPUCoreID(cpu)
		if err != nil {
			return nil, fmt.Errorf("[cpumanager] unable to build the reserved physical CPUs from the reserved set: %w", err)
		}
		p.reservedPhys = p.reservedPhys.Union(topo.CPUDetails.CPUsInCores(core))
	}
	return p, nil
}

// initialDefault is the shared pool of a fresh state.
func (p *static) initialDefault() cpuset.CPUSet {
	all := p.topo.CPUDetails.CPUs()
	if p.opts.strict {
		return all.Difference(p.reserved)
	}
	return all
}

// validate checks a restored state against the machine and the
// reservation, with the kubelet's messages; an empty state is initialized.
func (p *static) validate(s *memState) error {
	all := p.initialDefault()
	if s.defaultSet.IsEmpty() {
		if len(s.assignments) != 0 {
			return fmt.Errorf("default cpuset cannot be empty")
		}
		s.defaultSet = all
		return nil
	}
	if p.opts.strict {
		if in := p.reserved.Intersection(s.defaultSet); !in.IsEmpty() {
			return fmt.Errorf("some of strictly reserved cpus: %q are present in defaultCpuSet: %q", in.String(), s.defaultSet.String())
		}
	} else if !p.reserved.Intersection(s.defaultSet).Equals(p.reserved) {
		return fmt.Errorf("not all reserved cpus: %q are present in defaultCpuSet: %q", p.reserved.String(), s.defaultSet.String())
	}
	known := s.defaultSet
	for pod, cs := range s.assignments {
		for c, set := range cs {
			if !s.defaultSet.Intersection(set).IsEmpty() {
				return fmt.Errorf("pod: %s, container: %s cpuset: %q overlaps with default cpuset %q", pod, c, set.String(), s.defaultSet.String())
			}
			known = known.Union(set)
		}
	}
	if !known.Equals(all) {
		return fmt.Errorf("current set of available CPUs %q doesn't match with CPUs in state %q", all.String(), known.String())
	}
	return nil
}

// allocatable are the CPUs that can be given exclusively.
func (p *static) allocatable() cpuset.CPUSet {
	return p.topo.CPUDetails.CPUs().Difference(p.reserved)
}

// available are the free CPUs that can be given exclusively.
func (p *static) available(s *memState) cpuset.CPUSet {
	return s.defaultSet.Difference(p.reserved)
}

func isIntegral(q resource.Quantity) bool { return q.Value()*1000 == q.MilliValue() }

// guaranteedCPUs is the number of exclusive CPUs c gets: its integer CPU
// request in a Guaranteed pod, else 0. Pod-level resources
// (PodLevelResourceManagers, beta and off in 1.37) get none.
func guaranteedCPUs(pod *v1.Pod, c *v1.Container) int {
	if qos.Of(pod) != v1.PodQOSGuaranteed || qos.PodLevelResources(pod) {
		return 0
	}
	q := c.Resources.Requests[v1.ResourceCPU]
	if !isIntegral(q) {
		return 0
	}
	return int(q.Value())
}

// podGuaranteedCPUs is the most the pod holds at once: its app and sidecar
// containers together, or its largest init container (with the sidecars
// started before it).
func podGuaranteedCPUs(pod *v1.Pod) int {
	initMax, sidecars := 0, 0
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if _, ok := c.Resources.Requests[v1.ResourceCPU]; !ok {
			continue
		}
		n := guaranteedCPUs(pod, c)
		if podstate.IsRestartableInitContainer(c) {
			sidecars += n
		} else if sidecars+n > initMax {
			initMax = sidecars + n
		}
	}
	apps := 0
	for i := range pod.Spec.Containers {
		apps += guaranteedCPUs(pod, &pod.Spec.Containers[i])
	}
	return max(initMax, apps+sidecars)
}

func (p *static) enforceSMTAlignment(s *memState, n int) error {
	if !p.opts.fullPCPUsOnly {
		return nil
	}
	perCore := p.topo.CPUsPerCore()
	if n%perCore != 0 {
		return SMTAlignmentError{RequestedCPUs: n, CpusPerCore: perCore}
	}
	if free := s.defaultSet.Difference(p.reservedPhys).Size(); n > free {
		return SMTAlignmentError{RequestedCPUs: n, CpusPerCore: perCore, AvailablePhysicalCPUs: free, CausedByPhysicalCPUs: true}
	}
	return nil
}

// updateReuse records c's CPUs as reusable by the pod's next containers
// when c is a regular init container, and no longer reusable otherwise.
func (p *static) updateReuse(pod *v1.Pod, c *v1.Container, set cpuset.CPUSet) {
	uid := string(pod.UID)
	for other := range p.reuse {
		if other != uid {
			delete(p.reuse, other)
		}
	}
	if _, ok := p.reuse[uid]; !ok {
		p.reuse[uid] = cpuset.New()
	}
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		if ic.Name != c.Name {
			continue
		}
		if podstate.IsRestartableInitContainer(ic) {
			break
		}
		p.reuse[uid] = p.reuse[uid].Union(set)
		return
	}
	p.reuse[uid] = p.reuse[uid].Difference(set)
}

// allocate gives c its exclusive CPUs; it returns how many it pinned (0
// when c gets none or already has them).
func (p *static) allocate(s *memState, pod *v1.Pod, c *v1.Container) (int, error) {
	n := guaranteedCPUs(pod, c)
	if n == 0 {
		return 0, nil
	}
	if set, ok := s.assignments[string(pod.UID)][c.Name]; ok {
		p.updateReuse(pod, c, set)
		return 0, nil
	}
	if err := p.enforceSMTAlignment(s, n); err != nil {
		return n, err
	}
	hint := p.affinity(string(pod.UID), c.Name)
	set, err := p.allocateCPUs(s, n, hint.NUMANodeAffinity, p.reuse[string(pod.UID)])
	if err != nil {
		return n, err
	}
	s.set(string(pod.UID), c.Name, set)
	p.updateReuse(pod, c, set)
	return n, nil
}

// allocateCPUs takes n CPUs, first within the NUMA affinity (when set),
// the rest anywhere, and removes them from the shared pool.
func (p *static) allocateCPUs(s *memState, n int, affinity topologymanager.BitMask, reusable cpuset.CPUSet) (cpuset.CPUSet, error) {
	allocatable := p.available(s).Union(reusable)
	result := cpuset.New()
	if affinity != 0 {
		aligned := cpuset.New()
		for _, node := range affinity.Bits() {
			aligned = aligned.Union(allocatable.Intersection(p.topo.CPUDetails.CPUsInNUMANodes(node)))
		}
		got, err := takeByTopology(p.topo, aligned, min(n, aligned.Size()), p.opts.preferUncore)
		if err != nil {
			return cpuset.New(), err
		}
		result = got
	}
	rest, err := takeByTopology(p.topo, allocatable.Difference(result), n-result.Size(), p.opts.preferUncore)
	if err != nil {
		return cpuset.New(), err
	}
	result = result.Union(rest)
	s.defaultSet = s.defaultSet.Difference(result)
	return result, nil
}

// release returns the container's CPUs, but for those a sibling still
// holds, to the shared pool.
func (p *static) release(s *memState, podUID, container string) {
	set, ok := s.assignments[podUID][container]
	if !ok {
		return
	}
	s.delete(podUID, container)
	for _, other := range s.assignments[podUID] {
		set = set.Difference(other)
	}
	s.defaultSet = s.defaultSet.Union(set)
}

// hints returns the NUMA affinities that can hold request CPUs of
// available (all of reusable too): every mask with enough CPUs, preferred
// when it is of the fewest NUMA nodes that could ever hold the request.
func (p *static) hints(available, reusable cpuset.CPUSet, request int) []topologymanager.TopologyHint {
	nodes := p.topo.CPUDetails.NUMANodes().List()
	minSize := len(nodes)
	hints := []topologymanager.TopologyHint{}
	topologymanager.IterateBitMasks(nodes, func(m topologymanager.BitMask) {
		if p.topo.CPUDetails.CPUsInNUMANodes(m.Bits()...).Size() >= request && m.Count() < minSize {
			minSize = m.Count()
		}
		matching := 0
		for _, c := range reusable.List() {
			if !m.IsSet(p.topo.CPUDetails[c].NUMANodeID) {
				return
			}
			matching++
		}
		for _, c := range available.List() {
			if m.IsSet(p.topo.CPUDetails[c].NUMANodeID) {
				matching++
			}
		}
		if matching < request {
			return
		}
		hints = append(hints, topologymanager.TopologyHint{NUMANodeAffinity: m})
	})
	for i := range hints {
		hints[i].Preferred = hints[i].NUMANodeAffinity.Count() == minSize
	}
	return hints
}

func (p *static) containerHints(s *memState, pod *v1.Pod, c *v1.Container) map[string][]topologymanager.TopologyHint {
	n := guaranteedCPUs(pod, c)
	if n == 0 {
		return nil
	}
	if set, ok := s.assignments[string(pod.UID)][c.Name]; ok {
		if set.Size() != n {
			return map[string][]topologymanager.TopologyHint{string(v1.ResourceCPU): {}}
		}
		return map[string][]topologymanager.TopologyHint{string(v1.ResourceCPU): p.hints(set, cpuset.New(), n)}
	}
	return map[string][]topologymanager.TopologyHint{string(v1.ResourceCPU): p.hints(p.available(s), p.reuse[string(pod.UID)], n)}
}

func (p *static) podHints(s *memState, pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	n := podGuaranteedCPUs(pod)
	if n == 0 {
		return nil
	}
	assigned := cpuset.New()
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if set, ok := s.assignments[string(pod.UID)][list[i].Name]; ok {
				if set.Size() != guaranteedCPUs(pod, &list[i]) {
					return map[string][]topologymanager.TopologyHint{string(v1.ResourceCPU): {}}
				}
				assigned = assigned.Union(set)
			}
		}
	}
	if assigned.Size() == n {
		return map[string][]topologymanager.TopologyHint{string(v1.ResourceCPU): p.hints(assigned, cpuset.New(), n)}
	}
	return map[string][]topologymanager.TopologyHint{string(v1.ResourceCPU): p.hints(p.available(s), p.reuse[string(pod.UID)].Union(assigned), n)}
}
