package prober

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric label values of the result label, as the kubelet's.
const (
	resultSuccessful = "successful"
	resultFailed     = "failed"
	resultUnknown    = "unknown"
)

// metrics are the kubelet's prober metrics (pkg/kubelet/prober
// prober_manager.go), which it serves on /metrics/probes. Help texts carry
// the stability prefix component-base adds. A nil *metrics records nothing.
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "prober",
			Name:      "probe_total",
			Help:      "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober",
			Name:      "probe_duration_seconds",
			Help:      "[ALPHA] Duration in seconds for a probe response.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	var err error
	if m.total, err = register(reg, m.total); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c with reg, or returns the equal collector reg already
// holds (another Manager on the same registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register prober metrics: %w", err)
}

// workerMetrics are one worker's series, resolved on first use (a series
// appears once it has a sample, as with the kubelet) and deleted when the
// worker stops. Only the goroutine running the worker touches them.
type workerMetrics struct {
	total    [3]prometheus.Counter // successful, failed, unknown
	duration prometheus.Observer
}

// observe counts one probe run of w with result label res (one of the
// result* constants) and, unless it failed, its duration, as the kubelet's
// worker does.
func (m *metrics) observe(w *worker, res string, seconds float64) {
	if m == nil {
		return
	}
	i := 0
	switch res {
	case resultFailed:
		i = 1
	case resultUnknown:
		i = 2
	}
	c := w.metrics.total[i]
	if c == nil {
		c = m.total.WithLabelValues(w.probeType.String(), res, w.container.Name, w.podName, w.namespace, string(w.key.uid))
		w.metrics.total[i] = c
	}
	c.Inc()
	if res == resultFailed {
		return
	}
	o := w.metrics.duration
	if o == nil {
		o = m.duration.WithLabelValues(w.probeType.String(), w.container.Name, w.podName, w.namespace)
		w.metrics.duration = o
	}
	o.Observe(seconds)
}

// forget deletes w's series.
func (m *metrics) forget(w *worker) {
	if m == nil {
		return
	}
	for _, res := range []string{resultSuccessful, resultFailed, resultUnknown} {
		m.total.DeleteLabelValues(w.probeType.String(), res, w.container.Name, w.podName, w.namespace, string(w.key.uid))
	}
	m.duration.DeleteLabelValues(w.probeType.String(), w.container.Name, w.podName, w.namespace)
}
