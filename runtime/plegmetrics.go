package runtime

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodekit/nodekit/podstate"
)

// plegMetrics are the kubelet's PLEG metrics. A nil *plegMetrics records
// nothing.
type plegMetrics struct {
	relistDuration prometheus.Histogram
	relistInterval prometheus.Histogram
	discarded      prometheus.Counter
	streamErrors   prometheus.Counter
	streamConnects prometheus.Counter
	// runningPods and runningContainers are set from every full relist.
	runningPods       prometheus.Gauge
	runningContainers *prometheus.GaugeVec
}

func newPLEGMetrics(reg prometheus.Registerer, lastSeen func() float64) (*plegMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &plegMetrics{
		relistDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pleg_relist_duration_seconds",
			Help:    "Duration in seconds for relisting pods in PLEG.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		relistInterval: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pleg_relist_interval_seconds",
			Help:    "Interval in seconds between relisting in PLEG.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		discarded: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "pleg_discard_events",
			Help: "The number of discard events in PLEG.",
		}),
		streamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "evented_pleg_connection_error_count",
			Help: "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
		}),
		streamConnects: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "evented_pleg_connection_success_count",
			Help: "The number of times a streaming client was obtained to receive CRI Events.",
		}),
		runningPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "running_pods",
			Help: "[ALPHA] Number of pods that have a running pod sandbox",
		}),
		runningContainers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "running_containers",
			Help: "[ALPHA] Number of containers currently running",
		}, []string{"container_state"}),
	}
	var err error
	if m.relistDuration, err = register(reg, m.relistDuration); err != nil {
		return nil, err
	}
	if m.relistInterval, err = register(reg, m.relistInterval); err != nil {
		return nil, err
	}
	if m.discarded, err = register(reg, m.discarded); err != nil {
		return nil, err
	}
	if m.streamErrors, err = register(reg, m.streamErrors); err != nil {
		return nil, err
	}
	if m.streamConnects, err = register(reg, m.streamConnects); err != nil {
		return nil, err
	}
	if m.runningPods, err = register(reg, m.runningPods); err != nil {
		return nil, err
	}
	if m.runningContainers, err = register(reg, m.runningContainers); err != nil {
		return nil, err
	}
	lastSeenGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "pleg_last_seen_seconds",
		Help: "Timestamp in seconds when PLEG was last seen active.",
	}, lastSeen)
	if err := reg.Register(lastSeenGauge); err != nil {
		return nil, fmt.Errorf("register PLEG metrics: %w", err)
	}
	return m, nil
}

func (m *plegMetrics) observeDuration(d time.Duration) {
	if m != nil {
		m.relistDuration.Observe(d.Seconds())
	}
}

func (m *plegMetrics) observeInterval(d time.Duration) {
	if m != nil {
		m.relistInterval.Observe(d.Seconds())
	}
}

func (m *plegMetrics) discard() {
	if m != nil {
		m.discarded.Inc()
	}
}

func (m *plegMetrics) streamError() {
	if m != nil {
		m.streamErrors.Inc()
	}
}

func (m *plegMetrics) streamConnected() {
	if m != nil {
		m.streamConnects.Inc()
	}
}

// containerStates are the container_state values of
// kubelet_running_containers: every one is set at each relist, to 0 when
// no container is in it.
var containerStates = []podstate.ContainerState{
	podstate.ContainerStateCreated, podstate.ContainerStateRunning,
	podstate.ContainerStateExited, podstate.ContainerStateUnknown,
}

// observeRunning sets kubelet_running_pods (pods with a running sandbox)
// and kubelet_running_containers by state from a full relist, as the
// kubelet's PLEG does.
func (m *plegMetrics) observeRunning(pods []podstate.RunningPod) {
	if m == nil {
		return
	}
	running := 0
	states := make(map[podstate.ContainerState]int, len(containerStates))
	for i := range pods {
		for _, c := range pods[i].Containers {
			states[c.State]++
		}
		for _, sb := range pods[i].Sandboxes {
			if sb.State == podstate.ContainerStateRunning {
				running++
				break
			}
		}
	}
	m.runningPods.Set(float64(running))
	for _, st := range containerStates {
		m.runningContainers.WithLabelValues(string(st)).Set(float64(states[st]))
	}
}
