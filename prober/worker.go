package prober

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/podstate"
)

// maxProbeRetries is how often a probe that errors is run in a row before
// the run is given up, as the kubelet's.
const maxProbeRetries = 3

// restartGracePeriod: a container that started this long before the
// Manager was created was running before the agent (re)started.
const restartGracePeriod = 10 * time.Second

func logger(ctx context.Context) klog.Logger {
	if ctx == nil {
		return klog.Background()
	}
	return klog.FromContext(ctx)
}

func podRef(w *worker) klog.ObjectRef { return klog.KRef(w.namespace, w.podName) }

// doProbe probes w's container once and records the result, step for step
// as the kubelet's worker.doProbe. It reports whether the worker should
// keep going.
func (m *Manager) doProbe(ctx context.Context, w *worker) bool {
	if ctx.Err() != nil {
		// Stopped, or the Manager is shutting down.
		return true
	}
	log := logger(ctx)
	start := time.Now()
	status, ok := m.podStatus(w.key.uid)
	if !ok {
		// Either the pod has not been created yet, or it was already
		// deleted.
		if v := log.V(3); v.Enabled() {
			v.Info("No status for pod", "pod", podRef(w))
		}
		return true
	}
	// The worker ends once the pod is terminal.
	if status.Phase == v1.PodFailed || status.Phase == v1.PodSucceeded {
		if v := log.V(3); v.Enabled() {
			v.Info("Pod is terminated, exiting probe worker", "pod", podRef(w), "phase", status.Phase)
		}
		return false
	}
	c, ok := containerStatus(status.ContainerStatuses, w.container.Name)
	if !ok || c.ContainerID == "" {
		c, ok = containerStatus(status.InitContainerStatuses, w.container.Name)
		if !ok || c.ContainerID == "" {
			// The container has not been created yet, or it was deleted.
			if v := log.V(3); v.Enabled() {
				v.Info("Probe target container not found", "pod", podRef(w), "containerName", w.container.Name)
			}
			return true
		}
	}
	pod := w.pod.Load()

	if w.fullID != c.ContainerID {
		if !m.results.switchContainer(w, c.ContainerID) {
			return true
		}
		// A container that ran before the agent started keeps the
		// result it had until the probe says otherwise, so a ready
		// container does not flap on an agent restart.
		restarted := c.State.Running != nil && !c.State.Running.StartedAt.IsZero() &&
			c.State.Running.StartedAt.Time.Before(m.start.Add(-restartGracePeriod))
		// A sidecar that had started before the agent restarted counts as
		// started, so the pod's initialization is not held up.
		if w.sidecar && w.probeType == Startup && c.Started != nil && *c.Started {
			m.setResult(w, podstate.ProbeSuccess)
		}
		if !restarted {
			m.setResult(w, w.initial)
		}
		// A new container: resume probing.
		w.onHold = false
	}
	if w.onHold {
		// On hold until there is a new container.
		return true
	}

	if c.State.Running == nil {
		if v := log.V(3); v.Enabled() {
			v.Info("Non-running container probed", "pod", podRef(w), "containerName", w.container.Name)
		}
		m.setResult(w, podstate.ProbeFailure)
		// Keep going only if the container will be restarted.
		if c.State.Terminated == nil {
			return true
		}
		return podstate.ContainerShouldRestart(&w.container, &pod.Spec, c.State.Terminated.ExitCode) ||
			podstate.ShouldAllContainersRestart(pod, nil, &status)
	}

	// Graceful shutdown of the pod.
	if pod.DeletionTimestamp != nil && (w.probeType == Liveness || w.probeType == Startup) {
		if v := log.V(3); v.Enabled() {
			v.Info("Pod deletion requested, setting probe result to success", "probeType", w.probeType,
				"pod", podRef(w), "containerName", w.container.Name)
		}
		if w.probeType == Startup {
			log.Info("Pod deletion requested before container has fully started", "pod", podRef(w),
				"containerName", w.container.Name)
		}
		// A last result for a quiet shutdown; the worker stops.
		m.setResult(w, podstate.ProbeSuccess)
		return false
	}

	// Probes are off for initialDelaySeconds.
	if int32(m.clock.Since(c.State.Running.StartedAt.Time).Seconds()) < w.spec.InitialDelaySeconds {
		return true
	}

	if c.Started != nil && *c.Started {
		// The startup probe idles once the container started; it stays
		// for the container's next instance.
		if w.probeType == Startup {
			return true
		}
	} else if w.probeType != Startup {
		// Only the startup probe runs until the container started.
		return true
	}

	// Exec probes do not see the pod's environment or the downward API.
	w.target.Pod = pod
	w.target.ContainerID = w.id
	w.target.PodIP = status.PodIP
	result, err := m.probe(ctx, w)
	w.target.Pod = nil
	if err != nil || ctx.Err() != nil {
		// A prober error, or a run cut short by a stop: the result is
		// thrown away.
		return true
	}

	switch result {
	case podstate.ProbeSuccess:
		m.metrics.observe(w, resultSuccessful, time.Since(start).Seconds())
	case podstate.ProbeFailure:
		m.metrics.observe(w, resultFailed, 0)
	default:
		m.metrics.observe(w, resultUnknown, time.Since(start).Seconds())
	}

	if w.lastResult == result {
		w.resultRun++
	} else {
		w.lastResult = result
		w.resultRun = 1
	}
	if (result == podstate.ProbeFailure && w.resultRun < int(w.spec.FailureThreshold)) ||
		(result == podstate.ProbeSuccess && w.resultRun < int(w.spec.SuccessThreshold)) {
		// Below the threshold: the cached result stays.
		return true
	}
	m.setResult(w, result)

	if (w.probeType == Liveness && result == podstate.ProbeFailure) || w.probeType == Startup {
		// The container is restarted after a liveness or startup failure:
		// no more probes until a new container appears (exec in a stopping
		// container is best avoided). A startup probe that crossed a
		// threshold has done its job for this container either way.
		w.onHold = true
		w.resultRun = 0
	}
	return true
}

