package agent

import (
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/prober"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/status/podstatus"
)

// Probes runs the containers' liveness, readiness and startup probes
// (prober.Module) and wires the prober's *Manager into the node:
//
//   - the pod lifecycle loop takes it as its pods.Prober: it adds every pod
//     it syncs, stops liveness and startup probes before it kills a pod,
//     removes a stopped pod, cleans up from housekeeping, syncs a pod whose
//     results changed, and generates pod statuses from its readiness and
//     startup results (container ready and started, Ready and
//     ContainersReady conditions);
//   - the CRI backend takes it as its runtime.ProbeResults: a container whose
//     liveness or startup probe failed is killed (with the probe's
//     terminationGracePeriodSeconds when set) and restarted by policy;
//   - the probes read the pod statuses the loop generated, from the
//     *podstatus.Manager;
//   - exec probes run through the graph's prober.ExecRunner, else the CRI's
//     cri.RuntimeService (CRI provides one); without either, and without a
//     handler of kind exec added with prober.AsHandler, every exec
//     probe errors (an Unhealthy "probe errored" event, the result left as
//     it was), which the agent logs at start;
//   - the prober's metrics (prober_probe_total,
//     prober_probe_duration_seconds) go to a registry of their own, provided
//     as the prometheus.Registerer and prometheus.Gatherer named
//     prober.MetricsRegistererName ("probe_metrics"): the kubelet serves it
//     on /metrics/probes of its node API (with enableServer false, a
//     registry that keeps nothing, as the agent's main one without a
//     server).
//
// It is runtime-neutral: Core includes it. Replace a probe kind's handler by
// adding a prober.Handler of that kind with prober.AsHandler.
var Probes = fx.Options(
	fx.Provide(
		func(m *podstatus.Manager) prober.PodStatusFunc { return m.GetPodStatus },
		func(m *prober.Manager) pods.Prober { return m },
		func(m *prober.Manager) runtime.ProbeResults { return m },
		newProbeMetrics,
	),
	prober.Module,
	fx.Invoke(checkExecProbes),
)

// probeMetrics is the registry of the prober's metrics, kept apart from the
// agent's main one as the kubelet serves them apart, on /metrics/probes.
type probeMetrics struct {
	fx.Out

	Registerer prometheus.Registerer `name:"probe_metrics"`
	Gatherer   prometheus.Gatherer   `name:"probe_metrics"`
}

// newProbeMetrics is the prober's registry, which only the node API
// serves: without it (enableServer false), one that keeps nothing (see
// newRegistry).
func newProbeMetrics(cfg *Config) probeMetrics {
	if !cfg.ServerEnabled() {
		r, g := unread()
		return probeMetrics{Registerer: r, Gatherer: g}
	}
	reg := prometheus.NewRegistry()
	return probeMetrics{Registerer: reg, Gatherer: reg}
}

type execProbeParams struct {
	fx.In

	Exec     prober.ExecRunner  `optional:"true"`
	Runtime  cri.RuntimeService `optional:"true"`
	Handlers []prober.Handler   `group:"probe_handlers"`
	Logger   logr.Logger        `optional:"true"`
	// The prober is built with the same inputs; taking it orders this
	// check after it.
	Manager *prober.Manager
}

// checkExecProbes logs that exec probes cannot run when nothing in the
// graph runs commands in containers (a pod-level backend that brought no
// exec handler).
func checkExecProbes(p execProbeParams) {
	if p.Exec != nil || p.Runtime != nil {
		return
	}
	for _, h := range p.Handlers {
		if h != nil && h.Kind() == prober.KindExec {
			return
		}
	}
	logger := p.Logger
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	logger.Info("Exec probes are not supported on this node: the runtime runs no commands in containers; each exec probe run errors (Unhealthy event) and leaves its result unchanged",
		"handlerGroup", prober.HandlerGroup)
}
