package cgroupdriver

import (
	v1 "k8s.io/api/core/v1"
)

// KubepodsLimits returns what the kubepods cgroup enforces
// (Options.NodeAllocatable), as the kubelet's
// enforceNodeAllocatableCgroups: the machine's capacity (its CPUs and
// memory) less every list of reserved (kubeReserved, systemReserved) when
// enforcePods ("pods" in enforceNodeAllocatable), each resource at least
// zero; the whole capacity otherwise. Unlike the node's allocatable it
// keeps the hard eviction thresholds: the pods may use that memory, and the
// eviction manager evicts before they reach the limit. Neither argument is
// modified.
func KubepodsLimits(capacity v1.ResourceList, enforcePods bool, reserved ...v1.ResourceList) v1.ResourceList {
	out := capacity.DeepCopy()
	if !enforcePods {
		return out
	}
	for name, q := range out {
		for _, r := range reserved {
			if v, ok := r[name]; ok {
				q.Sub(v)
			}
		}
		if q.Sign() < 0 {
			q.Set(0)
		}
		out[name] = q
	}
	return out
}
