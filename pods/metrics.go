package pods

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The operation_type values of kubelet_pod_worker_duration_seconds, as the
// kubelet's SyncPodType names them.
const (
	// OpCreate is a pod's first sync.
	OpCreate = "create"
	// OpUpdate is a sync after the pod's object changed.
	OpUpdate = "update"
	// OpSync is a resync, or a sync after a runtime or probe event.
	OpSync = "sync"
	// OpKill is a sync that stops the pod.
	OpKill = "kill"
)

// podStartBuckets are the kubelet's pod startup duration buckets (seconds).
var podStartBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

// controllerMetrics are the kubelet's pod lifecycle metrics. A nil
// *controllerMetrics records nothing.
type controllerMetrics struct {
	start  prometheus.Histogram
	worker *prometheus.HistogramVec
}

func newControllerMetrics(reg prometheus.Registerer) (*controllerMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &controllerMetrics{
		start: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_start_duration_seconds",
			Help:    "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
			Buckets: podStartBuckets,
		}),
		worker: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_worker_duration_seconds",
			Help:    "[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
			Buckets: prometheus.DefBuckets,
		}, []string{"operation_type"}),
	}
	for _, c := range []prometheus.Collector{m.start, m.worker} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register pod controller metrics: %w", err)
		}
	}
	return m, nil
}

func (m *controllerMetrics) observeStart(d time.Duration) {
	if m != nil {
		m.start.Observe(d.Seconds())
	}
}

func (m *controllerMetrics) observeWorker(op string, d time.Duration) {
	if m != nil {
		m.worker.WithLabelValues(op).Observe(d.Seconds())
	}
}
