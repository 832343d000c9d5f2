package eviction

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, as the kubelet's (pkg/kubelet/metrics).
const (
	metricEvictions        = "kubelet_evictions"
	metricEvictionStatsAge = "kubelet_eviction_stats_age_seconds"
)

// Signals the kubelet reports in kubelet_evictions for evictions over local
// storage limits rather than node pressure.
const (
	signalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
	signalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	signalEmptyDirFsLimit           = "emptydirfs.limit"
)

// metrics holds the manager's collectors. They always exist; they are
// registered only when a Registerer is given.
type metrics struct {
	evictions *prometheus.CounterVec
	statsAge  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricEvictions,
			Help: "Cumulative number of pod evictions by eviction signal",
		}, []string{"eviction_signal"}),
		statsAge: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricEvictionStatsAge,
			Help:    "Time between when stats are collected, and when pod is evicted based on those stats by eviction signal",
			Buckets: prometheus.DefBuckets,
		}, []string{"eviction_signal"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m.evictions); err != nil {
		return nil, fmt.Errorf("eviction: register %s: %w", metricEvictions, err)
	}
	if err := reg.Register(m.statsAge); err != nil {
		reg.Unregister(m.evictions)
		return nil, fmt.Errorf("eviction: register %s: %w", metricEvictionStatsAge, err)
	}
	return m, nil
}
