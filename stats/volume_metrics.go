package stats

import (
	"context"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// SummarySource is what VolumeStatsCollector reads: *Provider implements
// it.
type SummarySource interface {
	Summary(ctx context.Context) (*statsapi.Summary, error)
}

// The kubelet's kubelet_volume_stats_* descriptors
// (pkg/kubelet/metrics/collectors/volume_stats.go).
var (
	pvcLabels                = []string{"namespace", "persistentvolumeclaim"}
	volumeCapacityBytesDesc  = prometheus.NewDesc("kubelet_volume_stats_capacity_bytes", "[ALPHA] Capacity in bytes of the volume", pvcLabels, nil)
	volumeAvailableBytesDesc = prometheus.NewDesc("kubelet_volume_stats_available_bytes", "[ALPHA] Number of available bytes in the volume", pvcLabels, nil)
	volumeUsedBytesDesc      = prometheus.NewDesc("kubelet_volume_stats_used_bytes", "[ALPHA] Number of used bytes in the volume", pvcLabels, nil)
	volumeInodesDesc         = prometheus.NewDesc("kubelet_volume_stats_inodes", "[ALPHA] Maximum number of inodes in the volume", pvcLabels, nil)
	volumeInodesFreeDesc     = prometheus.NewDesc("kubelet_volume_stats_inodes_free", "[ALPHA] Number of free inodes in the volume", pvcLabels, nil)
	volumeInodesUsedDesc     = prometheus.NewDesc("kubelet_volume_stats_inodes_used", "[ALPHA] Number of used inodes in the volume", pvcLabels, nil)
)

// VolumeStatsCollector returns the kubelet's collector of
// kubelet_volume_stats_{capacity,available,used}_bytes and
// kubelet_volume_stats_inodes{,_free,_used} for /metrics: one series per
// persistent volume claim (labels namespace, persistentvolumeclaim) that a
// pod's volume stats in src's Summary name (statsapi.VolumeStats.PVCRef),
// the first pod's figures when several pods mount one claim; a figure the
// stats leave nil is not exported. Volumes without a claim have no series,
// as in the kubelet. Each collection reads the Summary (the provider's
// cache, up to Options.MaxAge old), bounded by a one-minute timeout; on an
// error it exports nothing (logged at --v=2 on logger, the node's, which is
// also in the context src is called with). It is safe for concurrent use.
func VolumeStatsCollector(src SummarySource, logger logr.Logger) prometheus.Collector {
	return &volumeStatsCollector{src: src, logger: logger}
}

type volumeStatsCollector struct {
	src    SummarySource
	logger logr.Logger
}

func (c *volumeStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		volumeCapacityBytesDesc, volumeAvailableBytesDesc, volumeUsedBytesDesc,
		volumeInodesDesc, volumeInodesFreeDesc, volumeInodesUsedDesc,
	} {
		ch <- d
	}
}

func (c *volumeStatsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), c.logger), collectTimeout)
	defer cancel()
	s, err := c.src.Summary(ctx)
	if err != nil {
		c.logger.V(2).Info("No volume stats for /metrics", "err", err)
		return
	}
	seen := map[statsapi.PVCReference]bool{}
	for i := range s.Pods {
		for _, v := range s.Pods[i].VolumeStats {
			if v.PVCRef == nil || seen[*v.PVCRef] {
				continue
			}
			seen[*v.PVCRef] = true
			for _, g := range []struct {
				d *prometheus.Desc
				v *uint64
			}{
				{volumeCapacityBytesDesc, v.CapacityBytes}, {volumeAvailableBytesDesc, v.AvailableBytes},
				{volumeUsedBytesDesc, v.UsedBytes}, {volumeInodesDesc, v.Inodes},
				{volumeInodesFreeDesc, v.InodesFree}, {volumeInodesUsedDesc, v.InodesUsed},
			} {
				if g.v != nil {
					ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(*g.v), v.PVCRef.Namespace, v.PVCRef.Name)
				}
			}
		}
	}
}
