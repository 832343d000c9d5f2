package runtime

import (
	"context"
	"fmt"
	"slices"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// killReason says why a running container is killed; it picks the grace
// period (a probe's own terminationGracePeriodSeconds for probe kills).
type killReason int

const (
	killReasonOther killReason = iota
	killReasonLiveness
	killReasonStartup
)

// containerToKill is a running container SyncPod stops.
type containerToKill struct {
	name    string
	spec    *v1.Container
	message string
	reason  killReason
}

// podActions is what SyncPod does to bring the runtime in line with a pod:
// the kubelet's computePodActions.
type podActions struct {
	// killPod stops every container and the sandbox(es).
	killPod bool
	// createSandbox creates a new sandbox, with attempt as its attempt
	// number; sandboxID is the current sandbox (the one to start containers
	// in, or the one being replaced).
	createSandbox bool
	sandboxID     string
	attempt       uint32
	// initToStart and containersToStart index pod.Spec.InitContainers and
	// pod.Spec.Containers, in start order.
	initToStart       []int
	containersToStart []int
	// ephemeralToStart index pod.Spec.EphemeralContainers: those never
	// started (they are never restarted).
	ephemeralToStart []int
	// containersToKill are keyed by container ID.
	containersToKill map[string]containerToKill
	// containersToUpdate are the running containers resized in place, by
	// resource (memory, then cpu), each list with the decreases first, as
	// the kubelet's computePodResizeAction orders them.
	containersToUpdate map[v1.ResourceName][]containerToUpdate
	// resizePod: the allocation changed what runs (a container is resized
	// in place or restarted for it), so the pod's cgroup follows it.
	resizePod bool
}

// containerToUpdate is a running container resized in place.
type containerToUpdate struct {
	id   string
	spec *v1.Container
	// desired are the allocated values, current those last actuated.
	desired, current podstate.ComputeResources
}

// resizeAction decides how running container c (status cs) of pod follows
// its allocated resources (c.Resources with the pod-level limits it does
// not set, the pod being the allocated pod), as
// the kubelet's computePodResizeAction: nothing when what was actuated
// (cs.Resources) matches; a restart when a changed resource's resizePolicy
// says RestartContainer (restart true: the caller kills and starts it);
// otherwise an in-place update queued in a.containersToUpdate for memory
// (the limit, else the request) and cpu (the limit, else the request),
// decreases before increases.
func (a *podActions) resizeAction(pod *v1.Pod, c *v1.Container, cs *podstate.ContainerStatus) (restart bool) {
	effective := podstate.EffectiveResources(pod.Spec.Resources, &c.Resources)
	if !podstate.ResizeNeeded(cs.Resources, effective) {
		return false
	}
	desired, current := podstate.ComputeResourcesOf(effective), podstate.ComputeResourcesOf(cs.Resources)
	a.resizePod = true
	policy := func(name v1.ResourceName, want, have int64) (resize, restart bool) {
		if want == have {
			return false, false
		}
		for _, p := range c.ResizePolicy {
			if p.ResourceName == name {
				return true, p.RestartPolicy == v1.RestartContainer
			}
		}
		return true, false // NotRequired is the default
	}
	memLim, restartMemLim := policy(v1.ResourceMemory, desired.MemoryLimit, current.MemoryLimit)
	memReq, restartMemReq := policy(v1.ResourceMemory, desired.MemoryRequest, current.MemoryRequest)
	cpuLim, restartCPULim := policy(v1.ResourceCPU, desired.CPULimit, current.CPULimit)
	cpuReq, restartCPUReq := policy(v1.ResourceCPU, desired.CPURequest, current.CPURequest)
	if restartMemLim || restartMemReq || restartCPULim || restartCPUReq {
		return true
	}
	if a.containersToUpdate == nil {
		a.containersToUpdate = map[v1.ResourceName][]containerToUpdate{}
	}
	u := containerToUpdate{id: cs.ID, spec: c, desired: desired, current: current}
	queue := func(name v1.ResourceName, want, have int64) {
		if want > have {
			a.containersToUpdate[name] = append(a.containersToUpdate[name], u)
		} else {
			a.containersToUpdate[name] = append([]containerToUpdate{u}, a.containersToUpdate[name]...)
		}
	}
	switch {
	case memLim:
		queue(v1.ResourceMemory, desired.MemoryLimit, current.MemoryLimit)
	case memReq:
		queue(v1.ResourceMemory, desired.MemoryRequest, current.MemoryRequest)
	}
	switch {
	case cpuLim:
		queue(v1.ResourceCPU, desired.CPULimit, current.CPULimit)
	case cpuReq:
		queue(v1.ResourceCPU, desired.CPURequest, current.CPURequest)
	}
	return false
}

// resizeRestartMessage is the kubelet's kill message of a container whose
// resize policy restarts it.
func resizeRestartMessage(c *v1.Container) string {
	return fmt.Sprintf("Container %s resize requires restart", c.Name)
}

// isSidecar reports whether c is a restartable init container.
func isSidecar(c *v1.Container) bool { return podstate.IsRestartableInitContainer(c) }

// sandboxChanged reports whether pod needs a new sandbox (see
// podstate.PodStatus.SandboxChange). It returns the attempt number for a
// new one and the current sandbox's ID, which is kept (its containers
// killed with it) unless the network mode changed.
func sandboxChanged(ctx context.Context, pod *v1.Pod, st *podstate.PodStatus) (bool, uint32, string) {
	change := st.SandboxChange(pod.Spec.HostNetwork)
	if change == podstate.NoSandbox {
		klog.FromContext(ctx).V(2).Info("No sandbox for pod can be found, need to start a new one", "pod", klog.KObj(pod))
		return true, 0, ""
	}
	newest := st.Sandboxes[0]
	switch change {
	case "":
		return false, newest.Attempt, newest.ID
	case podstate.SandboxNetworkChanged:
		klog.FromContext(ctx).V(2).Info("Pod sandbox needs to be replaced", "pod", klog.KObj(pod), "reason", string(change))
		return true, newest.Attempt + 1, ""
	default:
		klog.FromContext(ctx).V(2).Info("Pod sandbox needs to be replaced", "pod", klog.KObj(pod), "reason", string(change))
		return true, newest.Attempt + 1, newest.ID
	}
}

// activeContainer returns the newest status of container name in the
// current (newest, ready) sandbox, or nil.
func activeContainer(st *podstate.PodStatus, name string) *podstate.ContainerStatus {
	active := st.ActiveSandboxID()
	if active == "" {
		return nil
	}
	for _, c := range st.Containers {
		if c.Name == name && c.SandboxID == active {
			return c
		}
	}
	return nil
}

// shouldRestart reports whether a container that is not running must be
// (re)started: podstate.ShouldContainerBeRestarted on its newest instance.
func shouldRestart(pod *v1.Pod, c *v1.Container, st *podstate.PodStatus) bool {
	return podstate.ShouldContainerBeRestarted(pod, c, st.Container(c.Name))
}

func succeeded(c *v1.Container, st *podstate.PodStatus) bool {
	cs := st.Container(c.Name)
	return cs != nil && cs.State == podstate.ContainerStateExited && cs.ExitCode == 0
}

// probeVerdict returns probes' verdict, treating a nil ProbeResults as a
// node without probes.
func probeVerdict(probes ProbeResults, id string, startup bool) podstate.ProbeResult {
	if probes == nil {
		if startup {
			return podstate.ProbeSuccess
		}
		return podstate.ProbeUnknown
	}
	if startup {
		return probes.Startup(id)
	}
	return probes.Liveness(id)
}

// computePodActions decides what SyncPod does, with the kubelet's rules.
func computePodActions(ctx context.Context, pod *v1.Pod, st *podstate.PodStatus, probes ProbeResults) podActions {
	create, attempt, sandboxID := sandboxChanged(ctx, pod, st)
	a := podActions{
		killPod:          create,
		createSandbox:    create,
		sandboxID:        sandboxID,
		attempt:          attempt,
		containersToKill: map[string]containerToKill{},
	}
	if create {
		// A pod that must not restart and already ran keeps its final state
		// instead of getting a new sandbox. With no container status at
		// all, nothing ever ran: retry.
		if pod.Spec.RestartPolicy == v1.RestartPolicyNever && attempt != 0 && len(st.Containers) != 0 {
			a.createSandbox = false
			return a
		}
		var toStart []int
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			if podstate.RunsOnce(c, &pod.Spec) && succeeded(c, st) {
				continue
			}
			toStart = append(toStart, i)
		}
		if len(toStart) == 0 && anyRegularCreated(pod, st) {
			// Initialized and nothing left to run.
			a.createSandbox = false
			return a
		}
		if len(pod.Spec.InitContainers) != 0 {
			a.initToStart = []int{0}
			return a
		}
		a.containersToStart = toStart
		return a
	}

	// Ephemeral containers may start before the pod is initialized; one
	// that ran once (any status) is never started again.
	for i := range pod.Spec.EphemeralContainers {
		if st.Container(pod.Spec.EphemeralContainers[i].Name) == nil {
			a.ephemeralToStart = append(a.ephemeralToStart, i)
		}
	}

	if initialized := computeInitActions(pod, st, probes, &a); a.killPod || !initialized {
		if a.killPod {
			a.ephemeralToStart = nil
		}
		return a
	}

	keep := 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := st.Container(c.Name)
		if cs == nil || cs.State != podstate.ContainerStateRunning {
			if shouldRestart(pod, c, st) {
				a.containersToStart = append(a.containersToStart, i)
				if cs != nil && cs.State == podstate.ContainerStateUnknown {
					a.containersToKill[cs.ID] = containerToKill{name: c.Name, spec: c,
						message: fmt.Sprintf("Container is in %q state, try killing it before restart", cs.State)}
				}
			}
			continue
		}
		// A probe kill has no exit code for restart rules: the container's
		// restartPolicy, else the pod's, decides.
		restart := podstate.ContainerRestartsWithoutExitCode(c, &pod.Spec)
		var (
			message string
			reason  killReason
		)
		switch {
		case cs.Hash != HashContainer(c):
			message = fmt.Sprintf("Container %s definition changed", c.Name)
			restart = true // whatever the restart policy
		case c.LivenessProbe != nil && probeVerdict(probes, cs.ID, false) == podstate.ProbeFailure:
			message, reason = fmt.Sprintf("Container %s failed liveness probe", c.Name), killReasonLiveness
		case c.StartupProbe != nil && probes != nil && probes.Startup(cs.ID) == podstate.ProbeFailure:
			message, reason = fmt.Sprintf("Container %s failed startup probe", c.Name), killReasonStartup
		case a.resizeAction(pod, c, cs):
			// Restarted for its resize policy, whatever the restart policy.
			keep++
			a.containersToStart = append(a.containersToStart, i)
			a.containersToKill[cs.ID] = containerToKill{name: c.Name, spec: c, message: resizeRestartMessage(c)}
			continue
		default:
			keep++
			continue
		}
		if restart {
			message += ", will be restarted"
			a.containersToStart = append(a.containersToStart, i)
		}
		a.containersToKill[cs.ID] = containerToKill{name: c.Name, spec: c, message: message, reason: reason}
	}
	if keep == 0 && len(a.containersToStart) == 0 {
		a.killPod = true
		// Neither sidecars nor debugging containers keep a finished pod
		// alive.
		a.initToStart = nil
		a.ephemeralToStart = nil
	}
	return a
}

