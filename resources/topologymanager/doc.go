// Package topologymanager is the kubelet's topology manager
// (topologyManagerPolicy, topologyManagerScope,
// topologyManagerPolicyOptions): it aligns the resources the hint
// providers (the device, CPU and memory managers) give a pod on NUMA nodes.
//
// At admission (Admit) it asks every provider for the NUMA affinities each
// container (scope container) or the whole pod (scope pod) could be given,
// merges them as the kubelet does (the narrowest affinity every resource
// agrees on, preferred when all are), and:
//
//   - none: lets the providers allocate without hints;
//   - best-effort: admits with the best merge;
//   - restricted: rejects the pod with TopologyAffinityError unless the
//     merge is preferred;
//   - single-numa-node: the same, with only single-NUMA-node hints.
//
// The chosen affinity (GetAffinity) is what the providers' Allocate then
// follows. A provider's allocation error rejects the pod with the
// provider's reason (SMTAlignmentError) or UnexpectedAdmissionError. The
// options prefer-closest-numa-nodes and max-allowable-numa-nodes, GA in
// 1.37, are implemented; the kubelet's metrics
// (kubelet_topology_manager_admission_*,
// kubelet_container_aligned_compute_resources_*) are registered.
//
// The agent wires it in agent.ResourceManagers as the TopologyManager
// admit handler; an embedder adds a provider with AddHintProvider, or
// replaces the Manager with fx.Decorate of *topologymanager.Manager.
package topologymanager
