package volume

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pluginNameNotAvailable labels volumes without a plugin, the kubelet's.
const pluginNameNotAvailable = "N/A"

// Volume states of volume_manager_total_volumes, the kubelet's.
const (
	stateDesired = "desired_state_of_world"
	stateActual  = "actual_state_of_world"
)

// Storage operations of storage_operation_duration_seconds, the kubelet's.
const (
	opMount   = "volume_mount"
	opUnmount = "volume_unmount"
	opExpand  = "volume_fs_resize"
)

// metrics are the kubelet's volume manager and storage operation metrics.
// A nil *metrics records nothing.
type metrics struct {
	operations *prometheus.HistogramVec
}

var totalVolumesDesc = prometheus.NewDesc("volume_manager_total_volumes",
	"Number of volumes in Volume Manager", []string{"plugin_name", "state"}, nil)

// totalVolumes collects volume_manager_total_volumes from the manager's
// state at scrape time.
type totalVolumes struct{ m *Manager }

func (c totalVolumes) Describe(ch chan<- *prometheus.Desc) { ch <- totalVolumesDesc }

func (c totalVolumes) Collect(ch chan<- prometheus.Metric) {
	for state, byPlugin := range c.m.volumeCounts() {
		for plugin, n := range byPlugin {
			ch <- prometheus.MustNewConstMetric(totalVolumesDesc, prometheus.GaugeValue, float64(n), plugin, state)
		}
	}
}

// newMetrics registers the metrics of m with reg; nil reg means none.
func newMetrics(reg prometheus.Registerer, m *Manager) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	mt := &metrics{
		operations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "storage_operation_duration_seconds",
			Help:    "Storage operation duration",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600},
		}, []string{"volume_plugin", "operation_name", "status", "migrated"}),
	}
	if err := reg.Register(mt.operations); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		existing, ok := are.ExistingCollector.(*prometheus.HistogramVec)
		if !ok {
			return nil, err
		}
		mt.operations = existing
	}
	if err := reg.Register(totalVolumes{m}); err != nil {
		return nil, err
	}
	return mt, nil
}

// observe records one storage operation.
func (mt *metrics) observe(plugin, op string, err error, d time.Duration) {
	if mt == nil {
		return
	}
	status := "success"
	if err != nil {
		status = "fail-unknown"
	}
	mt.operations.WithLabelValues(plugin, op, status, "false").Observe(d.Seconds())
}
