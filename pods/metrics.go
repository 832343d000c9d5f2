package pods

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodekit/nodekit/status/podstatus"
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
	// Observed when the pod's watch shows all its containers started.
	sli, total *prometheus.HistogramVec
	agent      prometheus.Histogram
	restarted  *prometheus.CounterVec
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
		sli: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_start_sli_duration_seconds",
			Help:    "[ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			Buckets: podStartBuckets,
		}, []string{}),
		total: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_start_total_duration_seconds",
			Help:    "[ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			Buckets: podStartBuckets,
		}, []string{}),
		agent: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodekit_pod_start_agent_duration_seconds",
			Help:    "Duration in seconds from the agent first seeing a pod to its pod source showing all the pod's containers started (the status write and its watch round trip included), excluding image pulls: the agent's own share of a pod's start, the runtime's calls included. Finer buckets than kubelet_pod_start_duration_seconds.",
			Buckets: podstatus.StartLatencyBuckets,
		}),
		restarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "restarted_pods_total",
			Help: "[ALPHA] Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)",
		}, []string{"static"}),
	}
	for _, c := range []prometheus.Collector{m.start, m.worker, m.sli, m.total, m.agent, m.restarted} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register pod controller metrics: %w", err)
		}
	}
	// Both series exist from the start, as the kubelet's (it adds to both
	// every housekeeping round).
	m.restarted.WithLabelValues("true")
	m.restarted.WithLabelValues("")
	return m, nil
}

func (m *controllerMetrics) observeStart(d time.Duration) {
	if m != nil {
		m.start.Observe(d.Seconds())
	}
}

// observeStarted records a pod whose start the pod source just showed:
// total since its creation, sli less image pulls and init containers (only
// for a stateless pod), agent since the agent first saw it less image
// pulls.
func (m *controllerMetrics) observeStarted(total, sli, agent time.Duration, stateless bool) {
	if m == nil {
		return
	}
	m.total.WithLabelValues().Observe(total.Seconds())
	if stateless {
		m.sli.WithLabelValues().Observe(sli.Seconds())
	}
	m.agent.Observe(agent.Seconds())
}

func (m *controllerMetrics) observeWorker(op string, d time.Duration) {
	if m != nil {
		m.worker.WithLabelValues(op).Observe(d.Seconds())
	}
}

// observeRestart counts a pod started again with the same UID, with the
// kubelet's label values: static "true" for a static pod, "" otherwise.
func (m *controllerMetrics) observeRestart(static bool) {
	if m == nil {
		return
	}
	label := ""
	if static {
		label = "true"
	}
	m.restarted.WithLabelValues(label).Inc()
}
