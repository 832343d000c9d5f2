package eviction

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// PodStatsFunc returns a pod's stats from the summary being acted on; ok is
// false when the summary has none for the pod. The returned stats belong to
// the summary and must not be modified.
type PodStatsFunc func(pod *v1.Pod) (stats *statsapi.PodStats, ok bool)

// RankFunc orders pods in place for eviction, the first to evict first. It
// is called from the manager's loop only.
type RankFunc func(pods []*v1.Pod, stats PodStatsFunc)

// UsageFunc measures a pod's use of a resource and its request for it, in
// the resource's unit, from the pod's stats.
type UsageFunc func(pod *v1.Pod, stats *statsapi.PodStats) (used, requested int64)

// RankByUsage ranks pods the way the kubelet ranks them under memory and
// disk pressure: pods without stats first, then pods using more than they
// requested, then lower priority, then the larger use above the request.
// Pods that tie keep their order.
func RankByUsage(usage UsageFunc) RankFunc {
	return rankByUsage(func(pod *v1.Pod, s *statsapi.PodStats) (int64, int64, int64) {
		used, req := usage(pod, s)
		return used, req, req
	})
}

// usageKey measures a pod: its use, the request its use "exceeds", and the
// request its use "above request" is counted from (the kubelet compares
// inodes with an inode request but subtracts the ephemeral-storage request).
type usageKey func(pod *v1.Pod, s *statsapi.PodStats) (used, exceedReq, aboveReq int64)

type rankKey struct {
	pod      *v1.Pod
	noStats  bool
	exceeds  bool
	priority int32
	above    int64
}

func rankByUsage(usage usageKey) RankFunc {
	return func(pods []*v1.Pod, stats PodStatsFunc) {
		keys := make([]rankKey, len(pods))
		for i, pod := range pods {
			k := rankKey{pod: pod, priority: corev1helpers.PodPriority(pod)}
			if s, ok := stats(pod); ok {
				used, exceedReq, aboveReq := usage(pod, s)
				k.exceeds = used > exceedReq
				k.above = used - aboveReq
			} else {
				k.noStats = true
			}
			keys[i] = k
		}
		slices.SortStableFunc(keys, func(a, b rankKey) int {
			if c := cmpFirst(a.noStats, b.noStats); c != 0 {
				return c
			}
			if c := cmpFirst(a.exceeds, b.exceeds); c != 0 {
				return c
			}
			if c := cmp.Compare(a.priority, b.priority); c != 0 {
				return c
			}
			return cmp.Compare(b.above, a.above)
		})
		for i := range keys {
			pods[i] = keys[i].pod
		}
	}
}

// cmpFirst orders true before false.
func cmpFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}

// rankPIDPressure is the kubelet's PID ranking: lower priority first, then
// pods without stats, then more processes.
func rankPIDPressure(pods []*v1.Pod, stats PodStatsFunc) {
	keys := make([]rankKey, len(pods))
	for i, pod := range pods {
		k := rankKey{pod: pod, priority: corev1helpers.PodPriority(pod)}
		if s, ok := stats(pod); ok {
			if s.ProcessStats != nil && s.ProcessStats.ProcessCount != nil {
				k.above = int64(*s.ProcessStats.ProcessCount)
			}
		} else {
			k.noStats = true
		}
		keys[i] = k
	}
	slices.SortStableFunc(keys, func(a, b rankKey) int {
		if c := cmp.Compare(a.priority, b.priority); c != 0 {
			return c
		}
		if c := cmpFirst(a.noStats, b.noStats); c != 0 {
			return c
		}
		return cmp.Compare(b.above, a.above)
	})
	for i := range keys {
		pods[i] = keys[i].pod
	}
}

// podRequest is the pod's request for name as the kubelet's eviction
// ranking counts it (GetResourceRequestQuantity): pod-level requests
// instead of the containers' when pod-level resources are set, and the
// pod overhead added when the request is not zero.
func podRequest(pod *v1.Pod, name v1.ResourceName) int64 {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		SkipContainerLevelResources: resourcehelper.IsPodLevelResourcesSet(pod),
		ExcludeOverhead:             true,
	})
	q := reqs[name]
	if o, ok := pod.Spec.Overhead[name]; ok && !q.IsZero() {
		q.Add(o)
	}
	return q.Value()
}

func memoryUsage(pod *v1.Pod, s *statsapi.PodStats) (used, exceedReq, aboveReq int64) {
	if s.Memory != nil && s.Memory.WorkingSetBytes != nil {
		used = int64(*s.Memory.WorkingSetBytes)
	}
	req := podRequest(pod, v1.ResourceMemory)
	return used, req, req
}

// fsUse says which of a pod's uses count toward a disk signal.
type fsUse struct {
	rootfs, logs, localVolumes bool
}

func fsUsed(fs *statsapi.FsStats, inodes bool) int64 {
	if fs == nil {
		return 0
	}
	if inodes {
		if fs.InodesUsed == nil {
			return 0
		}
		return int64(*fs.InodesUsed)
	}
	if fs.UsedBytes == nil {
		return 0
	}
	return int64(*fs.UsedBytes)
}

// podDiskUsage sums the pod's use of disk space (or inodes) that use
// counts: container writable layers, container logs, local volumes.
func podDiskUsage(pod *v1.Pod, s *statsapi.PodStats, use fsUse, inodes bool) int64 {
	var total int64
	for i := range s.Containers {
		c := &s.Containers[i]
		if use.rootfs {
			total += fsUsed(c.Rootfs, inodes)
		}
		if use.logs {
			total += fsUsed(c.Logs, inodes)
		}
	}
	if use.localVolumes {
		for i := range pod.Spec.Volumes {
			vol := &pod.Spec.Volumes[i]
			if !isLocalVolume(vol) {
				continue
			}
			for j := range s.VolumeStats {
				if s.VolumeStats[j].Name == vol.Name {
					total += fsUsed(&s.VolumeStats[j].FsStats, inodes)
					break
				}
			}
		}
	}
	return total
}

// isLocalVolume reports whether a volume consumes the node's local storage
// as the kubelet counts it: hostPath, gitRepo, configMap and disk-backed
// emptyDir.
func isLocalVolume(v *v1.Volume) bool {
	return v.HostPath != nil || v.GitRepo != nil || v.ConfigMap != nil ||
		(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault)
}

// rankDiskPressure ranks by the pod's use of disk space or inodes (res) on
// the filesystem use describes. As the kubelet, "exceeds its request"
// compares with the pod's request for res, while "use above request"
// subtracts its ephemeral-storage request, also for inodes.
func rankDiskPressure(use fsUse, res v1.ResourceName) RankFunc {
	inodes := res == ResourceInodes
	return rankByUsage(func(pod *v1.Pod, s *statsapi.PodStats) (int64, int64, int64) {
		used := podDiskUsage(pod, s, use, inodes)
		storageReq := podRequest(pod, v1.ResourceEphemeralStorage)
		exceedReq := storageReq
		if inodes {
			exceedReq = podRequest(pod, res)
		}
		return used, exceedReq, storageReq
	})
}
