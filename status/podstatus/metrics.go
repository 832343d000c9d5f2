package podstatus

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

// Metric names: the kubelet's where it has one.
const (
	metricSyncDuration = "kubelet_pod_status_sync_duration_seconds"
	metricTerminated   = "kubelet_terminated_containers_total"
	metricPatches      = "nodekit_pod_status_patches_total"
	metricDeletions    = "nodekit_pod_deletions_total"
	metricStart        = "nodekit_pod_start_internal_duration_seconds"
	metricStartPatch   = "nodekit_pod_start_status_patch_duration_seconds"
	metricStartPhase   = "nodekit_pod_start_status_patch_phase_duration_seconds"
)

// StartLatencyBuckets are the buckets (seconds) of nodekit's pod start
// histograms. From 1 ms to 10 s there are 13 a decade, each bound at most
// 25 % above the one before (1, 1.2, 1.5, 1.8, 2, 2.5, 3, 3.6, 4, 5, 6, 7,
// 8 ms, and on), so a quantile interpolated within its bucket is within a
// quarter of the samples it stands for: the kubelet's pod start
// buckets begin at half a second, and a 0.3–0.5 s bucket made the p99 of
// many a slow burst read ~0.5 s whatever the pods took. Above 10 s (a
// loaded runtime's bursts): 15, 20, 30 and 60 s.
var StartLatencyBuckets = startLatencyBuckets()

// decade are the bounds within a decade, times ten.
var decade = [...]int{10, 12, 15, 18, 20, 25, 30, 36, 40, 50, 60, 70, 80}

func startLatencyBuckets() []float64 {
	b := make([]float64, 0, 4*len(decade)+5)
	// From the 1 ms decade (10/1e4 s) to the 1 s one; a division by a
	// power of ten rounds to the float nearest each decimal, so the
	// exposition reads le="0.0011", not a product's rounding error.
	for div := 1e4; div >= 10; div /= 10 {
		for _, m := range decade {
			b = append(b, float64(m)/div)
		}
	}
	return append(b, 10, 15, 20, 30, 60)
}

// Results of a status write or pod deletion.
const (
	resultPatched   = "patched"
	resultUnchanged = "unchanged"
	resultFailed    = "failed"
	resultDeleted   = "deleted"
)

// metrics holds the Manager's collectors; they always exist and are
// registered only when a Registerer is given.
type metrics struct {
	syncDuration prometheus.Histogram
	terminated   *prometheus.CounterVec
	patches      *prometheus.CounterVec
	deletions    *prometheus.CounterVec
	start        prometheus.Histogram
	startPatch   prometheus.Histogram
	// startPhase's children are made at the first traced start: an
	// agent that starts no pod over HTTP (a fleet's, most tests') pays
	// for none of their buckets.
	startPhase *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricSyncDuration,
			Help:    "Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
			Buckets: []float64{0.010, 0.050, 0.100, 0.500, 1, 5, 10, 20, 30, 45, 60},
		}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricTerminated,
			Help: "Cumulative number of container terminations.",
		}, []string{"container_type", "exit_code", "reason"}),
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPatches,
			Help: "Pod status writes by result: patched (a PATCH of the status subresource), unchanged (the API server already had the status, no PATCH), failed (the GET or PATCH failed; retried).",
		}, []string{"result"}),
		deletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricDeletions,
			Help: "Deletions (grace period 0) of finished pods' API objects by result: deleted or failed (retried).",
		}, []string{"result"}),
		start: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricStart,
			Help:    "Duration in seconds from the agent first seeing a pod that had not started to the agent sending the first status write (PATCH) that shows all its containers started, for writes the API server accepted: the agent's internal share of the pod's start, image pulls included, the API server's time not (see " + metricStartPatch + ").",
			Buckets: StartLatencyBuckets,
		}),
		startPatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricStartPatch,
			Help:    "Duration in seconds of the status write (PATCH) that ended " + metricStart + ", from the agent sending it to the API server's answer on the agent's clock: the API server's handling and the client's side of the request (its rate limiter, the connection, waiting for a core), apart from the agent's internal share.",
			Buckets: StartLatencyBuckets,
		}),
		startPhase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricStartPhase,
			Help:    "The status write (PATCH) of " + metricStartPatch + " on the agent's clock, by phase: connection (sent → a connection obtained: the client's rate limiter, the connection pool), write (→ request written: a stream on the shared HTTP/2 connection, headers, body, flow control), answer (→ the answer's first byte as the connection's read loop took it: the network, the API server, the read loop), read (→ answered: the body, decoding, the writer waking). Recorded when the client is HTTP and every phase was reached.",
			Buckets: StartLatencyBuckets,
		}, []string{"phase"}),
	}
	for _, r := range []string{resultPatched, resultUnchanged, resultFailed} {
		m.patches.WithLabelValues(r)
	}
	for _, r := range []string{resultDeleted, resultFailed} {
		m.deletions.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{m.syncDuration, m.terminated, m.patches, m.deletions, m.start, m.startPatch, m.startPhase}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("podstatus: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) patch(result string)    { m.patches.WithLabelValues(result).Inc() }
func (m *metrics) deletion(result string) { m.deletions.WithLabelValues(result).Inc() }
func (m *metrics) synced(d time.Duration) { m.syncDuration.Observe(d.Seconds()) }
func (m *metrics) started(internal, patch time.Duration) {
	m.start.Observe(internal.Seconds())
	m.startPatch.Observe(patch.Seconds())
}

// startPhases records the phases (patchPhases' order) of a start's PATCH.
func (m *metrics) startPhases(d [len(patchPhases)]time.Duration) {
	for i, phase := range patchPhases {
		m.startPhase.WithLabelValues(phase).Observe(d[i].Seconds())
	}
}

// countTerminations counts the containers status shows terminated that old
// did not.
func (m *metrics) countTerminations(old, status *v1.PodStatus) {
	count := func(olds, news []v1.ContainerStatus, kind string) {
		for _, n := range news {
			if n.State.Terminated == nil {
				continue
			}
			if o := findStatus(olds, n.Name); o != nil && o.State.Terminated != nil {
				continue
			}
			m.terminated.WithLabelValues(kind, exitCodeLabel(n.State.Terminated.ExitCode), n.State.Terminated.Reason).Inc()
		}
	}
	count(old.InitContainerStatuses, status.InitContainerStatuses, "init_container")
	count(old.ContainerStatuses, status.ContainerStatuses, "container")
	count(old.EphemeralContainerStatuses, status.EphemeralContainerStatuses, "ephemeral_container")
}
