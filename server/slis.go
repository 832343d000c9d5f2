package server

import (
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// sliMetrics are the healthcheck SLIs the kubelet serves on /metrics/slis
// (component-base's slis): the latest result of each /healthz check and
// the count of results, recorded by the /healthz handler.
type sliMetrics struct {
	reg     *prometheus.Registry
	last    *prometheus.GaugeVec
	results *prometheus.CounterVec
}

func newSLIMetrics() *sliMetrics {
	m := &sliMetrics{
		reg: prometheus.NewRegistry(),
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kubernetes", Name: "healthcheck",
			Help: "[STABLE] This metric records the result of a single healthcheck.",
		}, []string{"name", "type"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kubernetes", Name: "healthchecks_total",
			Help: "[STABLE] This metric records the results of all healthcheck.",
		}, []string{"name", "type", "status"}),
	}
	m.reg.MustRegister(m.last, m.results)
	return m
}

// observe records one check's result under the healthz endpoint typ.
func (m *sliMetrics) observe(name, typ string, err error) {
	if m == nil {
		return
	}
	v, status := 1.0, "success"
	if err != nil {
		v, status = 0, "error"
	}
	m.last.WithLabelValues(name, typ).Set(v)
	m.results.WithLabelValues(name, typ, status).Inc()
}

// handler serves the SLIs; DELETE resets them, as the kubelet's.
func (m *sliMetrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			m.last.Reset()
			m.results.Reset()
			_, _ = io.WriteString(w, "metrics reset\n")
			return
		}
		h.ServeHTTP(w, r)
	})
}
