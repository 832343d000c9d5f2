// Package qos holds what the CPU and memory managers both ask of a pod:
// its QoS class and whether it sets pod-level resources.
package qos

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/cgroupdriver"
)

// Of returns the pod's QoS class: its status's, or computed from its spec
// when the status has none, as the kubelet's GetPodQOS.
func Of(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return cgroupdriver.ComputePodQOS(pod)
}

// PodLevelResources says whether the pod sets cpu or memory in
// spec.resources. The managers leave such pods alone, as the kubelet
// with PodLevelResourceManagers off (beta, off by default in 1.37).
func PodLevelResources(pod *v1.Pod) bool {
	r := pod.Spec.Resources
	if r == nil {
		return false
	}
	for _, l := range []v1.ResourceList{r.Requests, r.Limits} {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if _, ok := l[name]; ok {
				return true
			}
		}
	}
	return false
}
