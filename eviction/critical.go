package eviction

import (
	v1 "k8s.io/api/core/v1"
)

// SystemCriticalPriority is the priority from which a pod is critical: that
// of the system-cluster-critical class (2000000000);
// system-node-critical's is higher.
const SystemCriticalPriority int32 = 2_000_000_000

// The pod source annotations (podsource.ConfigSourceAnnotationKey and
// podsource.APIServerSource, not imported: modules do not depend on each
// other).
const (
	configSourceAnnotation = "kubernetes.io/config.source"
	apiServerSource        = "api"
)

// IsCriticalPod reports whether the kubelet treats pod as critical
// (kubelettypes.IsCriticalPod): a static pod (its kubernetes.io/config.source
// is not "api"), a mirror pod, or a pod whose priority is at least
// SystemCriticalPriority. Critical pods are never evicted and always
// admitted.
func IsCriticalPod(pod *v1.Pod) bool {
	if src, ok := pod.Annotations[configSourceAnnotation]; ok && src != apiServerSource {
		return true
	}
	if _, ok := pod.Annotations[v1.MirrorPodAnnotationKey]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority
}
