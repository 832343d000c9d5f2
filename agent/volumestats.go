package agent

import (
	"context"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/ticks"
	"github.com/nodekit/nodekit/volume"
	"github.com/nodekit/nodekit/volume/csi"
)

// VolumeStats measures the active pods' volumes in the background
// (stats.VolumeUsage, every volumeStatsAggPeriod) and gives the stats
// provider their usage (stats.VolumeStatsFunc): the summary's volume stats
// and the pods' ephemeral storage, and through them the eviction manager's
// emptyDir sizeLimit and ephemeral-storage limits; the pods' mounted
// claims too (local PVs with statfs, CSI volumes with NodeGetVolumeStats),
// listed with their PVCRef, which the kubelet_volume_stats_* metrics come
// from. A negative
// volumeStatsAggPeriod turns it off, as in the kubelet. CRI includes it; a
// volume manager that measures its volumes itself replaces it by providing
// the stats.VolumeStatsFunc instead.
var VolumeStats = fx.Provide(provideVolumeStats)

type volumeStatsParams struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
	Logger     logr.Logger
	Config     *Config
	Store      *pods.Store
	Clock      clock.Clock
	Align      ticks.Align
	Volumes    *volume.Manager `optional:"true"`
	CSI        *csi.Plugin     `optional:"true"`
}

func provideVolumeStats(p volumeStatsParams) (stats.VolumeStatsFunc, error) {
	period := p.Config.Kubelet.VolumeStatsAggPeriod.Duration
	if period < 0 {
		return func(types.UID) (stats.PodVolumeStats, bool) { return stats.PodVolumeStats{}, false }, nil
	}
	o := stats.VolumeUsageOptions{RootDir: p.Config.RootDir, Pods: p.Store.Active, Period: period, Clock: p.Clock, Align: p.Align}
	if p.Volumes != nil {
		o.Claims = func(uid types.UID) []stats.ClaimVolume { return claimVolumes(p.Volumes, p.CSI, uid) }
	}
	u, err := stats.NewVolumeUsage(o)
	if err != nil {
		return nil, err
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "volumestats", u.Run)
	return u.PodVolumeStats, nil
}

// claimVolumes are the pod's mounted claim-backed volumes as the kubelet's
// plugins measure them: local PVs with statfs, CSI volumes by their driver;
// hostPath PVs are not measured (the kubelet's hostPath plugin has no
// metrics).
func claimVolumes(m *volume.Manager, csiPlugin *csi.Plugin, uid types.UID) []stats.ClaimVolume {
	var out []stats.ClaimVolume
	for _, v := range m.PodVolumes(uid) {
		if v.PVC == nil {
			continue
		}
		c := stats.ClaimVolume{Name: v.Name, PVC: statsapi.PVCReference{Name: v.PVC.Name, Namespace: v.PVC.Namespace}, Path: v.Mounted.Path}
		switch v.Plugin {
		case volume.PluginLocal:
		case csi.PluginName:
			if csiPlugin == nil {
				continue
			}
			path := v.Mounted.Path
			c.Measure = func(ctx context.Context) (statsapi.FsStats, bool, error) { return csiPlugin.VolumeStats(ctx, path) }
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}
