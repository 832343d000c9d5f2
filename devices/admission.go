package devices

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// NodeForAdmission returns the node the general predicates should fit pod
// on: node itself, or, when pod already holds devices (a running pod
// admitted again after an agent restart, its allocation read from the
// checkpoint), a copy whose allocatable of each device resource is at least
// the number of devices allocated on the node, as the kubelet's
// UpdatePluginResources: pods that run with their devices stay admitted
// while their plugin has not registered again (allocatable 0). node is not
// modified.
func (m *Manager) NodeForAdmission(pod *v1.Pod, node *v1.Node) *v1.Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	if node == nil || m.pods[string(pod.UID)] == nil {
		return node
	}
	out := node
	for res, devs := range m.allocated {
		need := int64(devs.Len())
		if q, ok := node.Status.Allocatable[v1.ResourceName(res)]; ok && q.Value() >= need {
			continue
		}
		if out == node {
			out = node.DeepCopy()
			if out.Status.Allocatable == nil {
				out.Status.Allocatable = v1.ResourceList{}
			}
		}
		out.Status.Allocatable[v1.ResourceName(res)] = *resource.NewQuantity(need, resource.DecimalSI)
	}
	return out
}
