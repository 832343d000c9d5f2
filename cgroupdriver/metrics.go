package cgroupdriver

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Operation types, the operation_type label of the metrics.
const (
	opCreate  = "create"
	opUpdate  = "update"
	opDestroy = "destroy"
)

// metrics are the Manager's Prometheus metrics.
type metrics struct {
	// duration is the kubelet's kubelet_cgroup_manager_duration_seconds.
	duration *prometheus.HistogramVec
	// errors counts failed operations; the kubelet has no such metric, the
	// name sits next to the duration so dashboards find both.
	errors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet",
			Name:      "cgroup_manager_duration_seconds",
			Help:      "Duration in seconds for cgroup manager operations. Broken down by method.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"operation_type"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "cgroup_manager_errors_total",
			Help:      "Number of failed cgroup manager operations. Broken down by method.",
		}, []string{"operation_type"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.duration, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register cgroup manager metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one operation that started at start and ended with err.
func (m *metrics) observe(op string, start time.Time, end time.Time, err error) {
	m.duration.WithLabelValues(op).Observe(end.Sub(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}
