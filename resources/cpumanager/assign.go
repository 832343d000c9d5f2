package cpumanager

import (
	"fmt"
	"sort"

	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/resources/topology"
)

// accumulator picks CPUs from the available ones the kubelet's way
// ("packed"): whole NUMA nodes or sockets first (whichever is the larger
// unit), then the other, then (prefer-align-cpus-by-uncorecache) whole and
// partial uncore caches, then whole cores, then single CPUs from the
// fullest units first, so that allocations leave whole units free.
type accumulator struct {
	topo    *topology.CPUTopology
	details topology.CPUDetails
	needed  int
	result  cpuset.CPUSet
	// numaFirst: NUMA nodes are at least as large as sockets (a socket
	// holds one or more nodes).
	numaFirst bool
}

func newAccumulator(topo *topology.CPUTopology, available cpuset.CPUSet, n int) *accumulator {
	return &accumulator{
		topo:      topo,
		details:   topo.CPUDetails.KeepOnly(available),
		needed:    n,
		result:    cpuset.New(),
		numaFirst: topo.NumSockets >= topo.NumNUMANodes,
	}
}

// sortIDs orders ids by how many available CPUs each has (fewest first),
// then by ID.
func (a *accumulator) sortIDs(ids []int, cpus func(ids ...int) cpuset.CPUSet) {
	sort.Slice(ids, func(i, j int) bool {
		ci, cj := cpus(ids[i]).Size(), cpus(ids[j]).Size()
		if ci != cj {
			return ci < cj
		}
		return ids[i] < ids[j]
	})
}

func (a *accumulator) sortedNUMANodes() []int {
	if a.numaFirst {
		ids := a.details.NUMANodes().UnsortedList()
		a.sortIDs(ids, a.details.CPUsInNUMANodes)
		return ids
	}
	var out []int
	for _, s := range a.sortedSockets() {
		ids := a.details.NUMANodesInSockets(s).UnsortedList()
		a.sortIDs(ids, a.details.CPUsInNUMANodes)
		out = append(out, ids...)
	}
	return out
}

func (a *accumulator) sortedSockets() []int {
	if !a.numaFirst {
		ids := a.details.Sockets().UnsortedList()
		a.sortIDs(ids, a.details.CPUsInSockets)
		return ids
	}
	var out []int
	for _, n := range a.sortedNUMANodes() {
		ids := a.details.SocketsInNUMANodes(n).UnsortedList()
		a.sortIDs(ids, a.details.CPUsInSockets)
		out = append(out, ids...)
	}
	return out
}

func (a *accumulator) sortedCores() []int {
	var out []int
	if a.numaFirst {
		for _, s := range a.sortedSockets() {
			ids := a.details.CoresInSockets(s).UnsortedList()
			a.sortIDs(ids, a.details.CPUsInCores)
			out = append(out, ids...)
		}
		return out
	}
	for _, n := range a.sortedNUMANodes() {
		ids := a.details.CoresInNUMANodes(n).UnsortedList()
		a.sortIDs(ids, a.details.CPUsInCores)
		out = append(out, ids...)
	}
	return out
}

func (a *accumulator) sortedUncoreCaches() []int {
	var out []int
	for _, n := range a.sortedNUMANodes() {
		ids := a.details.UncoreInNUMANodes(n).UnsortedList()
		a.sortIDs(ids, a.details.CPUsInUncoreCaches)
		out = append(out, ids...)
	}
	return out
}

// sortedCPUs is the packed order: CPUs core by core, cores as sortedCores.
func (a *accumulator) sortedCPUs() []int {
	var out []int
	for _, c := range a.sortedCores() {
		out = append(out, a.details.CPUsInCores(c).List()...)
	}
	return out
}

func (a *accumulator) take(cpus cpuset.CPUSet) {
	a.result = a.result.Union(cpus)
	a.details = a.details.KeepOnly(a.details.CPUs().Difference(a.result))
	a.needed -= cpus.Size()
}

func (a *accumulator) satisfied() bool { return a.needed < 1 }

// takeFull takes every free unit (all its CPUs available) of size at
// most what is still needed.
func (a *accumulator) takeFull(ids []int, all, avail func(ids ...int) cpuset.CPUSet) {
	for _, id := range ids {
		cpus := all(id)
		if avail(id).Size() != cpus.Size() || a.needed < cpus.Size() {
			continue
		}
		a.take(cpus)
	}
}

func (a *accumulator) takeFullNUMANodes() {
	a.takeFull(a.sortedNUMANodes(), a.topo.CPUDetails.CPUsInNUMANodes, a.details.CPUsInNUMANodes)
}

func (a *accumulator) takeFullSockets() {
	a.takeFull(a.sortedSockets(), a.topo.CPUDetails.CPUsInSockets, a.details.CPUsInSockets)
}

func (a *accumulator) takeFullCores() {
	a.takeFull(a.sortedCores(), a.topo.CPUDetails.CPUsInCores, a.details.CPUsInCores)
}

// takeUncoreCache takes whole uncore caches, then the request within one
// uncore cache when it fits in one.
func (a *accumulator) takeUncoreCache() {
	perUncore := a.topo.CPUsPerUncore()
	for _, u := range a.sortedUncoreCaches() {
		if a.needed >= perUncore {
			a.takeFull(a.sortedUncoreCaches(), a.topo.CPUDetails.CPUsInUncoreCaches, a.details.CPUsInUncoreCaches)
		}
		if a.satisfied() {
			return
		}
		a.takePartialUncore(u)
		if a.satisfied() {
			return
		}
	}
}

func (a *accumulator) takePartialUncore(u int) {
	perCore := a.topo.CPUsPerCore()
	cores := a.details.CoresNeededInUncoreCache((a.needed+perCore-1)/perCore, u)
	free := a.details.CPUsInCores(cores.UnsortedList()...)
	if a.needed%2 != 0 && perCore > 1 {
		list := free.List()
		if len(list) > a.needed {
			list = list[:free.Size()-1]
		}
		free = cpuset.New(list...)
	}
	if a.needed == free.Size() {
		a.take(free)
	}
}

func (a *accumulator) takeRemainingCPUs() {
	for _, cpu := range a.sortedCPUs() {
		a.take(cpuset.New(cpu))
		if a.satisfied() {
			return
		}
	}
}

// takeByTopology picks n CPUs of available, packed (see accumulator).
func takeByTopology(topo *topology.CPUTopology, available cpuset.CPUSet, n int, preferUncore bool) (cpuset.CPUSet, error) {
	a := newAccumulator(topo, available, n)
	if a.satisfied() {
		return a.result, nil
	}
	if n > a.details.CPUs().Size() {
		return cpuset.New(), fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, available.Size())
	}
	steps := []func(){a.takeFullSockets, a.takeFullNUMANodes}
	if a.numaFirst {
		steps = []func(){a.takeFullNUMANodes, a.takeFullSockets}
	}
	if preferUncore {
		steps = append(steps, a.takeUncoreCache)
	}
	steps = append(steps, a.takeFullCores, a.takeRemainingCPUs)
	for _, step := range steps {
		step()
		if a.satisfied() {
			return a.result, nil
		}
	}
	return cpuset.New(), fmt.Errorf("failed to allocate cpus")
}