// setResult caches r as w's verdict. Whether the loop hears of it is
// decided once the run is over (Manager.execute).
func (m *Manager) setResult(w *worker, r podstate.ProbeResult) {
	m.results.set(w, r)
}

// probe runs w's probe action, retrying errors, records the kubelet's
// events and maps the outcome to a verdict, as the kubelet's prober.probe.
// A non-nil error means the run is to be discarded.
func (m *Manager) probe(ctx context.Context, w *worker) (podstate.ProbeResult, error) {
	log := logger(ctx)
	var (
		result Result
		output string
		err    error
	)
	if !w.noted {
		w.noted = true
		if g := w.spec.HTTPGet; g != nil && g.Protocol != nil && *g.Protocol == v1.HTTPProtocolHTTP2 {
			log.Info("HTTP/2 cleartext probes (alpha H2CContainerProbe) are not supported; probing with HTTP/1.1 as a kubelet with the gate off",
				"pod", podRef(w), "containerName", w.container.Name, "probeType", w.probeType)
		}
		if g := w.spec.GRPC; g != nil && g.Mode != nil && *g.Mode == v1.GRPCProbeModeTLS {
			log.Info("TLS gRPC probes (alpha GRPCContainerProbeTLS) are not supported; probing without TLS as a kubelet with the gate off",
				"pod", podRef(w), "containerName", w.container.Name, "probeType", w.probeType)
		}
	}
	h := m.handlers[KindOf(w.spec)]
	if h == nil {
		result, err = Unknown, fmt.Errorf("missing probe handler for %s_%s(%s):%s", w.podName, w.namespace, w.key.uid, w.container.Name)
	} else {
		for range maxProbeRetries {
			result, output, err = h.Probe(ctx, &w.target)
			if err == nil || ctx.Err() != nil {
				break
			}
		}
	}
	if ctx.Err() != nil {
		return podstate.ProbeFailure, ctx.Err()
	}
	if err != nil {
		if v := log.V(1); v.Enabled() {
			v.Info("Probe errored", "probeType", w.probeType, "pod", podRef(w), "podUID", w.key.uid,
				"containerName", w.container.Name, "probeResult", result, "err", err)
		}
		m.event(w, v1.EventTypeWarning, "Unhealthy", "%s probe errored and resulted in %s state: %s", w.probeType, result, err)
		return podstate.ProbeFailure, err
	}
	switch result {
	case Success:
		if v := log.V(3); v.Enabled() {
			v.Info("Probe succeeded", "probeType", w.probeType, "pod", podRef(w), "podUID", w.key.uid,
				"containerName", w.container.Name)
		}
		return podstate.ProbeSuccess, nil
	case Warning:
		m.event(w, v1.EventTypeWarning, "ProbeWarning", "%s probe warning: %s", w.probeType, output)
		if v := log.V(3); v.Enabled() {
			v.Info("Probe succeeded with a warning", "probeType", w.probeType, "pod", podRef(w), "podUID", w.key.uid,
				"containerName", w.container.Name, "output", output)
		}
		return podstate.ProbeSuccess, nil
	case Failure:
		if v := log.V(1); v.Enabled() {
			v.Info("Probe failed", "probeType", w.probeType, "pod", podRef(w), "podUID", w.key.uid,
				"containerName", w.container.Name, "probeResult", result, "output", output)
		}
		m.event(w, v1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", w.probeType, output)
		return podstate.ProbeFailure, nil
	default:
		if v := log.V(1); v.Enabled() {
			v.Info("Probe unknown without error", "probeType", w.probeType, "pod", podRef(w), "podUID", w.key.uid,
				"containerName", w.container.Name, "probeResult", result)
		}
		return podstate.ProbeFailure, nil
	}
}

// event records an event on w's container.
func (m *Manager) event(w *worker, eventType, reason, format string, args ...any) {
	if m.recorder == nil {
		return
	}
	pod := w.pod.Load()
	path := "spec.containers{" + w.container.Name + "}"
	if w.isInit {
		path = "spec.initContainers{" + w.container.Name + "}"
	}
	ref := &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion, FieldPath: path}
	m.recorder.Eventf(ref, eventType, reason, format, args...)
}

// containerStatus returns the first status of the container name.
func containerStatus(statuses []v1.ContainerStatus, name string) (*v1.ContainerStatus, bool) {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i], true
		}
	}
	return nil, false
}
