package status

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names. The kubelet has no metric for its status patches; these
// follow its naming under the nodekit_ prefix.
const (
	// metricPatches counts status PATCH requests sent, by reason.
	metricPatches = "nodekit_node_status_patches_total"
	// metricPatchBytes counts the bytes of the status PATCH bodies sent, by
	// reason.
	metricPatchBytes = "nodekit_node_status_patch_bytes_total"
	// metricPatchErrors counts status PATCH requests that failed.
	metricPatchErrors = "nodekit_node_status_patch_errors_total"
	// metricCycles counts status cycles (every UpdateFrequency), by result.
	metricCycles = "nodekit_node_status_cycles_total"
)

// Values of the reason label of metricPatches and metricPatchBytes.
const (
	// patchReasonChanged: the status changed.
	patchReasonChanged = "changed"
	// patchReasonReport: nothing changed, ReportFrequency elapsed.
	patchReasonReport = "report"
	// patchReasonReady: the node turned Ready during the fast startup loop.
	patchReasonReady = "ready"
	// patchReasonRegister: registration found the Node and reconciled it.
	patchReasonRegister = "register"
)

// Values of the result label of metricCycles.
const (
	cycleUnchanged = "unchanged" // computed, nothing to send
	cyclePatched   = "patched"   // a patch was sent and accepted
	cycleFailed    = "failed"    // every retry failed
)

type metrics struct {
	patches     *prometheus.CounterVec
	patchBytes  *prometheus.CounterVec
	patchErrors prometheus.Counter
	cycles      *prometheus.CounterVec
}

// newMetrics creates the reporter's metrics, every label value at zero, and
// registers them with reg unless it is nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPatches,
			Help: "Node status PATCH requests sent, by reason (changed, report, ready, register).",
		}, []string{"reason"}),
		patchBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPatchBytes,
			Help: "Bytes of node status PATCH request bodies sent, by reason.",
		}, []string{"reason"}),
		patchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPatchErrors,
			Help: "Node status PATCH requests that failed.",
		}),
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricCycles,
			Help: "Node status cycles, by result (unchanged, patched, failed).",
		}, []string{"result"}),
	}
	for _, r := range []string{patchReasonChanged, patchReasonReport, patchReasonReady, patchReasonRegister} {
		m.patches.WithLabelValues(r)
		m.patchBytes.WithLabelValues(r)
	}
	for _, r := range []string{cycleUnchanged, cyclePatched, cycleFailed} {
		m.cycles.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.patches, m.patchBytes, m.patchErrors, m.cycles} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register node status metrics: %w", err)
	}
	return m, nil
}
