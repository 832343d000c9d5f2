package memorymanager

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/resources/internal/qos"
	"github.com/nodekit/nodekit/resources/memorymanager/internal/state"
	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// isMemoryResource: memory and huge pages are the memory manager's.
func isMemoryResource(name v1.ResourceName) bool {
	return name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

// containerRequests are c's memory and huge page requests in bytes.
func containerRequests(c *v1.Container) (map[v1.ResourceName]uint64, error) {
	out := map[v1.ResourceName]uint64{}
	for name, q := range c.Resources.Requests {
		if !isMemoryResource(name) {
			continue
		}
		v, ok := q.AsInt64()
		if !ok {
			return nil, fmt.Errorf("[memorymanager] failed to represent quantity as int64")
		}
		out[name] = uint64(v)
	}
	return out, nil
}

// podRequests is what the pod holds at most at once, by memory type.
func podRequests(pod *v1.Pod) (map[v1.ResourceName]uint64, error) {
	initMax, sidecars := map[v1.ResourceName]uint64{}, map[v1.ResourceName]uint64{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		reqs, err := containerRequests(c)
		if err != nil {
			return nil, err
		}
		for name, q := range reqs {
			if _, ok := initMax[name]; !ok {
				initMax[name] = 0
			}
			if podstate.IsRestartableInitContainer(c) {
				sidecars[name] += q
			} else if sidecars[name]+q > initMax[name] {
				initMax[name] = sidecars[name] + q
			}
		}
	}
	apps := map[v1.ResourceName]uint64{}
	for i := range pod.Spec.Containers {
		reqs, err := containerRequests(&pod.Spec.Containers[i])
		if err != nil {
			return nil, err
		}
		for name, q := range reqs {
			apps[name] += q
		}
	}
	out := map[v1.ResourceName]uint64{}
	for name := range apps {
		out[name] = max(apps[name]+sidecars[name], initMax[name])
	}
	return out, nil
}

// static is the kubelet's Static memory policy: containers of Guaranteed
// pods get their memory and huge pages on the NUMA nodes the topology
// manager chose (or the narrowest that hold them), the nodes of a
// multi-node assignment stay one group, and the container's cpuset.mems
// is set to them.
type static struct {
	machine  *topology.Machine
	reserved map[int]map[v1.ResourceName]uint64
	affinity func(podUID, container string) topologymanager.TopologyHint
	// reuse is what a pod's regular init containers hold, which its next
	// containers may take again, by NUMA mask and type.
	reuse map[string]map[topologymanager.BitMask]map[v1.ResourceName]uint64
}

func (p *static) defaultMachineState() state.NUMANodeMap {
	ms := state.NUMANodeMap{}
	for _, n := range p.machine.NUMANodes {
		ns := &state.NUMANodeState{MemoryMap: map[v1.ResourceName]*state.MemoryTable{}, Cells: []int{n.ID}}
		var huge uint64
		for size, count := range n.HugePages {
			name := v1.ResourceName(v1.ResourceHugePagesPrefix + resource.NewQuantity(int64(size), resource.BinarySI).String())
			total := size * count
			reserved := p.reserved[n.ID][name]
			ns.MemoryMap[name] = &state.MemoryTable{TotalMemSize: total, SystemReserved: reserved, Allocatable: total - reserved, Free: total - reserved}
			huge += total
		}
		reserved := p.reserved[n.ID][v1.ResourceMemory]
		alloc := n.MemoryBytes - reserved - huge
		ns.MemoryMap[v1.ResourceMemory] = &state.MemoryTable{TotalMemSize: n.MemoryBytes, SystemReserved: reserved, Allocatable: alloc, Free: alloc}
		ms[n.ID] = ns
	}
	return ms
}

// reserve takes size bytes of name from the nodes, in order, and joins
// them into one group.
func reserve(ms state.NUMANodeMap, nodes []int, name v1.ResourceName, size uint64) {
	for _, id := range nodes {
		ms[id].NumberOfAssignments++
		ms[id].Cells = nodes
		if size == 0 {
			continue
		}
		t := ms[id].MemoryMap[name]
		if t.Free == 0 {
			continue
		}
		take := min(t.Free, size)
		t.Reserved += take
		t.Free -= take
		size -= take
	}
}

// validate initializes an empty state, or checks a restored one against
// the machine and its assignments, with the kubelet's messages.
func (p *static) validate(s *memState) error {
	if len(s.machine) == 0 {
		if len(s.entries) != 0 {
			return fmt.Errorf("[memorymanager] machine state can not be empty when it has memory assignments")
		}
		s.machine = p.defaultMachineState()
		return nil
	}
	want := p.defaultMachineState()
	for pod, cs := range s.entries {
		for c, blocks := range cs {
			for _, b := range blocks {
				for _, id := range b.NUMAAffinity {
					ns, ok := want[id]
					if !ok {
						return fmt.Errorf("[memorymanager] (pod: %s, container: %s) the memory assignment uses the NUMA that does not exist", pod, c)
					}
					if _, ok := ns.MemoryMap[b.Type]; !ok {
						return fmt.Errorf("[memorymanager] (pod: %s, container: %s) the memory assignment uses memory resource that does not exist", pod, c)
					}
				}
				reserve(want, b.NUMAAffinity, b.Type, b.Size)
			}
		}
	}
	if !machineStatesEqual(s.machine, want) {
		return fmt.Errorf("[memorymanager] the expected machine state is different from the real one")
	}
	return nil
}

func sameGroup(a, b []int) bool {
	a, b = append([]int(nil), a...), append([]int(nil), b...)
	sort.Ints(a)
	sort.Ints(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func machineStatesEqual(a, b state.NUMANodeMap) bool {
	if len(a) != len(b) {
		return false
	}
	for id, na := range a {
		nb, ok := b[id]
		if !ok || na.NumberOfAssignments != nb.NumberOfAssignments || !sameGroup(na.Cells, nb.Cells) || len(na.MemoryMap) != len(nb.MemoryMap) {
			return false
		}
		for name, ta := range na.MemoryMap {
			tb, ok := nb.MemoryMap[name]
			if !ok || ta.TotalMemSize != tb.TotalMemSize || ta.SystemReserved != tb.SystemReserved || ta.Allocatable != tb.Allocatable {
				return false
			}
			var fa, ra, fb, rb uint64
			for _, cell := range na.Cells {
				fa += a[cell].MemoryMap[name].Free
				ra += a[cell].MemoryMap[name].Reserved
				fb += b[cell].MemoryMap[name].Free
				rb += b[cell].MemoryMap[name].Reserved
			}
			if fa != fb || ra != rb {
				return false
			}
		}
	}
	return true
}

func (p *static) reusable(pod *v1.Pod, mask topologymanager.BitMask, name v1.ResourceName) uint64 {
	return p.reuse[string(pod.UID)][mask][name]
}

// hints are the NUMA masks that can hold the requests, preferred when of
// the fewest nodes that could ever hold them; a node in a group is only
// offered with its whole group.
func (p *static) hints(ms state.NUMANodeMap, pod *v1.Pod, reqs map[v1.ResourceName]uint64) map[string][]topologymanager.TopologyHint {
	var nodes []int
	for id := range ms {
		nodes = append(nodes, id)
	}
	sort.Ints(nodes)
	minSize := len(nodes)
	hints := map[string][]topologymanager.TopologyHint{}
	topologymanager.IterateBitMasks(nodes, func(mask topologymanager.BitMask) {
		bits := mask.Bits()
		free, allocatable := map[v1.ResourceName]uint64{}, map[v1.ResourceName]uint64{}
		for _, id := range bits {
			for name := range reqs {
				if t := ms[id].MemoryMap[name]; t != nil {
					free[name] += t.Free
					allocatable[name] += t.Allocatable
				}
			}
		}
		for name, size := range reqs {
			if allocatable[name] < size {
				return
			}
		}
		if mask.Count() < minSize {
			minSize = mask.Count()
		}
		single := len(bits) == 1
		if single && len(ms[bits[0]].Cells) > 1 {
			return
		}
		for _, id := range bits {
			if !single && ms[id].NumberOfAssignments > 0 && (len(ms[id].Cells) == 1 || !sameGroup(ms[id].Cells, bits)) {
				return
			}
		}
		for name, size := range reqs {
			if free[name]+p.reusable(pod, mask, name) < size {
				return
			}
		}
		for name := range reqs {
			hints[string(name)] = append(hints[string(name)], topologymanager.TopologyHint{NUMANodeAffinity: mask})
		}
	})
	for name := range reqs {
		for i := range hints[string(name)] {
			hints[string(name)][i].Preferred = hints[string(name)][i].NUMANodeAffinity.Count() == minSize
		}
	}
	return hints
}

func bestHint(hints []topologymanager.TopologyHint) topologymanager.TopologyHint {
	var best topologymanager.TopologyHint
	for _, h := range hints {
		switch {
		case best.NUMANodeAffinity == 0:
			best = h
		case h.Preferred && !best.Preferred:
			best = h
		case h.Preferred == best.Preferred && h.NUMANodeAffinity.IsNarrowerThan(best.NUMANodeAffinity):
			best = h
		}
	}
	return best
}

func satisfies(ms state.NUMANodeMap, mask topologymanager.BitMask, reqs map[v1.ResourceName]uint64) bool {
	free := map[v1.ResourceName]uint64{}
	for _, id := range mask.Bits() {
		for name := range reqs {
			if t := ms[id].MemoryMap[name]; t != nil {
				free[name] += t.Free
			}
		}
	}
	for name, size := range reqs {
		if free[name] < size {
			return false
		}
	}
	return true
}

func violatesGroups(ms state.NUMANodeMap, mask topologymanager.BitMask) bool {
	bits := mask.Bits()
	if len(bits) == 1 {
		return false
	}
	for _, id := range bits {
		if ms[id].NumberOfAssignments == 0 {
			continue
		}
		if len(ms[id].Cells) == 1 || !sameGroup(ms[id].Cells, bits) {
			return true
		}
	}
	return false
}

// subset says whether every node of a is in b.
func subset(a, b topologymanager.BitMask) bool { return a&b == a }

// allocate gives c its memory blocks; the bool says whether it pinned.
func (p *static) allocate(s *memState, pod *v1.Pod, c *v1.Container) (bool, error) {
	if qos.Of(pod) != v1.PodQOSGuaranteed || qos.PodLevelResources(pod) {
		return false, nil
	}
	reqs, err := containerRequests(c)
	if err != nil || len(reqs) == 0 {
		return false, err
	}
	uid := string(pod.UID)
	if blocks, ok := s.entries[uid][c.Name]; ok {
		p.updateReuse(pod, c, blocks)
		return false, nil
	}
	ms := s.machine.Clone()
	best := p.affinity(uid, c.Name)
	if best.NUMANodeAffinity == 0 {
		hints := p.hints(ms, pod, reqs)
		if len(hints) < 1 {
			return true, fmt.Errorf("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")
		}
		def := bestHint(hints[string(v1.ResourceMemory)])
		if !def.Preferred && best.Preferred {
			return true, fmt.Errorf("[memorymanager] failed to find the default preferred hint")
		}
		best = def
	}
	if !satisfies(ms, best.NUMANodeAffinity, reqs) {
		var within []topologymanager.TopologyHint
		for _, h := range p.hints(ms, pod, reqs)[string(v1.ResourceMemory)] {
			if subset(best.NUMANodeAffinity, h.NUMANodeAffinity) {
				within = append(within, h)
			}
		}
		if len(within) < 1 {
			return true, fmt.Errorf("[memorymanager] failed to find NUMA nodes to extend the current topology hint")
		}
		ext := bestHint(within)
		if !ext.Preferred && best.Preferred {
			return true, fmt.Errorf("[memorymanager] failed to find the extended preferred hint")
		}
		best = ext
	}
	if violatesGroups(ms, best.NUMANodeAffinity) {
		return true, fmt.Errorf("[memorymanager] preferred hint violates NUMA node allocation")
	}
	bits := best.NUMANodeAffinity.Bits()
	var blocks []state.Block
	names := make([]v1.ResourceName, 0, len(reqs))
	for name := range reqs {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	for _, name := range names {
		size := reqs[name]
		blocks = append(blocks, state.Block{NUMAAffinity: bits, Type: name, Size: size})
		if r := p.reusable(pod, best.NUMANodeAffinity, name); r >= size {
			size = 0
		} else {
			size -= r
		}
		reserve(ms, bits, name, size)
	}
	p.updateReuse(pod, c, blocks)
	s.machine = ms
	s.set(uid, c.Name, blocks)
	p.shrinkInitBlocks(s, pod, c, blocks)
	return true, nil
}

// updateReuse records a regular init container's blocks as reusable by
// the pod's next containers, and uses them up for the others.
func (p *static) updateReuse(pod *v1.Pod, c *v1.Container, blocks []state.Block) {
	uid := string(pod.UID)
	for other := range p.reuse {
		if other != uid {
			delete(p.reuse, other)
		}
	}
	regularInit := false
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			regularInit = !podstate.IsRestartableInitContainer(&pod.Spec.InitContainers[i])
			break
		}
	}
	for _, b := range blocks {
		mask, _ := topologymanager.NewBitMask(b.NUMAAffinity...)
		if regularInit {
			if p.reuse[uid] == nil {
				p.reuse[uid] = map[topologymanager.BitMask]map[v1.ResourceName]uint64{}
			}
			if p.reuse[uid][mask] == nil {
				p.reuse[uid][mask] = map[v1.ResourceName]uint64{}
			}
			p.reuse[uid][mask][b.Type] = max(p.reuse[uid][mask][b.Type], b.Size)
			continue
		}
		if r := p.reusable(pod, mask, b.Type); r != 0 {
			p.reuse[uid][mask][b.Type] = r - min(r, b.Size)
		}
	}
}

// shrinkInitBlocks moves what c reuses out of the earlier regular init
// containers' blocks, so that releasing them frees nothing twice.
func (p *static) shrinkInitBlocks(s *memState, pod *v1.Pod, c *v1.Container, blocks []state.Block) {
	uid := string(pod.UID)
	for _, cb := range blocks {
		size := cb.Size
		for i := range pod.Spec.InitContainers {
			ic := &pod.Spec.InitContainers[i]
			if ic.Name == c.Name || size == 0 {
				break
			}
			if podstate.IsRestartableInitContainer(ic) {
				continue
			}
			ib := s.entries[uid][ic.Name]
			for j := range ib {
				b := &ib[j]
				if b.Size == 0 || b.Type != cb.Type || !sameGroup(b.NUMAAffinity, cb.NUMAAffinity) {
					continue
				}
				take := min(b.Size, size)
				b.Size -= take
				size -= take
			}
		}
	}
}

// release returns the blocks' memory to their nodes.
func release(ms state.NUMANodeMap, blocks []state.Block) {
	for _, b := range blocks {
		size := b.Size
		for _, id := range b.NUMAAffinity {
			ms[id].NumberOfAssignments--
			if ms[id].NumberOfAssignments == 0 {
				ms[id].Cells = []int{id}
			}
			if size == 0 {
				continue
			}
			t := ms[id].MemoryMap[b.Type]
			take := min(t.Reserved, size)
			t.Free += take
			t.Reserved -= take
			size -= take
		}
	}
}

func (p *static) containerHints(s *memState, pod *v1.Pod, c *v1.Container) map[string][]topologymanager.TopologyHint {
	if qos.Of(pod) != v1.PodQOSGuaranteed || qos.PodLevelResources(pod) {
		return nil
	}
	reqs, err := containerRequests(c)
	if err != nil || len(reqs) == 0 {
		return nil
	}
	if blocks, ok := s.entries[string(pod.UID)][c.Name]; ok {
		return regenerateHints(blocks, reqs)
	}
	return p.hints(s.machine, pod, reqs)
}

func (p *static) podHints(s *memState, pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	if qos.Of(pod) != v1.PodQOSGuaranteed || qos.PodLevelResources(pod) {
		return nil
	}
	reqs, err := podRequests(pod)
	if err != nil || len(reqs) == 0 {
		return nil
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if blocks, ok := s.entries[string(pod.UID)][list[i].Name]; ok {
				return regenerateHints(blocks, reqs)
			}
		}
	}
	return p.hints(s.machine, pod, reqs)
}

// regenerateHints gives an allocated container its own affinity again
// (nil when what it holds no longer matches its requests).
func regenerateHints(blocks []state.Block, reqs map[v1.ResourceName]uint64) map[string][]topologymanager.TopologyHint {
	if len(blocks) != len(reqs) {
		return nil
	}
	hints := map[string][]topologymanager.TopologyHint{}
	for _, b := range blocks {
		if size, ok := reqs[b.Type]; !ok || size != b.Size {
			return nil
		}
		mask, err := topologymanager.NewBitMask(b.NUMAAffinity...)
		if err != nil {
			return nil
		}
		hints[string(b.Type)] = append(hints[string(b.Type)], topologymanager.TopologyHint{NUMANodeAffinity: mask, Preferred: true})
	}
	return hints
}
