package agent

import (
	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/stats"
)

// VolumeStats measures the active pods' volumes in the background
// (stats.VolumeUsage, every volumeStatsAggPeriod) and gives the stats
// provider their usage (stats.VolumeStatsFunc): the summary's volume stats
// and the pods' ephemeral storage, and through them the eviction manager's
// emptyDir sizeLimit and ephemeral-storage limits. A negative
// volumeStatsAggPeriod turns it off, as in the kubelet. CRI includes it; a
// volume manager that measures its volumes itself replaces it by providing
// the stats.VolumeStatsFunc instead.
var VolumeStats = fx.Provide(provideVolumeStats)

func provideVolumeStats(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, cfg *Config, store *pods.Store, clk clock.Clock) (stats.VolumeStatsFunc, error) {
	period := cfg.Kubelet.VolumeStatsAggPeriod.Duration
	if period < 0 {
		return func(types.UID) (stats.PodVolumeStats, bool) { return stats.PodVolumeStats{}, false }, nil
	}
	u, err := stats.NewVolumeUsage(stats.VolumeUsageOptions{RootDir: cfg.RootDir, Pods: store.Active, Period: period, Clock: clk})
	if err != nil {
		return nil, err
	}
	runner.Hook(lc, sd, logger, "volumestats", u.Run)
	return u.PodVolumeStats, nil
}
