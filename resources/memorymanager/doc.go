// Package memorymanager is the kubelet's memory manager
// (memoryManagerPolicy, reservedMemory).
//
// With the Static policy, each container of a Guaranteed pod gets its
// memory and huge pages requests on NUMA nodes at admission: the affinity
// the topology manager chose (Manager is a topologymanager.HintProvider),
// else the narrowest nodes that hold them, extended when they do not; the
// nodes of an assignment that spans several become one group, only given
// out together afterwards. ApplyContainerConfig sets the container's CRI
// cpuset.mems to its nodes. reservedMemory must add up, type by type, to
// what node allocatable keeps back (kubeReserved + systemReserved + the
// hard eviction threshold), as the kubelet checks.
//
// The state (each NUMA node's free and reserved memory, each container's
// blocks) lives in <root-dir>/memory_manager_state in the kubelet's format
// (v3, with the v1 fields and checksum older kubelets read), so a
// kubelet→nodekit handover keeps it; the memory of pods no longer active
// goes back at the next admission. ContainerMemory and AllocatableMemory
// answer the pod resources API.
//
// The agent wires it in agent.ResourceManagers; an embedder replaces it
// with fx.Decorate of *memorymanager.Manager, or uses New alone.
package memorymanager
