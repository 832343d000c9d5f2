package podstate

import v1 "k8s.io/api/core/v1"

// The restart decision, in one place. The runtime (which containers to
// start and kill), the pod status generator (phase, waiting states) and the
// prober (whether a terminated container is probed again) all ask these
// functions, so they cannot disagree about whether a container runs again.
// They are the kubelet's with ContainerRestartRules on (its v1.37 default):
// podutil.ContainerShouldRestart, kubecontainer.ShouldContainerBeRestarted
// and the container-level policy kuberuntime uses where there is no exit
// code.

// IsRestartableInitContainer reports whether c, an init container, is a
// sidecar: its restartPolicy is Always.
func IsRestartableInitContainer(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// ContainerShouldRestart reports whether container c of spec is restarted
// after exiting with exitCode: its first restart rule matching the code
// (action Restart restarts; RestartAllContainers restarts too, as the
// kubelet with RestartAllContainersOnContainerExits on), else its own
// restartPolicy, else the pod's (the default, "", is Always).
func ContainerShouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if rule, ok := FindMatchingContainerRestartRule(c, exitCode); ok {
			switch rule.Action {
			case v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleActionRestartAllContainers:
				return true
			}
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	case v1.RestartPolicyNever:
		return false
	default:
		return true
	}
}

// FindMatchingContainerRestartRule returns c's first restart rule whose
// exit codes match exitCode (operator In: the code is listed; NotIn: it is
// not), and whether there is one.
func FindMatchingContainerRestartRule(c *v1.Container, exitCode int32) (v1.ContainerRestartRule, bool) {
	for _, rule := range c.RestartPolicyRules {
		if rule.ExitCodes == nil {
			continue
		}
		listed := false
		for _, code := range rule.ExitCodes.Values {
			if code == exitCode {
				listed = true
				break
			}
		}
		switch rule.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if listed {
				return rule, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !listed {
				return rule, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}

// ContainerRestartsWithoutExitCode reports whether c is restarted when it
// must stop without an exit code to judge by: killed for a failed liveness
// or startup probe, or found in an unknown state. Restart rules need an
// exit code, so only c's restartPolicy counts (restarted unless Never),
// else the pod's (restarted unless Never).
func ContainerRestartsWithoutExitCode(c *v1.Container, spec *v1.PodSpec) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy != v1.ContainerRestartPolicyNever
	}
	return spec.RestartPolicy != v1.RestartPolicyNever
}

// ShouldContainerBeRestarted reports whether container c of pod, whose
// newest instance is latest (nil: none exists), must be (re)started: never
// once the pod is being deleted; always when it never ran or was only
// created or is in an unknown state; never while it runs; and after it
// exited, as ContainerShouldRestart decides from its exit code.
func ShouldContainerBeRestarted(pod *v1.Pod, c *v1.Container, latest *ContainerStatus) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	if latest == nil {
		return true
	}
	switch latest.State {
	case ContainerStateRunning:
		return false
	case ContainerStateUnknown, ContainerStateCreated:
		return true
	}
	return ContainerShouldRestart(c, &pod.Spec, int32(latest.ExitCode))
}

// RunsOnce reports whether c, a regular container, is not started again
// once it succeeded when its pod gets a new sandbox: its restartPolicy is
// OnFailure, or it has none and the pod's is OnFailure (the kubelet's
// computePodActions on sandbox re-creation).
func RunsOnce(c *v1.Container, spec *v1.PodSpec) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy == v1.ContainerRestartPolicyOnFailure
	}
	return spec.RestartPolicy == v1.RestartPolicyOnFailure
}

// AllContainersCouldRestart reports whether an init or regular container of
// spec has a RestartAllContainers rule: only such a pod has the
// AllContainersRestarting condition, and any of its containers may leave a
// terminated state (the kubelet's podutil.AllContainersCouldRestart).
func AllContainersCouldRestart(spec *v1.PodSpec) bool {
	for _, list := range [][]v1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			for _, r := range list[i].RestartPolicyRules {
				if r.Action == v1.ContainerRestartRuleActionRestartAllContainers {
					return true
				}
			}
		}
	}
	return false
}

// ShouldAllContainersRestart reports whether pod restarts all its
// containers in place, the kubelet's ShouldAllContainersRestart: api (its
// previous API status; nil: none) has the AllContainersRestarting condition
// True, or an init or regular container's exit matched a
// RestartAllContainers rule, as rs (its runtime status; nil: not known)
// shows the container's newest instance or api its state.
func ShouldAllContainersRestart(pod *v1.Pod, rs *PodStatus, api *v1.PodStatus) bool {
	apiStatuses := map[string]*v1.ContainerStatus{}
	if api != nil {
		for _, c := range api.Conditions {
			if c.Type == v1.AllContainersRestarting && c.Status == v1.ConditionTrue {
				return true
			}
		}
		for _, list := range [][]v1.ContainerStatus{api.InitContainerStatuses, api.ContainerStatuses} {
			for i := range list {
				apiStatuses[list[i].Name] = &list[i]
			}
		}
	}
	restartsAll := func(c *v1.Container, exitCode int32) bool {
		rule, ok := FindMatchingContainerRestartRule(c, exitCode)
		return ok && rule.Action == v1.ContainerRestartRuleActionRestartAllContainers
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			if rs != nil {
				if cs := rs.Container(c.Name); cs != nil && cs.State == ContainerStateExited && restartsAll(c, int32(cs.ExitCode)) {
					return true
				}
			}
			if st := apiStatuses[c.Name]; st != nil && st.State.Terminated != nil && restartsAll(c, st.State.Terminated.ExitCode) {
				return true
			}
		}
	}
	return false
}

// AllContainersRestartCleanedUp reports whether rs holds no instance of
// pod's init and regular containers any more: an in-place restart of all
// containers removed them all, and they start again from the first init
// container (the kubelet's AllContainersRestartCleanedUp).
func AllContainersRestartCleanedUp(pod *v1.Pod, rs *PodStatus) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if rs.Container(list[i].Name) != nil {
				return false
			}
		}
	}
	return true
}
