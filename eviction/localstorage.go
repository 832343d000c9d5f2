package eviction

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// localStorageEviction evicts, with a 1 s grace period, every pod over a
// local storage limit: an emptyDir over its sizeLimit, the pod over the
// sum of its ephemeral-storage limits, or a container over its own. It
// returns the pods evicted.
func (m *Manager) localStorageEviction(ctx context.Context, pods []*v1.Pod, stats PodStatsFunc) []*v1.Pod {
	var evicted []*v1.Pod
	for _, pod := range pods {
		ps, ok := stats(pod)
		if !ok {
			continue
		}
		if m.emptyDirLimitEviction(ctx, ps, pod) || m.podEphemeralStorageLimitEviction(ctx, ps, pod) ||
			m.containerEphemeralStorageLimitEviction(ctx, ps, pod) {
			evicted = append(evicted, pod)
		}
	}
	return evicted
}

func (m *Manager) emptyDirLimitEviction(ctx context.Context, ps *statsapi.PodStats, pod *v1.Pod) bool {
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if vol.EmptyDir == nil || vol.EmptyDir.SizeLimit == nil || vol.EmptyDir.SizeLimit.Sign() != 1 {
			continue
		}
		used, ok := volumeUsed(ps, vol.Name)
		if !ok {
			continue
		}
		size := vol.EmptyDir.SizeLimit
		if resource.NewQuantity(used, resource.BinarySI).Cmp(*size) <= 0 {
			continue
		}
		msg := fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", vol.Name, size.String())
		if m.evictPod(ctx, pod, immediateGracePeriodSeconds, msg, nil, nil) {
			m.metrics.evictions.WithLabelValues(signalEmptyDirFsLimit).Inc()
			return true
		}
		return false
	}
	return false
}

func volumeUsed(ps *statsapi.PodStats, name string) (int64, bool) {
	for i := range ps.VolumeStats {
		if v := &ps.VolumeStats[i]; v.Name == name {
			if v.UsedBytes == nil {
				return 0, false
			}
			return int64(*v.UsedBytes), true
		}
	}
	return 0, false
}

// hasEphemeralStorageLimit is a cheap test before PodLimits: does any
// container limit ephemeral storage?
func hasEphemeralStorageLimit(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if _, ok := list[i].Resources.Limits[v1.ResourceEphemeralStorage]; ok {
				return true
			}
		}
	}
	return false
}

func (m *Manager) podEphemeralStorageLimitEviction(ctx context.Context, ps *statsapi.PodStats, pod *v1.Pod) bool {
	if !hasEphemeralStorageLimit(pod) {
		return false
	}
	limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	if !ok {
		return false
	}
	var used int64
	if ps.EphemeralStorage != nil && ps.EphemeralStorage.UsedBytes != nil {
		used = int64(*ps.EphemeralStorage.UsedBytes)
	}
	if resource.NewQuantity(used, resource.BinarySI).Cmp(limit) <= 0 {
		return false
	}
	msg := fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String())
	if m.evictPod(ctx, pod, immediateGracePeriodSeconds, msg, nil, nil) {
		m.metrics.evictions.WithLabelValues(signalEphemeralPodFsLimit).Inc()
		return true
	}
	return false
}

func (m *Manager) containerEphemeralStorageLimitEviction(ctx context.Context, ps *statsapi.PodStats, pod *v1.Pod) bool {
	if !hasEphemeralStorageLimit(pod) {
		return false
	}
	limitOf := func(name string) (resource.Quantity, bool) {
		for i := range pod.Spec.Containers {
			if c := &pod.Spec.Containers[i]; c.Name == name {
				q, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]
				return q, ok && q.Value() != 0
			}
		}
		// Sidecars (restartable init containers) count; other init
		// containers do not.
		for i := range pod.Spec.InitContainers {
			if c := &pod.Spec.InitContainers[i]; c.Name == name {
				if c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways {
					return resource.Quantity{}, false
				}
				q, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]
				return q, ok && q.Value() != 0
			}
		}
		return resource.Quantity{}, false
	}
	for i := range ps.Containers {
		cs := &ps.Containers[i]
		limit, ok := limitOf(cs.Name)
		if !ok {
			continue
		}
		used := fsUsed(cs.Logs, false)
		if !m.layout.DedicatedImageFs {
			used += fsUsed(cs.Rootfs, false)
		}
		if limit.Cmp(*resource.NewQuantity(used, resource.BinarySI)) >= 0 {
			continue
		}
		msg := fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", cs.Name, limit.String())
		if m.evictPod(ctx, pod, immediateGracePeriodSeconds, msg, nil, nil) {
			m.metrics.evictions.WithLabelValues(signalEphemeralContainerFsLimit).Inc()
			return true
		}
		return false
	}
	return false
}
