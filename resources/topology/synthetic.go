package topology

// Synthetic returns a machine of the given shape, numbered as Linux numbers
// an x86 machine with SMT: the first thread of every core first (CPUs
// 0…cores-1, socket by socket, NUMA node by NUMA node), then the second
// thread of every core, and so on. Each NUMA node has one uncore cache and
// memoryPerNUMA bytes, and is at distance 10 from itself, 20 from a node
// of its socket and 32 from the others. It is for tests and simulations
// of machines other than the one the agent runs on.
func Synthetic(sockets, numaPerSocket, coresPerNUMA, threadsPerCore int, memoryPerNUMA uint64) *Machine {
	nodes := sockets * numaPerSocket
	cores := nodes * coresPerNUMA
	details := CPUDetails{}
	for t := 0; t < threadsPerCore; t++ {
		for c := 0; c < cores; c++ {
			node := c / coresPerNUMA
			details[t*cores+c] = CPUInfo{
				NUMANodeID:    node,
				SocketID:      node / numaPerSocket,
				CoreID:        c,
				UncoreCacheID: node,
			}
		}
	}
	m := &Machine{CPU: NewCPUTopology(details)}
	for n := 0; n < nodes; n++ {
		node := NUMANode{ID: n, MemoryBytes: memoryPerNUMA, HugePages: map[uint64]uint64{}}
		for o := 0; o < nodes; o++ {
			switch {
			case o == n:
				node.Distances = append(node.Distances, 10)
			case o/numaPerSocket == n/numaPerSocket:
				node.Distances = append(node.Distances, 20)
			default:
				node.Distances = append(node.Distances, 32)
			}
		}
		m.NUMANodes = append(m.NUMANodes, node)
	}
	return m
}
