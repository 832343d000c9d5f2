package stats_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/stats"
)

type fullSummary struct {
	s   *statsapi.Summary
	err error
}

func (f fullSummary) Summary(context.Context) (*statsapi.Summary, error) { return f.s, f.err }

// TestVolumeStatsCollector exports one series set per claim (the first
// pod's figures when two pods mount it), none for volumes without a claim
// and none for a figure the stats leave out.
func TestVolumeStatsCollector(t *testing.T) {
	claim := &statsapi.PVCReference{Name: "data", Namespace: "default"}
	vol := func(name string, pvc *statsapi.PVCReference, used uint64) statsapi.VolumeStats {
		return statsapi.VolumeStats{Name: name, PVCRef: pvc, FsStats: statsapi.FsStats{
			CapacityBytes: ptr(10 << 30), AvailableBytes: ptr(10<<30 - used), UsedBytes: ptr(used),
			Inodes: ptr(1000), InodesFree: ptr(990), InodesUsed: ptr(10),
		}}
	}
	noInodes := vol("cache", &statsapi.PVCReference{Name: "cache", Namespace: "batch"}, 5)
	noInodes.Inodes, noInodes.InodesFree, noInodes.InodesUsed = nil, nil, nil
	s := &statsapi.Summary{Pods: []statsapi.PodStats{
		{PodRef: statsapi.PodReference{Name: "a", Namespace: "default"}, VolumeStats: []statsapi.VolumeStats{vol("data", claim, 1<<30), vol("tmp", nil, 7)}},
		{PodRef: statsapi.PodReference{Name: "b", Namespace: "default"}, VolumeStats: []statsapi.VolumeStats{vol("data", claim, 2<<30)}},
		{PodRef: statsapi.PodReference{Name: "c", Namespace: "batch"}, VolumeStats: []statsapi.VolumeStats{noInodes}},
	}}
	const want = `
# HELP kubelet_volume_stats_available_bytes [ALPHA] Number of available bytes in the volume
# TYPE kubelet_volume_stats_available_bytes gauge
kubelet_volume_stats_available_bytes{namespace="batch",persistentvolumeclaim="cache"} 1.0737418235e+10
kubelet_volume_stats_available_bytes{namespace="default",persistentvolumeclaim="data"} 9.663676416e+09
# HELP kubelet_volume_stats_capacity_bytes [ALPHA] Capacity in bytes of the volume
# TYPE kubelet_volume_stats_capacity_bytes gauge
kubelet_volume_stats_capacity_bytes{namespace="batch",persistentvolumeclaim="cache"} 1.073741824e+10
kubelet_volume_stats_capacity_bytes{namespace="default",persistentvolumeclaim="data"} 1.073741824e+10
# HELP kubelet_volume_stats_inodes [ALPHA] Maximum number of inodes in the volume
# TYPE kubelet_volume_stats_inodes gauge
kubelet_volume_stats_inodes{namespace="default",persistentvolumeclaim="data"} 1000
# HELP kubelet_volume_stats_inodes_free [ALPHA] Number of free inodes in the volume
# TYPE kubelet_volume_stats_inodes_free gauge
kubelet_volume_stats_inodes_free{namespace="default",persistentvolumeclaim="data"} 990
# HELP kubelet_volume_stats_inodes_used [ALPHA] Number of used inodes in the volume
# TYPE kubelet_volume_stats_inodes_used gauge
kubelet_volume_stats_inodes_used{namespace="default",persistentvolumeclaim="data"} 10
# HELP kubelet_volume_stats_used_bytes [ALPHA] Number of used bytes in the volume
# TYPE kubelet_volume_stats_used_bytes gauge
kubelet_volume_stats_used_bytes{namespace="batch",persistentvolumeclaim="cache"} 5
kubelet_volume_stats_used_bytes{namespace="default",persistentvolumeclaim="data"} 1.073741824e+09
`
	if err := testutil.CollectAndCompare(stats.VolumeStatsCollector(fullSummary{s: s}, logr.Discard()), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(stats.VolumeStatsCollector(fullSummary{err: errors.New("runtime down")}, logr.Discard())); n != 0 {
		t.Errorf("%d series when the summary fails, want 0", n)
	}
}