// anyRegularCreated reports whether a regular container ever got past
// creation, which means the pod was initialized.
func anyRegularCreated(pod *v1.Pod, st *podstate.PodStatus) bool {
	for i := range pod.Spec.Containers {
		if cs := st.Container(pod.Spec.Containers[i].Name); cs != nil && cs.State != podstate.ContainerStateUnknown {
			return true
		}
	}
	return false
}

// computeInitActions fills a's init container starts and kills and reports
// whether the pod is initialized. Regular init containers run one after the
// other to completion; a sidecar counts as initialized once running (and,
// with a startup probe, started), then the next init container starts, and
// it keeps being restarted afterwards. The list is walked backwards because
// finished init containers may have been removed.
func computeInitActions(pod *v1.Pod, st *podstate.PodStatus, probes ProbeResults, a *podActions) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	initialized := false
	for i := range pod.Spec.Containers {
		if activeContainer(st, pod.Spec.Containers[i].Name) != nil {
			initialized = true
			break
		}
	}
	previouslyInitialized := initialized
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		c := &pod.Spec.InitContainers[i]
		cs := activeContainer(st, c.Name)
		if cs == nil {
			if previouslyInitialized && isSidecar(c) {
				a.initToStart = append(a.initToStart, i)
			}
			continue
		}
		if previouslyInitialized && !isSidecar(c) {
			continue
		}
		switch cs.State {
		case podstate.ContainerStateCreated:
			// Created but never started: the start failed; start anew.
			a.initToStart = append(a.initToStart, i)
		case podstate.ContainerStateRunning:
			if !isSidecar(c) {
				// A running init container is resized in place; validation
				// allows it no RestartContainer policy.
				a.resizeAction(pod, c, cs)
				break
			}
			if c.StartupProbe != nil {
				switch probeVerdict(probes, cs.ID, true) {
				case podstate.ProbeFailure:
					a.containersToKill[cs.ID] = containerToKill{name: c.Name, spec: c, reason: killReasonStartup,
						message: fmt.Sprintf("Init container %s failed startup probe", c.Name)}
					a.initToStart = append(a.initToStart, i)
					goto next
				case podstate.ProbeUnknown:
					goto next // wait for the startup probe
				}
			}
			if i == len(pod.Spec.InitContainers)-1 {
				initialized = true
			} else if !previouslyInitialized {
				a.initToStart = append(a.initToStart, i+1)
			}
			if cs.Hash != HashContainer(c) {
				a.containersToKill[cs.ID] = containerToKill{name: c.Name, spec: c,
					message: fmt.Sprintf("Init container %s definition changed", c.Name)}
				a.initToStart = append(a.initToStart, i)
				break
			}
			if c.LivenessProbe != nil && probeVerdict(probes, cs.ID, false) == podstate.ProbeFailure {
				a.containersToKill[cs.ID] = containerToKill{name: c.Name, spec: c, reason: killReasonLiveness,
					message: fmt.Sprintf("Init container %s failed liveness probe", c.Name)}
				a.initToStart = append(a.initToStart, i)
				break
			}
			if a.resizeAction(pod, c, cs) {
				a.containersToKill[cs.ID] = containerToKill{name: c.Name, spec: c, message: resizeRestartMessage(c)}
				a.initToStart = append(a.initToStart, i)
			}
		case podstate.ContainerStateExited:
			if isSidecar(c) {
				a.initToStart = append(a.initToStart, i)
				break
			}
			if cs.ExitCode != 0 {
				if !shouldRestart(pod, c, st) {
					a.killPod = true
					a.initToStart = nil
					return false
				}
				a.initToStart = append(a.initToStart, i)
				break
			}
			if i == len(pod.Spec.InitContainers)-1 {
				initialized = true
			} else {
				a.initToStart = append(a.initToStart, i+1)
			}
		default: // unknown
			if !isSidecar(c) && !podstate.ContainerRestartsWithoutExitCode(c, &pod.Spec) {
				a.killPod = true
				a.initToStart = nil
				return false
			}
			a.containersToKill[cs.ID] = containerToKill{name: c.Name, spec: c,
				message: fmt.Sprintf("Init container is in %q state, try killing it before restart", cs.State)}
			a.initToStart = append(a.initToStart, i)
		}
	next:
		previouslyInitialized = true
	}
	if !previouslyInitialized {
		a.initToStart = append(a.initToStart, 0)
	}
	slices.Reverse(a.initToStart)
	return initialized
}

