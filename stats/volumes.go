package stats

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/ticks"
)

// DefaultVolumeStatsPeriod is how often VolumeUsage measures each pod's
// volumes: the kubelet's volumeStatsAggPeriod default.
const DefaultVolumeStatsPeriod = time.Minute

// VolumeUsageOptions configure a VolumeUsage.
type VolumeUsageOptions struct {
	// RootDir is the agent's root directory; a pod's volumes are the
	// directories <RootDir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>,
	// as the kubelet lays them out. Default DefaultRootDir.
	RootDir string
	// Pods returns the pods whose volumes to measure: the node's active
	// pods. Required. It must not block; the pods are not modified.
	Pods func() []*v1.Pod
	// Period is how often the volumes are measured (KubeletConfiguration
	// volumeStatsAggPeriod). Default DefaultVolumeStatsPeriod.
	Period time.Duration
	// Clock paces the measurements and stamps them. Default
	// clock.RealClock{}.
	Clock clock.Clock
	// Align moves the measurements to the node's shared ticks (package
	// ticks; nil waits Period exactly).
	Align ticks.Align
	// Claims returns the pod's mounted claim-backed volumes
	// (persistentVolumeClaim and generic ephemeral volumes), measured
	// with the pod's other volumes and listed with their PVCRef, so the
	// summary and the kubelet_volume_stats_* metrics have them. nil: none
	// is measured. It must not block.
	Claims func(uid types.UID) []ClaimVolume
}

// ClaimVolume is a mounted claim-backed volume of a pod, measured as the
// kubelet's plugin measures it: by its driver (Measure), or with statfs of
// its mount (the local volume plugin's MetricsStatFS) when Measure is nil.
type ClaimVolume struct {
	// Name is the pod's volume name.
	Name string
	// PVC names the claim.
	PVC statsapi.PVCReference
	// Path is the volume's mount on the host.
	Path string
	// Measure, when set, returns the volume's figures from its driver;
	// false when the driver reports none.
	Measure func(ctx context.Context) (statsapi.FsStats, bool, error)
}

// VolumeUsage measures the disk use of the pods' volumes in the background,
// as the kubelet's volume stats calculator does for its summary: every
// Period it walks each volume directory of every active pod (du: allocated
// blocks, inodes) and statfs's its filesystem. emptyDir volumes on disk and
// configMap volumes are the pod's ephemeral volumes; the others it finds
// (emptyDir on memory, secret, downwardAPI, projected) are listed as the
// kubelet lists them, with the persistent ones. PodVolumeStats is a
// VolumeStatsFunc for Options.VolumeStats: the eviction manager reads the
// emptyDir usage from the summary to enforce sizeLimit. All methods are
// safe for concurrent use.
type VolumeUsage struct {
	opts VolumeUsageOptions

	mu    sync.RWMutex
	byPod map[types.UID]PodVolumeStats
}

