package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nodekit/nodekit/podstate"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// KillPod stops a pod: every container in running, in parallel, each with
// its grace period (gracePeriodOverride if set, else the pod's
// deletionGracePeriodSeconds, else terminationGracePeriodSeconds; never
// under MinimumGracePeriodSeconds) after running its preStop hook within
// that period, sidecars only after the regular containers (and later
// sidecars) have stopped; then every sandbox. pod may be nil for a pod the
// agent no longer knows (an orphan found at start): the grace periods and
// preStop hooks are then read from the containers' annotations. Sandboxes
// and stopped containers stay in the runtime, with their exit statuses,
// until RemovePod or GarbageCollect removes them. It blocks until all have
// stopped or ctx is done, and forgets the pod's waiting reasons.
func (m *PodManager) KillPod(ctx context.Context, pod *v1.Pod, running podstate.RunningPod, gracePeriodOverride *int64) error {
	m.forget(running.ID)
	if pod != nil {
		m.forget(pod.UID)
	}
	return m.killPod(ctx, pod, running, gracePeriodOverride)
}

func (m *PodManager) killPod(ctx context.Context, pod *v1.Pod, running podstate.RunningPod, gracePeriodOverride *int64) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(running.Namespace, running.Name), "podUID", running.ID)
	ctx = klog.NewContext(ctx, logger)
	var ordering *terminationOrdering
	if pod != nil {
		ordering = newTerminationOrdering(m, pod, running.Containers)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, c := range running.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.killContainer(ctx, pod, c.ID, c.Name, "", killReasonOther, gracePeriodOverride, ordering); err != nil {
				logger.Error(err, "Cannot kill container", "container", c.Name, "containerID", c.ID)
				mu.Lock()
				errs = append(errs, fmt.Errorf("%w: %v", podstate.ErrKillContainer, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, sb := range running.Sandboxes {
		if err := m.rs.StopPodSandbox(ctx, sb.ID); err != nil && status.Code(err) != codes.NotFound {
			logger.Error(err, "Cannot stop sandbox", "sandboxID", sb.ID)
			errs = append(errs, fmt.Errorf("%w: stop sandbox %s: %v", podstate.ErrKillPodSandbox, sb.ID, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kill pod %s/%s (%s): %w", running.Namespace, running.Name, running.ID, errors.Join(errs...))
	}
	return nil
}

// killContainer stops one container: Killing event, preStop hook within the
// grace period, then StopContainer with what is left of it (at least
// MinimumGracePeriodSeconds). A container that is already gone is not an
// error.
func (m *PodManager) killContainer(ctx context.Context, pod *v1.Pod, id, name, message string, reason killReason, gracePeriodOverride *int64, ordering *terminationOrdering) error {
	logger := klog.FromContext(ctx)
	if ordering != nil {
		defer ordering.terminated(name)
	}
	var spec *v1.Container
	if pod != nil {
		if spec = findContainer(pod, name); spec == nil {
			return fmt.Errorf("failed to get containerSpec %q (id=%q) in pod %q when killing container", name, id, podDesc(pod))
		}
	} else {
		var err error
		if pod, spec, err = m.restoreSpec(ctx, id); err != nil {
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return err
		}
	}
	grace := gracePeriod(pod, spec, reason)
	if message == "" {
		message = fmt.Sprintf("Stopping container %s", spec.Name)
	}
	m.recorder.Event(containerRef(pod, spec), v1.EventTypeNormal, "Killing", message)
	if gracePeriodOverride != nil {
		grace = *gracePeriodOverride
		logger.V(3).Info("Killing container with a grace period override", "container", name, "gracePeriod", grace)
	}
	if spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && grace > 0 {
		grace -= m.runPreStop(ctx, pod, spec, id, grace)
	}
	if ordering != nil && grace > 0 {
		grace -= ordering.waitForTurn(ctx, name, grace)
	}
	grace = max(grace, MinimumGracePeriodSeconds)
	logger.V(2).Info("Killing container with a grace period", "container", name, "containerID", id, "gracePeriod", grace)
	if err := m.rs.StopContainer(ctx, id, grace); err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("stop container %s (%s) with grace period %ds: %w", name, id, grace, err)
	}
	return nil
}

// gracePeriod is the kubelet's: the pod's deletion grace period, else its
// termination grace period (or the failing probe's own), else the minimum.
func gracePeriod(pod *v1.Pod, c *v1.Container, reason killReason) int64 {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		if reason == killReasonLiveness && c.LivenessProbe != nil && c.LivenessProbe.TerminationGracePeriodSeconds != nil {
			return *c.LivenessProbe.TerminationGracePeriodSeconds
		}
		if reason == killReasonStartup && c.StartupProbe != nil && c.StartupProbe.TerminationGracePeriodSeconds != nil {
			return *c.StartupProbe.TerminationGracePeriodSeconds
		}
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return MinimumGracePeriodSeconds
}

// restoreSpec rebuilds what killing a container needs from its labels and
// annotations, for a pod the agent no longer has.
func (m *PodManager) restoreSpec(ctx context.Context, id string) (*v1.Pod, *v1.Container, error) {
	resp, err := m.rs.ContainerStatus(ctx, id, false)
	if err != nil {
		return nil, nil, fmt.Errorf("read labels of container %s: %w", id, err)
	}
	rec := readRecorded(ctx, resp.GetStatus().GetLabels(), resp.GetStatus().GetAnnotations())
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = rec.podName, rec.podNamespace, rec.podUID
	pod.DeletionGracePeriodSeconds = rec.deletionGracePeriod
	pod.Spec.TerminationGracePeriodSeconds = rec.terminationGracePeriod
	c := &v1.Container{Name: rec.name, Ports: rec.ports, TerminationMessagePath: rec.terminationMessagePath}
	if rec.preStop != nil {
		c.Lifecycle = &v1.Lifecycle{PreStop: rec.preStop}
	}
	pod.Spec.Containers = []v1.Container{*c}
	return pod, &pod.Spec.Containers[0], nil
}

// runPreStop runs c's preStop hook for at most grace seconds and returns
// how many whole seconds it took.
func (m *PodManager) runPreStop(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, grace int64) int64 {
	logger := klog.FromContext(ctx)
	start := m.clock.Now()
	hookCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		podIP := func(ctx context.Context) (string, error) {
			st, err := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
			if err != nil {
				return "", err
			}
			if len(st.IPs) == 0 {
				return "", fmt.Errorf("pod %s has no IP", podDesc(pod))
			}
			return st.IPs[0], nil
		}
		if _, err := m.runHook(hookCtx, pod, c, id, c.Lifecycle.PreStop, podIP); err != nil {
			logger.Error(err, "PreStop hook failed", "container", c.Name, "containerID", id)
			m.recorder.Event(containerRef(pod, c), v1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed")
		}
	}()
	timer := m.clock.NewTimer(time.Duration(grace) * time.Second)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C():
		logger.V(2).Info("PreStop hook did not complete in the grace period", "container", c.Name, "gracePeriod", grace)
	case <-ctx.Done():
	}
	return int64(m.clock.Since(start).Seconds())
}

// terminationOrdering makes sidecars (restartable init containers) stop
// after the pod's regular containers and after the sidecars declared after
// them, as the kubelet does.
type terminationOrdering struct {
	m       *PodManager
	waitFor map[string][]chan struct{}
	done    map[string]chan struct{}
	once    map[string]*sync.Once
}

// newTerminationOrdering returns nil when pod has no sidecars.
func newTerminationOrdering(m *PodManager, pod *v1.Pod, running []podstate.RunningContainer) *terminationOrdering {
	hasSidecar := false
	for i := range pod.Spec.InitContainers {
		hasSidecar = hasSidecar || isSidecar(&pod.Spec.InitContainers[i])
	}
	if !hasSidecar {
		return nil
	}
	o := &terminationOrdering{m: m, waitFor: map[string][]chan struct{}{}, done: map[string]chan struct{}{}, once: map[string]*sync.Once{}}
	isRunning := map[string]bool{}
	for _, c := range running {
		isRunning[c.Name] = true
		if o.done[c.Name] == nil {
			o.done[c.Name] = make(chan struct{})
			o.once[c.Name] = &sync.Once{}
		}
	}
	var regular []chan struct{}
	for i := range pod.Spec.Containers {
		if ch := o.done[pod.Spec.Containers[i].Name]; ch != nil {
			regular = append(regular, ch)
		}
	}
	var later []chan struct{}
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		c := &pod.Spec.InitContainers[i]
		if !isSidecar(c) || !isRunning[c.Name] {
			continue
		}
		o.waitFor[c.Name] = append(append([]chan struct{}(nil), regular...), later...)
		later = append(later, o.done[c.Name])
	}
	return o
}

// waitForTurn blocks until the containers name must outlive have stopped,
// for at most grace seconds; it returns the whole seconds waited.
func (o *terminationOrdering) waitForTurn(ctx context.Context, name string, grace int64) int64 {
	deps := o.waitFor[name]
	if len(deps) == 0 {
		return 0
	}
	start := o.m.clock.Now()
	timer := o.m.clock.NewTimer(time.Duration(grace) * time.Second)
	defer timer.Stop()
	for _, ch := range deps {
		select {
		case <-ch:
		case <-timer.C():
			return int64(o.m.clock.Since(start).Seconds())
		case <-ctx.Done():
			return int64(o.m.clock.Since(start).Seconds())
		}
	}
	return int64(o.m.clock.Since(start).Seconds())
}

// terminated marks name as stopped (or given up on).
func (o *terminationOrdering) terminated(name string) {
	if once := o.once[name]; once != nil {
		once.Do(func() { close(o.done[name]) })
	}
}
