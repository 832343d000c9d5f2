package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/utils/cpuset"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeSysfs writes the sysfs of a machine with 2 sockets, one NUMA node
// each, 2 cores per socket and 2 threads per core: CPUs 0-3 are the first
// threads, 4-7 their siblings (CPU n and n+4 share a core).
func fakeSysfs(t *testing.T) string {
	root := t.TempDir()
	write(t, filepath.Join(root, "devices/system/cpu/online"), "0-7\n")
	for cpu := 0; cpu < 8; cpu++ {
		core := cpu % 4
		socket := core / 2
		dir := filepath.Join(root, fmt.Sprintf("devices/system/cpu/cpu%d", cpu))
		write(t, filepath.Join(dir, "topology/physical_package_id"), fmt.Sprintf("%d\n", socket))
		write(t, filepath.Join(dir, "topology/thread_siblings_list"), fmt.Sprintf("%d,%d\n", core, core+4))
		write(t, filepath.Join(dir, fmt.Sprintf("node%d/online", socket)), "1\n")
		write(t, filepath.Join(dir, "cache/index0/level"), "1\n")
		write(t, filepath.Join(dir, "cache/index0/id"), fmt.Sprintf("%d\n", core))
		write(t, filepath.Join(dir, "cache/index3/level"), "3\n")
		write(t, filepath.Join(dir, "cache/index3/id"), fmt.Sprintf("%d\n", 10+socket))
	}
	for n := 0; n < 2; n++ {
		dir := filepath.Join(root, fmt.Sprintf("devices/system/node/node%d", n))
		write(t, filepath.Join(dir, "meminfo"), fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree: 1 kB\n", n, 1024*(n+1), n))
		write(t, filepath.Join(dir, "distance"), map[int]string{0: "10 21\n", 1: "21 10\n"}[n])
		write(t, filepath.Join(dir, "hugepages/hugepages-2048kB/nr_hugepages"), "4\n")
	}
	return root
}

func TestDiscoverFakeSysfs(t *testing.T) {
	m, err := Discover(fakeSysfs(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := m.CPU
	if c.NumCPUs != 8 || c.NumCores != 4 || c.NumSockets != 2 || c.NumNUMANodes != 2 || c.NumUncoreCache != 2 {
		t.Fatalf("topology %+v", c)
	}
	if c.CPUsPerCore() != 2 || c.CPUsPerSocket() != 4 || c.CPUsPerUncore() != 4 {
		t.Fatalf("per core %d, per socket %d, per uncore %d", c.CPUsPerCore(), c.CPUsPerSocket(), c.CPUsPerUncore())
	}
	if got := c.CPUDetails[5]; got != (CPUInfo{NUMANodeID: 0, SocketID: 0, CoreID: 1, UncoreCacheID: 10}) {
		t.Errorf("CPU 5: %+v", got)
	}
	if got := c.CPUDetails.CPUsInNUMANodes(1); !got.Equals(cpuset.New(2, 3, 6, 7)) {
		t.Errorf("CPUs of NUMA node 1: %s", got)
	}
	if got := c.CPUDetails.CPUsInCores(2); !got.Equals(cpuset.New(2, 6)) {
		t.Errorf("CPUs of core 2: %s", got)
	}
	want := []NUMANode{
		{ID: 0, MemoryBytes: 1 << 20, HugePages: map[uint64]uint64{2 << 20: 4}, Distances: []uint64{10, 21}},
		{ID: 1, MemoryBytes: 2 << 20, HugePages: map[uint64]uint64{2 << 20: 4}, Distances: []uint64{21, 10}},
	}
	if !reflect.DeepEqual(m.NUMANodes, want) {
		t.Errorf("NUMA nodes %+v, want %+v", m.NUMANodes, want)
	}
}

// A kernel without NUMA in sysfs: one node 0 with the machine's memory.
func TestDiscoverWithoutNUMANodes(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	write(t, filepath.Join(root, "devices/system/cpu/online"), "0\n")
	write(t, filepath.Join(root, "devices/system/cpu/cpu0/topology/physical_package_id"), "-1\n")
	write(t, filepath.Join(root, "devices/system/cpu/cpu0/topology/thread_siblings_list"), "0\n")
	write(t, filepath.Join(proc, "meminfo"), "MemTotal:       2048 kB\n")
	m, err := Discover(root, proc)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.CPU.CPUDetails[0]; got != (CPUInfo{}) {
		t.Errorf("CPU 0: %+v", got)
	}
	if len(m.NUMANodes) != 1 || m.NUMANodes[0].MemoryBytes != 2<<20 {
		t.Errorf("NUMA nodes %+v", m.NUMANodes)
	}
}

// The machine the test runs on: every online CPU is placed.
func TestDiscoverHost(t *testing.T) {
	m, err := Discover("/sys", "/proc")
	if err != nil {
		t.Fatal(err)
	}
	if m.CPU.NumCPUs == 0 || m.CPU.NumCores == 0 || len(m.NUMANodes) == 0 || m.NUMANodes[0].MemoryBytes == 0 {
		t.Fatalf("machine %+v %+v", m.CPU, m.NUMANodes)
	}
}

func TestSynthetic(t *testing.T) {
	m := Synthetic(2, 2, 4, 2, 1<<30)
	c := m.CPU
	if c.NumCPUs != 32 || c.NumCores != 16 || c.NumSockets != 2 || c.NumNUMANodes != 4 || c.CPUsPerCore() != 2 {
		t.Fatalf("topology %+v", c)
	}
	if got := c.CPUDetails.CPUsInNUMANodes(1); !got.Equals(cpuset.New(4, 5, 6, 7, 20, 21, 22, 23)) {
		t.Errorf("CPUs of NUMA node 1: %s", got)
	}
	if got := m.NUMANodes[0].Distances; !reflect.DeepEqual(got, []uint64{10, 20, 32, 32}) {
		t.Errorf("distances of node 0: %v", got)
	}
	if got := c.CPUDetails.CoresNeededInUncoreCache(2, 3); !got.Equals(cpuset.New(12, 13)) {
		t.Errorf("2 cores of uncore cache 3: %s", got)
	}
}
