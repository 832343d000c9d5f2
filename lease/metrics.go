package lease

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names. The kubelet has no lease metrics, so these are nodekit's own.
const (
	metricRenewals      = "nodekit_node_lease_renewals_total"
	metricFailures      = "nodekit_node_lease_renewal_failures_total"
	metricRenewDuration = "nodekit_node_lease_renew_duration_seconds"
	metricLastRenew     = "nodekit_node_lease_last_renew_timestamp_seconds"
)

// operation labels the API request that failed.
type operation int

const (
	opGet operation = iota
	opCreate
	opUpdate
	opGetNode
	numOperations
)

var operationNames = [numOperations]string{
	opGet:     "get",
	opCreate:  "create",
	opUpdate:  "update",
	opGetNode: "get_node",
}

// metrics holds the controller's collectors. They always exist, so the
// controller never checks for nil; they are registered only when a
// Registerer is given.
type metrics struct {
	renewals  prometheus.Counter
	failures  [numOperations]prometheus.Counter
	duration  prometheus.Histogram
	lastRenew prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricFailures,
		Help: "Failed API requests made to renew the node lease, by operation: get, create, update (the lease) and get_node (the Node, for the lease's owner reference).",
	}, []string{"operation"})
	m := &metrics{
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricRenewals,
			Help: "Successful writes (create or update) of the node lease.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricRenewDuration,
			Help:    "Time a renew cycle took until the node lease was written, including retries and back-off.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5ms .. ~41s, past the lease duration
		}),
		lastRenew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricLastRenew,
			Help: "Unix time of the node lease's last successful write (its spec.renewTime).",
		}),
	}
	for op, name := range operationNames {
		m.failures[op] = failures.WithLabelValues(name)
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{m.renewals, failures, m.duration, m.lastRenew}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("lease: register metrics: %w", err)
		}
	}
	return m, nil
}

// renewed records a successful write of the lease at now.
func (m *metrics) renewed(now time.Time) {
	m.renewals.Inc()
	m.lastRenew.Set(float64(now.UnixNano()) / 1e9)
}

// failed records one failed API request.
func (m *metrics) failed(op operation) { m.failures[op].Inc() }

// cycleDone records a renew cycle that ended with the lease written.
func (m *metrics) cycleDone(d time.Duration) { m.duration.Observe(d.Seconds()) }