// containerToReset is an instance of an init or regular container removed
// to restart all of a pod's containers in place.
type containerToReset struct {
	id, name string
	// kill: it has not exited (running, created or unknown) and is
	// stopped before it is removed.
	kill bool
}

// resetActions lists every instance of pod's init and regular containers
// (ephemeral containers stay) in the order the kubelet's computePodActions
// removes them when the pod restarts all its containers: the regular, then
// the init containers that are victims of the restart, then the regular,
// then the init containers whose exit matched a RestartAllContainers rule
// (the sources, removed last). Within each group, spec order.
func resetActions(pod *v1.Pod, st *podstate.PodStatus) []containerToReset {
	split := func(specs []v1.Container) (sources, targets []containerToReset) {
		for i := range specs {
			c := &specs[i]
			// Every instance, not only the newest: none may be left for
			// the status to find.
			for _, cs := range st.Containers {
				if cs.Name != c.Name {
					continue
				}
				r := containerToReset{id: cs.ID, name: c.Name}
				if cs.State != podstate.ContainerStateExited {
					r.kill = true
					targets = append(targets, r)
					continue
				}
				if rule, ok := podstate.FindMatchingContainerRestartRule(c, int32(cs.ExitCode)); ok &&
					rule.Action == v1.ContainerRestartRuleActionRestartAllContainers {
					sources = append(sources, r)
				} else {
					targets = append(targets, r)
				}
			}
		}
		return sources, targets
	}
	sourceInit, targetInit := split(pod.Spec.InitContainers)
	sources, targets := split(pod.Spec.Containers)
	out := append(targets, targetInit...)
	out = append(out, sources...)
	return append(out, sourceInit...)
}
