package runtime

import (
	"github.com/prometheus/client_golang/prometheus"
)

// podMetrics are the kubelet's pod and container start metrics. A nil
// *podMetrics records nothing.
type podMetrics struct {
	startedPods             prometheus.Counter
	startedPodsErrors       prometheus.Counter
	startedContainers       *prometheus.CounterVec
	startedContainersErrors *prometheus.CounterVec
}

func newPodMetrics(reg prometheus.Registerer) (*podMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &podMetrics{
		startedPods: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "started_pods_total",
			Help: "Cumulative number of pods started",
		}),
		startedPodsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "started_pods_errors_total",
			Help: "Cumulative number of errors when starting pods",
		}),
		startedContainers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "started_containers_total",
			Help: "Cumulative number of containers started",
		}, []string{"container_type"}),
		startedContainersErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "started_containers_errors_total",
			Help: "Cumulative number of errors when starting containers",
		}, []string{"container_type", "code"}),
	}
	var err error
	if m.startedPods, err = register(reg, m.startedPods); err != nil {
		return nil, err
	}
	if m.startedPodsErrors, err = register(reg, m.startedPodsErrors); err != nil {
		return nil, err
	}
	if m.startedContainers, err = register(reg, m.startedContainers); err != nil {
		return nil, err
	}
	if m.startedContainersErrors, err = register(reg, m.startedContainersErrors); err != nil {
		return nil, err
	}
	return m, nil
}

// containerType maps the start kind to the kubelet's container_type label.
func containerType(kind string) string {
	switch kind {
	case "init container":
		return "init_container"
	case "ephemeral container":
		return "ephemeral_container"
	}
	return "container"
}

func (m *podMetrics) startedPod() {
	if m != nil {
		m.startedPods.Inc()
	}
}

func (m *podMetrics) startedPodError() {
	if m != nil {
		m.startedPodsErrors.Inc()
	}
}

func (m *podMetrics) startedContainer(kind string) {
	if m != nil {
		m.startedContainers.WithLabelValues(containerType(kind)).Inc()
	}
}

func (m *podMetrics) startedContainerError(kind, code string) {
	if m != nil {
		m.startedContainersErrors.WithLabelValues(containerType(kind), code).Inc()
	}
}
