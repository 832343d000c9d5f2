package runtime

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the kubelet's CRI operation metrics. A nil *metrics records
// nothing.
type metrics struct {
	operations      *prometheus.CounterVec
	errors          *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	sandboxDuration *prometheus.HistogramVec
	sandboxErrors   *prometheus.CounterVec
}

// newMetrics registers the metrics with reg; nil reg means no metrics. A
// collector that reg already holds (another Client on the same registry) is
// shared.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "runtime_operations_total",
			Help:      "Cumulative number of runtime operations by operation type.",
		}, []string{"operation_type"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "runtime_operations_errors_total",
			Help:      "Cumulative number of runtime operation errors by operation type.",
		}, []string{"operation_type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet",
			Name:      "runtime_operations_duration_seconds",
			Help:      "Duration in seconds of runtime operations. Broken down by operation type.",
			Buckets:   prometheus.ExponentialBuckets(.005, 2.5, 14),
		}, []string{"operation_type"}),
		sandboxDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet",
			Name:      "run_podsandbox_duration_seconds",
			Help:      "Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"runtime_handler"}),
		sandboxErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "run_podsandbox_errors_total",
			Help:      "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
		}, []string{"runtime_handler"}),
	}
	var err error
	if m.operations, err = register(reg, m.operations); err != nil {
		return nil, err
	}
	if m.errors, err = register(reg, m.errors); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.sandboxDuration, err = register(reg, m.sandboxDuration); err != nil {
		return nil, err
	}
	if m.sandboxErrors, err = register(reg, m.sandboxErrors); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c with reg, or returns the equal collector reg already
// holds.
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
	return c, fmt.Errorf("register CRI operation metrics: %w", err)
}

// record counts one CRI operation, its duration and whether it failed.
func (m *metrics) record(op string, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.operations.WithLabelValues(op).Inc()
	m.duration.WithLabelValues(op).Observe(took.Seconds())
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}

// recordSandbox records a RunPodSandbox call by runtime handler.
func (m *metrics) recordSandbox(handler string, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.sandboxDuration.WithLabelValues(handler).Observe(took.Seconds())
	if err != nil {
		m.sandboxErrors.WithLabelValues(handler).Inc()
	}
}
