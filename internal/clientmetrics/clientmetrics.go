// Package clientmetrics exports client-go's REST client metrics
// (rest_client_requests_total, rest_client_request_duration_seconds and
// the others component-base's restclient adapter defines, with the same
// names, help and labels) to Prometheus registries of the caller's choice.
//
// client-go reports its requests through process-global hooks
// (k8s.io/client-go/tools/metrics.Register, which takes effect once per
// process). Register installs this package's adapter there the first time
// it is called and adds the same collectors to every registry it is given:
// the series count the requests of every client-go client in the process,
// which for the usual one agent per process are the agent's own. When
// another adapter was installed first (a program that links component-base's
// restclient package), client-go reports to that one and Register says so.
package clientmetrics

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/metrics"
)

// Buckets as component-base's restclient adapter.
var (
	latencyBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}
	sizeBuckets    = []float64{64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216}
)

var (
	requestLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "[ALPHA] Request latency in seconds. Broken down by verb, and host.",
		Buckets: latencyBuckets,
	}, []string{"verb", "host"})
	rateLimiterLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_rate_limiter_duration_seconds",
		Help:    "[ALPHA] Client side rate limiter latency in seconds. Broken down by verb, and host.",
		Buckets: latencyBuckets,
	}, []string{"verb", "host"})
	requestSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_size_bytes",
		Help:    "[ALPHA] Request size in bytes. Broken down by verb and host.",
		Buckets: sizeBuckets,
	}, []string{"verb", "host"})
	responseSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_response_size_bytes",
		Help:    "[ALPHA] Response size in bytes. Broken down by verb and host.",
		Buckets: sizeBuckets,
	}, []string{"verb", "host"})
	requestResult = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
	requestRetry = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_request_retries_total",
		Help: "[ALPHA] Number of request retries, partitioned by status code, verb, and host.",
	}, []string{"code", "verb", "host"})

	collectors = []prometheus.Collector{requestLatency, rateLimiterLatency, requestSize, responseSize, requestResult, requestRetry}
)

var (
	install   sync.Once
	installed bool
	result    = resultAdapter{requestResult}
)

// Register makes client-go report to this package's collectors (once per
// process) and registers them with reg. Registering them twice with one
// registry is not an error. It returns ErrOtherAdapter, with the collectors
// registered all the same, when client-go already reports to another
// adapter, so the series stay empty.
func Register(reg prometheus.Registerer) error {
	install.Do(func() {
		metrics.Register(metrics.RegisterOpts{
			RequestLatency:     latencyAdapter{requestLatency},
			RateLimiterLatency: latencyAdapter{rateLimiterLatency},
			RequestSize:        sizeAdapter{requestSize},
			ResponseSize:       sizeAdapter{responseSize},
			RequestResult:      result,
			RequestRetry:       retryAdapter{requestRetry},
		})
		installed = metrics.RequestResult == metrics.ResultMetric(result)
	})
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) || are.ExistingCollector != c {
				return err
			}
		}
	}
	if !installed {
		return ErrOtherAdapter
	}
	return nil
}

// ErrOtherAdapter says client-go reports its metrics to an adapter another
// part of the program installed first.
var ErrOtherAdapter = errors.New("client-go's metrics go to an adapter installed earlier in this process; the rest_client_* series stay empty")

type latencyAdapter struct{ m *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	a.m.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type sizeAdapter struct{ m *prometheus.HistogramVec }

func (a sizeAdapter) Observe(_ context.Context, verb, host string, size float64) {
	a.m.WithLabelValues(verb, host).Observe(size)
}

type resultAdapter struct{ m *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.m.WithLabelValues(code, method, host).Inc()
}

type retryAdapter struct{ m *prometheus.CounterVec }

func (a retryAdapter) IncrementRetry(_ context.Context, code, method, host string) {
	a.m.WithLabelValues(code, method, host).Inc()
}
