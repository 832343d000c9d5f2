// Package topology describes the machine's CPUs and NUMA nodes as the
// kubelet's CPU, memory and topology managers see them: each logical CPU's
// core, socket, NUMA node and uncore (last-level) cache, and each NUMA
// node's memory, huge pages and distances. Discover reads them from sysfs;
// tests build a Machine by hand (SMT, several sockets and NUMA nodes).
//
// A core's ID is the lowest logical CPU ID among its threads, as the
// kubelet's (cAdvisor's core_id is not unique across sockets).
package topology

import (
	"fmt"

	"k8s.io/utils/cpuset"
)

// CPUInfo places one logical CPU.
type CPUInfo struct {
	NUMANodeID    int
	SocketID      int
	CoreID        int
	UncoreCacheID int
}

// CPUDetails maps logical CPU IDs to their placement. Its methods return
// the IDs of the CPUs (or cores, sockets...) it holds that match.
type CPUDetails map[int]CPUInfo

// CPUTopology is the machine's CPU topology, as the kubelet's.
type CPUTopology struct {
	NumCPUs        int
	NumCores       int
	NumUncoreCache int
	NumSockets     int
	NumNUMANodes   int
	CPUDetails     CPUDetails
}

// NewCPUTopology returns the topology of the CPUs in details, counting its
// cores, sockets, NUMA nodes and uncore caches.
func NewCPUTopology(details CPUDetails) *CPUTopology {
	return &CPUTopology{
		NumCPUs:        len(details),
		NumCores:       details.Cores().Size(),
		NumUncoreCache: details.UncoreCaches().Size(),
		NumSockets:     details.Sockets().Size(),
		NumNUMANodes:   details.NUMANodes().Size(),
		CPUDetails:     details,
	}
}

// CPUsPerCore is the number of hardware threads per core (0 without cores).
func (t *CPUTopology) CPUsPerCore() int {
	if t.NumCores == 0 {
		return 0
	}
	return t.NumCPUs / t.NumCores
}

// CPUsPerSocket is the number of logical CPUs per socket.
func (t *CPUTopology) CPUsPerSocket() int {
	if t.NumSockets == 0 {
		return 0
	}
	return t.NumCPUs / t.NumSockets
}

// CPUsPerUncore is the number of logical CPUs per uncore cache.
func (t *CPUTopology) CPUsPerUncore() int {
	if t.NumUncoreCache == 0 {
		return 0
	}
	return t.NumCPUs / t.NumUncoreCache
}

// CPUCoreID returns the core of cpu.
func (t *CPUTopology) CPUCoreID(cpu int) (int, error) {
	info, ok := t.CPUDetails[cpu]
	if !ok {
		return -1, fmt.Errorf("unknown CPU ID: %d", cpu)
	}
	return info.CoreID, nil
}

// CPUNUMANodeID returns the NUMA node of cpu.
func (t *CPUTopology) CPUNUMANodeID(cpu int) (int, error) {
	info, ok := t.CPUDetails[cpu]
	if !ok {
		return -1, fmt.Errorf("unknown CPU ID: %d", cpu)
	}
	return info.NUMANodeID, nil
}

// KeepOnly returns the details of the CPUs in cpus only.
func (d CPUDetails) KeepOnly(cpus cpuset.CPUSet) CPUDetails {
	out := CPUDetails{}
	for cpu, info := range d {
		if cpus.Contains(cpu) {
			out[cpu] = info
		}
	}
	return out
}

// collect returns the set of key(info) over the CPUs whose info matches.
func (d CPUDetails) collect(match func(cpu int, info CPUInfo) bool, key func(cpu int, info CPUInfo) int) cpuset.CPUSet {
	var ids []int
	for cpu, info := range d {
		if match(cpu, info) {
			ids = append(ids, key(cpu, info))
		}
	}
	return cpuset.New(ids...)
}

func all(int, CPUInfo) bool         { return true }
func cpuID(cpu int, _ CPUInfo) int  { return cpu }
func coreID(_ int, i CPUInfo) int   { return i.CoreID }
func socketID(_ int, i CPUInfo) int { return i.SocketID }
func numaID(_ int, i CPUInfo) int   { return i.NUMANodeID }
func uncoreID(_ int, i CPUInfo) int { return i.UncoreCacheID }
func in(ids []int, id int) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// CPUs returns the logical CPUs.
func (d CPUDetails) CPUs() cpuset.CPUSet { return d.collect(all, cpuID) }

// Cores returns the cores.
func (d CPUDetails) Cores() cpuset.CPUSet { return d.collect(all, coreID) }

// Sockets returns the sockets.
func (d CPUDetails) Sockets() cpuset.CPUSet { return d.collect(all, socketID) }

// NUMANodes returns the NUMA nodes.
func (d CPUDetails) NUMANodes() cpuset.CPUSet { return d.collect(all, numaID) }

// UncoreCaches returns the uncore caches.
func (d CPUDetails) UncoreCaches() cpuset.CPUSet { return d.collect(all, uncoreID) }

// CPUsInCores returns the CPUs of the given cores.
func (d CPUDetails) CPUsInCores(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.CoreID) }, cpuID)
}

// CPUsInSockets returns the CPUs of the given sockets.
func (d CPUDetails) CPUsInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.SocketID) }, cpuID)
}

// CPUsInNUMANodes returns the CPUs of the given NUMA nodes.
func (d CPUDetails) CPUsInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.NUMANodeID) }, cpuID)
}

// CPUsInUncoreCaches returns the CPUs of the given uncore caches.
func (d CPUDetails) CPUsInUncoreCaches(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.UncoreCacheID) }, cpuID)
}

// CoresInSockets returns the cores of the given sockets.
func (d CPUDetails) CoresInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.SocketID) }, coreID)
}

// CoresInNUMANodes returns the cores of the given NUMA nodes.
func (d CPUDetails) CoresInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.NUMANodeID) }, coreID)
}

// SocketsInNUMANodes returns the sockets of the given NUMA nodes.
func (d CPUDetails) SocketsInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.NUMANodeID) }, socketID)
}

// NUMANodesInSockets returns the NUMA nodes of the given sockets.
func (d CPUDetails) NUMANodesInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.SocketID) }, numaID)
}

// UncoreInNUMANodes returns the uncore caches of the given NUMA nodes.
func (d CPUDetails) UncoreInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.NUMANodeID) }, uncoreID)
}

// CoresNeededInUncoreCache returns up to n cores (lowest IDs first) of the
// given uncore caches.
func (d CPUDetails) CoresNeededInUncoreCache(n int, ids ...int) cpuset.CPUSet {
	cores := d.collect(func(_ int, i CPUInfo) bool { return in(ids, i.UncoreCacheID) }, coreID)
	if cores.Size() <= n {
		return cores
	}
	return cpuset.New(cores.List()[:n]...)
}