// NewVolumeUsage returns a VolumeUsage for o with defaults applied. It does
// no I/O; Run measures.
func NewVolumeUsage(o VolumeUsageOptions) (*VolumeUsage, error) {
	if o.Pods == nil {
		return nil, errors.New("stats: VolumeUsageOptions.Pods is required")
	}
	if o.RootDir == "" {
		o.RootDir = DefaultRootDir
	}
	if o.Period <= 0 {
		o.Period = DefaultVolumeStatsPeriod
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &VolumeUsage{opts: o, byPod: map[types.UID]PodVolumeStats{}}, nil
}

// PodVolumeStats returns the last measurement of the pod's volumes; false
// before its first. The stats are never modified afterwards. It does not
// block on I/O.
func (u *VolumeUsage) PodVolumeStats(uid types.UID) (PodVolumeStats, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	s, ok := u.byPod[uid]
	return s, ok
}

// Run measures every Period until ctx is done, and returns nil then. It
// blocks.
func (u *VolumeUsage) Run(ctx context.Context) error {
	for {
		u.Measure(ctx)
		t := u.opts.Clock.NewTimer(u.opts.Align.Wait(u.opts.Period))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// Measure measures the volumes of the pods Pods returns now, and forgets
// the pods it no longer returns. It blocks for the walks.
func (u *VolumeUsage) Measure(ctx context.Context) {
	logger := klog.FromContext(ctx)
	pods := u.opts.Pods()
	measured := make(map[types.UID]PodVolumeStats, len(pods))
	for _, pod := range pods {
		if ctx.Err() != nil {
			return
		}
		s, ok := u.measurePod(logger, pod)
		if u.opts.Claims != nil {
			for _, c := range u.opts.Claims(pod.UID) {
				if vs, measuredClaim := u.measureClaim(ctx, logger, pod, c); measuredClaim {
					s.Persistent = append(s.Persistent, vs)
					ok = true
				}
			}
		}
		if ok {
			measured[pod.UID] = s
		}
	}
	u.mu.Lock()
	u.byPod = measured
	u.mu.Unlock()
}

// volumePluginDir is the directory name of the kubelet's plugin for v
// under <pod>/volumes, and whether the kubelet counts v as a local
// ephemeral volume (pkg/volume/util IsLocalEphemeralVolume); "" for the
// kinds nodekit does not set up.
func volumePluginDir(v *v1.Volume) (dir string, ephemeral bool) {
	switch {
	case v.EmptyDir != nil:
		return "kubernetes.io~empty-dir", v.EmptyDir.Medium == v1.StorageMediumDefault
	case v.ConfigMap != nil:
		return "kubernetes.io~configmap", true
	case v.Secret != nil:
		return "kubernetes.io~secret", false
	case v.DownwardAPI != nil:
		return "kubernetes.io~downward-api", false
	case v.Projected != nil:
		return "kubernetes.io~projected", false
	}
	return "", false
}

func (u *VolumeUsage) measurePod(logger klog.Logger, pod *v1.Pod) (PodVolumeStats, bool) {
	var out PodVolumeStats
	found := false
	podDir := filepath.Join(u.opts.RootDir, "pods", string(pod.UID), "volumes")
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		plugin, ephemeral := volumePluginDir(v)
		if plugin == "" {
			continue
		}
		dir := filepath.Join(podDir, plugin, v.Name)
		used, inodesUsed, err := treeUsage(dir)
		if err != nil {
			// Not set up yet, or torn down meanwhile.
			logger.V(5).Info("Cannot measure a pod volume", "pod", klog.KObj(pod), "volume", v.Name, "err", err)
			continue
		}
		fs, err := statfs(dir)
		if err != nil {
			logger.V(5).Info("Cannot statfs a pod volume", "pod", klog.KObj(pod), "volume", v.Name, "err", err)
			continue
		}
		vs := statsapi.VolumeStats{Name: v.Name, FsStats: statsapi.FsStats{
			Time:           metav1.NewTime(u.opts.Clock.Now()),
			AvailableBytes: u64(fs.available),
			CapacityBytes:  u64(fs.capacity),
			UsedBytes:      u64(used),
			Inodes:         u64(fs.inodes),
			InodesFree:     u64(fs.inodesFree),
			InodesUsed:     u64(inodesUsed),
		}}
		if ephemeral {
			out.Ephemeral = append(out.Ephemeral, vs)
		} else {
			out.Persistent = append(out.Persistent, vs)
		}
		found = true
	}
	return out, found
}

// measureClaim measures one claim-backed volume of pod.
func (u *VolumeUsage) measureClaim(ctx context.Context, logger klog.Logger, pod *v1.Pod, c ClaimVolume) (statsapi.VolumeStats, bool) {
	pvc := c.PVC
	vs := statsapi.VolumeStats{Name: c.Name, PVCRef: &pvc}
	if c.Measure != nil {
		fs, ok, err := c.Measure(ctx)
		if err != nil {
			logger.V(4).Info("Cannot measure a pod volume", "pod", klog.KObj(pod), "volume", c.Name, "err", err)
			return vs, false
		}
		if !ok {
			return vs, false
		}
		vs.FsStats = fs
		if vs.Time.IsZero() {
			vs.Time = metav1.NewTime(u.opts.Clock.Now())
		}
		return vs, true
	}
	fs, err := statfs(c.Path)
	if err != nil {
		logger.V(5).Info("Cannot statfs a pod volume", "pod", klog.KObj(pod), "volume", c.Name, "err", err)
		return vs, false
	}
	vs.FsStats = statsapi.FsStats{
		Time:           metav1.NewTime(u.opts.Clock.Now()),
		AvailableBytes: u64(fs.available),
		CapacityBytes:  u64(fs.capacity),
		UsedBytes:      u64(fs.used),
		Inodes:         u64(fs.inodes),
		InodesFree:     u64(fs.inodesFree),
		InodesUsed:     u64(fs.inodes - fs.inodesFree),
	}
	return vs, true
}
