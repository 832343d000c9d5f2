package topology

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// NUMANode is one NUMA node's memory.
type NUMANode struct {
	// ID is the node's ID.
	ID int
	// MemoryBytes is the node's total memory (MemTotal).
	MemoryBytes uint64
	// HugePages is the number of huge pages by page size in bytes.
	HugePages map[uint64]uint64
	// Distances are the node's distances to every node, by node ID order
	// (the kernel's node<N>/distance).
	Distances []uint64
}

// Machine is the machine's CPU topology and NUMA nodes.
type Machine struct {
	CPU *CPUTopology
	// NUMANodes are sorted by ID; a machine without NUMA support in its
	// kernel is one node 0 holding all memory.
	NUMANodes []NUMANode
}

// NUMANodeIDs returns the NUMA nodes' IDs, sorted.
func (m *Machine) NUMANodeIDs() []int {
	ids := make([]int, len(m.NUMANodes))
	for i, n := range m.NUMANodes {
		ids[i] = n.ID
	}
	return ids
}

// Discover reads the machine's topology from sysfs (usually /sys) and, on
// a kernel without NUMA nodes in sysfs, its memory from procfs (usually
// /proc). Only online CPUs count.
func Discover(sysfs, procfs string) (*Machine, error) {
	cpuDir := filepath.Join(sysfs, "devices/system/cpu")
	online, err := readCPUSet(filepath.Join(cpuDir, "online"))
	if err != nil {
		return nil, fmt.Errorf("discover CPU topology: %w", err)
	}
	if online.Size() == 0 {
		return nil, errors.New("discover CPU topology: could not detect number of cpus")
	}
	details := CPUDetails{}
	for _, cpu := range online.List() {
		dir := filepath.Join(cpuDir, fmt.Sprintf("cpu%d", cpu))
		socket, err := readInt(filepath.Join(dir, "topology/physical_package_id"))
		if err != nil {
			return nil, fmt.Errorf("discover CPU topology: %w", err)
		}
		if socket < 0 {
			socket = 0
		}
		siblings, err := readCPUSet(filepath.Join(dir, "topology/thread_siblings_list"))
		if err != nil {
			return nil, fmt.Errorf("discover CPU topology: %w", err)
		}
		siblings = siblings.Intersection(online)
		core := cpu
		if siblings.Size() > 0 {
			core = siblings.List()[0]
		}
		details[cpu] = CPUInfo{
			NUMANodeID:    cpuNUMANode(dir),
			SocketID:      socket,
			CoreID:        core,
			UncoreCacheID: uncoreCache(dir, socket),
		}
	}
	m := &Machine{CPU: NewCPUTopology(details)}
	m.NUMANodes, err = numaNodes(sysfs, procfs)
	if err != nil {
		return nil, fmt.Errorf("discover NUMA nodes: %w", err)
	}
	return m, nil
}

// cpuNUMANode is the node<N> link in a CPU's sysfs directory (0 without).
func cpuNUMANode(dir string) int {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "node"); ok {
			if id, err := strconv.Atoi(n); err == nil {
				return id
			}
		}
	}
	return 0
}

// uncoreCache is the ID of the CPU's level 3 cache, or its socket when it
// has none, as cAdvisor and the kubelet.
func uncoreCache(dir string, socket int) int {
	idx, _ := filepath.Glob(filepath.Join(dir, "cache/index*"))
	for _, d := range idx {
		if level, err := readInt(filepath.Join(d, "level")); err != nil || level != 3 {
			continue
		}
		if id, err := readInt(filepath.Join(d, "id")); err == nil {
			return id
		}
	}
	return socket
}

func numaNodes(sysfs, procfs string) ([]NUMANode, error) {
	dirs, _ := filepath.Glob(filepath.Join(sysfs, "devices/system/node/node[0-9]*"))
	if len(dirs) == 0 {
		total, err := memTotal(filepath.Join(procfs, "meminfo"), "MemTotal:")
		if err != nil {
			return nil, err
		}
		return []NUMANode{{ID: 0, MemoryBytes: total, HugePages: hugePages(filepath.Join(sysfs, "kernel/mm/hugepages")), Distances: []uint64{10}}}, nil
	}
	var out []NUMANode
	for _, d := range dirs {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		total, err := memTotal(filepath.Join(d, "meminfo"), fmt.Sprintf("Node %d MemTotal:", id))
		if err != nil {
			return nil, err
		}
		n := NUMANode{ID: id, MemoryBytes: total, HugePages: hugePages(filepath.Join(d, "hugepages"))}
		if b, err := os.ReadFile(filepath.Join(d, "distance")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				v, err := strconv.ParseUint(f, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("node %d distance %q: %w", id, f, err)
				}
				n.Distances = append(n.Distances, v)
			}
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// memTotal reads the kB value of the line starting with prefix.
func memTotal(path, prefix string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		rest, ok := strings.CutPrefix(s.Text(), prefix)
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			break
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", path, s.Text(), err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("%s: no %q line", path, prefix)
}

// hugePages reads hugepages-<size>kB/nr_hugepages under dir.
func hugePages(dir string) map[uint64]uint64 {
	out := map[uint64]uint64{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		size, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(size, "kB"), 10, 64)
		if err != nil {
			continue
		}
		n, err := readInt(filepath.Join(dir, e.Name(), "nr_hugepages"))
		if err != nil || n < 0 {
			continue
		}
		out[kb*1024] = uint64(n)
	}
	return out
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func readCPUSet(path string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuset.New(), err
	}
	s, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return cpuset.New(), fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
