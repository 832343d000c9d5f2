package podresources

import "github.com/prometheus/client_golang/prometheus"

// The server_api_version label values.
const (
	versionV1       = "v1"
	versionV1alpha1 = "v1alpha1"
)

// metrics are the kubelet's pod resources API counters, by the kubelet's
// names, labels and help. The kubelet also registers
// kubelet_pod_resources_endpoint_errors_list and _errors_get_allocatable
// but never counts in them, so they never appear in its exposition.
type metrics struct {
	total, list, get, getAllocatable, getErrors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      name,
			Help:      "[ALPHA] " + help,
		}, []string{"server_api_version"})
	}
	m := &metrics{
		total:          counter("pod_resources_endpoint_requests_total", "Cumulative number of requests to the PodResource endpoint. Broken down by server api version."),
		list:           counter("pod_resources_endpoint_requests_list", "Number of requests to the PodResource List endpoint. Broken down by server api version."),
		get:            counter("pod_resources_endpoint_requests_get", "Number of requests to the PodResource Get endpoint. Broken down by server api version."),
		getAllocatable: counter("pod_resources_endpoint_requests_get_allocatable", "Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version."),
		getErrors:      counter("pod_resources_endpoint_errors_get", "Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version."),
	}
	if reg != nil {
		reg.MustRegister(m.total, m.list, m.get, m.getAllocatable, m.getErrors)
	}
	return m
}
