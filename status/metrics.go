package status

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names. The kubelet has no metric for its status patches; these
// follow its naming under the nodekit_ prefix.
const (
	// MetricPatches counts status PATCH requests sent, by reason.
	MetricPatches = "nodekit_node_status_patches_total"
	// MetricPatchBytes counts the bytes of the status PATCH bodies sent, by
	// reason.
	MetricPatchBytes = "nodekit_node_status_patch_bytes_total"
	// MetricPatchErrors counts status PATCH requests that failed.
	MetricPatchErrors = "nodekit_node_status_patch_errors_total"
	// MetricCycles counts status cycles (every UpdateFrequency), by result.
	MetricCycles = "nodekit_node_status_cycles_total"
)

// Values of the reason label of MetricPatches and MetricPatchBytes.
const (
	// PatchReasonChanged: the status changed.
	PatchReasonChanged = "changed"
	// PatchReasonReport: nothing changed, ReportFrequency elapsed.
	PatchReasonReport = "report"
	// PatchReasonReady: the node turned Ready during the fast startup loop.
	PatchReasonReady = "ready"
	// PatchReasonRegister: registration found the Node and reconciled it.
	PatchReasonRegister = "register"
)

// Values of the result label of MetricCycles.
const (
	CycleUnchanged = "unchanged" // computed, nothing to send
	CyclePatched   = "patched"   // a patch was sent and accepted
	CycleFailed    = "failed"    // every retry failed
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
			Name: MetricPatches,
			Help: "Node status PATCH requests sent, by reason (changed, report, ready, register).",
		}, []string{"reason"}),
		patchBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPatchBytes,
			Help: "Bytes of node status PATCH request bodies sent, by reason.",
		}, []string{"reason"}),
		patchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricPatchErrors,
			Help: "Node status PATCH requests that failed.",
		}),
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCycles,
			Help: "Node status cycles, by result (unchanged, patched, failed).",
		}, []string{"result"}),
	}
	for _, r := range []string{PatchReasonChanged, PatchReasonReport, PatchReasonReady, PatchReasonRegister} {
		m.patches.WithLabelValues(r)
		m.patchBytes.WithLabelValues(r)
	}
	for _, r := range []string{CycleUnchanged, CyclePatched, CycleFailed} {
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
