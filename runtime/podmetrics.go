package runtime

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodekit/nodekit/status/podstatus"
)

// podMetrics are the kubelet's pod and container start metrics. A nil
// *podMetrics records nothing.
type podMetrics struct {
	startedPods             prometheus.Counter
	startedPodsErrors       prometheus.Counter
	startedContainers       *prometheus.CounterVec
	startedContainersErrors *prometheus.CounterVec
	startedUserNSPods       prometheus.Counter
	startedUserNSPodsErrors prometheus.Counter
	imageVolumesRequested   prometheus.Counter
	imageVolumesMounted     prometheus.Counter
	imageVolumeMountErrors  prometheus.Counter
	// startTurnWait is nodekit's own: how long syncs waited for a turn to
	// create and start (PodManagerOptions.MaxParallelPodStarts).
	startTurnWait prometheus.Histogram
}

// metricStartTurnWait is the histogram of the time pod syncs waited for a
// start turn, one observation per turn taken (a pod pulling an image takes
// its turn again after the pull).
const metricStartTurnWait = "nodekit_pod_start_turn_wait_seconds"

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
		startedUserNSPods: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "started_user_namespaced_pods_total",
			Help: "Cumulative number of pods with user namespaces started. This metric will only be collected on Linux.",
		}),
		startedUserNSPodsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "started_user_namespaced_pods_errors_total",
			Help: "Cumulative number of errors when starting pods with user namespaces. This metric will only be collected on Linux.",
		}),
		imageVolumesRequested: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "image_volume_requested_total",
			Help: "Number of requested image volumes.",
		}),
		imageVolumesMounted: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "image_volume_mounted_succeed_total",
			Help: "Number of successful image volume mounts.",
		}),
		imageVolumeMountErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "image_volume_mounted_errors_total",
			Help: "Number of failed image volume mounts.",
		}),
		startTurnWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricStartTurnWait,
			Help: "Time a pod sync waited for a turn to create its sandbox and start its containers (--max-parallel-pod-starts), one observation per turn taken.",
			// Most turns are taken at once; a burst's last pods wait
			// hundreds of milliseconds to seconds, read to a quarter.
			Buckets: podstatus.StartLatencyBuckets,
		}),
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
	if m.startedUserNSPods, err = register(reg, m.startedUserNSPods); err != nil {
		return nil, err
	}
	if m.startedUserNSPodsErrors, err = register(reg, m.startedUserNSPodsErrors); err != nil {
		return nil, err
	}
	for _, c := range []*prometheus.Counter{&m.imageVolumesRequested, &m.imageVolumesMounted, &m.imageVolumeMountErrors} {
		if *c, err = register(reg, *c); err != nil {
			return nil, err
		}
	}
	if m.startTurnWait, err = register(reg, m.startTurnWait); err != nil {
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

func (m *podMetrics) startedUserNamespacedPod() {
	if m != nil {
		m.startedUserNSPods.Inc()
	}
}

func (m *podMetrics) startedUserNamespacedPodError() {
	if m != nil {
		m.startedUserNSPodsErrors.Inc()
	}
}

// imageVolumeMounts counts, as the kubelet's incrementImageVolumeMetrics
// after a container's start, the image volumes it mounts: requested, and
// each mount failed when the runtime refused to create the container with
// ImageVolumeMountFailed, succeeded otherwise: volumes image volumes,
// mounted through mounts volumeMounts.
func (m *podMetrics) imageVolumeMounts(volumes, mounts int, failed bool) {
	if m == nil || volumes == 0 {
		return
	}
	m.imageVolumesRequested.Add(float64(volumes))
	if failed {
		m.imageVolumeMountErrors.Add(float64(mounts))
	} else {
		m.imageVolumesMounted.Add(float64(mounts))
	}
}
