package cgroupdriver

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// qosComputeResources are the resources that decide a pod's QoS class.
var qosComputeResources = [...]v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory}

// PodQOS returns the QoS class of pod the way the kubelet does: the class
// recorded in pod.Status.QOSClass when set, ComputePodQOS otherwise. pod is
// not modified.
func PodQOS(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return ComputePodQOS(pod)
}

// ComputePodQOS classifies pod from its spec, as the API server and the
// kubelet (1.37, PodLevelResources on) do:
//
//   - when pod-level resources (spec.resources) set cpu or memory, they alone
//     decide the class;
//   - otherwise every init and regular container is classified: BestEffort
//     when it sets no cpu or memory request or limit, Guaranteed when cpu and
//     memory both have a non-zero request equal to the limit, Burstable
//     otherwise; the pod is Burstable as soon as one container is, or when
//     containers disagree, and a pod without containers is BestEffort.
//
// pod is not modified.
func ComputePodQOS(pod *v1.Pod) v1.PodQOSClass {
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		return requirementsQOS(pod.Spec.Resources)
	}
	var class v1.PodQOSClass
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := requirementsQOS(&list[i].Resources)
			switch {
			case c == v1.PodQOSBurstable:
				return v1.PodQOSBurstable
			case class == "":
				class = c
			case class != c:
				return v1.PodQOSBurstable
			}
		}
	}
	if class == "" {
		return v1.PodQOSBestEffort
	}
	return class
}

// requirementsQOS classifies one set of requirements (a container's or the
// pod-level ones).
func requirementsQOS(r *v1.ResourceRequirements) v1.PodQOSClass {
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return v1.PodQOSBestEffort
	}
	var class v1.PodQOSClass
	for _, name := range qosComputeResources {
		req, lim := r.Requests[name], r.Limits[name]
		var c v1.PodQOSClass
		switch {
		case !req.Equal(lim):
			return v1.PodQOSBurstable
		case req.IsZero():
			c = v1.PodQOSBestEffort
		default:
			c = v1.PodQOSGuaranteed
		}
		if class == "" {
			class = c
		} else if class != c {
			return v1.PodQOSBurstable
		}
	}
	return class
}
