package topology_test

import (
	"fmt"

	"github.com/nodekit/nodekit/resources/topology"
)

// The machine the agent runs on, as the resource managers see it.
func ExampleDiscover() {
	m, err := topology.Discover("/sys", "/proc")
	if err != nil {
		panic(err)
	}
	fmt.Println(m.CPU.NumCPUs > 0, len(m.NUMANodes) > 0)
	// Output: true true
}

// A machine of 2 sockets with 2 NUMA nodes each, 4 cores per node and 2
// threads per core, for tests and simulations.
func ExampleSynthetic() {
	m := topology.Synthetic(2, 2, 4, 2, 16<<30)
	fmt.Println(m.CPU.NumCPUs, m.CPU.NumCores, m.CPU.NumSockets, m.NUMANodeIDs())
	fmt.Println("NUMA node 1:", m.CPU.CPUDetails.CPUsInNUMANodes(1))
	// Output:
	// 32 16 2 [0 1 2 3]
	// NUMA node 1: 4-7,20-23
}
