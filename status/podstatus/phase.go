package podstatus

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/podsource"
)

// phase is the pod's phase from its container statuses, the kubelet's
// getPhase (1.37, ContainerRestartRules on). terminal is GenerateOptions.
// Terminal; initialized says a regular container exists in the active
// sandbox.
func phase(pod *v1.Pod, statuses []v1.ContainerStatus, terminal, initialized bool) v1.PodPhase {
	spec := &pod.Spec
	pendingInit, pendingSidecars, failedInitNotRestartable := 0, 0, 0
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if isSidecar(c) {
			continue
		}
		st := findStatus(statuses, c.Name)
		switch {
		case st == nil, st.State.Running != nil:
			pendingInit++
		case st.State.Terminated != nil:
			if code := st.State.Terminated.ExitCode; code != 0 && !containerShouldRestart(c, spec, code) {
				failedInitNotRestartable++
			}
		case st.State.Waiting != nil && st.LastTerminationState.Terminated != nil:
			if code := st.LastTerminationState.Terminated.ExitCode; code != 0 && !containerShouldRestart(c, spec, code) {
				failedInitNotRestartable++
			}
		default:
			pendingInit++
		}
	}

	unknown, running, waiting, stopped, stoppedNotRestartable, succeeded := 0, 0, 0, 0, 0, 0
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if !isSidecar(c) {
			continue
		}
		st := findStatus(statuses, c.Name)
		switch {
		case st == nil:
			unknown++
		case st.State.Running != nil:
			if st.Started == nil || !*st.Started {
				pendingSidecars++
			}
			running++
		case st.State.Terminated != nil:
			// A stopped sidecar does not count.
		case st.State.Waiting != nil:
			if st.LastTerminationState.Terminated == nil {
				pendingSidecars++
				waiting++
			}
		default:
			pendingSidecars++
			unknown++
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		st := findStatus(statuses, c.Name)
		switch {
		case st == nil:
			unknown++
		case st.State.Running != nil:
			running++
		case st.State.Terminated != nil:
			stopped++
			code := st.State.Terminated.ExitCode
			if !containerShouldRestart(c, spec, code) {
				stoppedNotRestartable++
			}
			if code == 0 {
				succeeded++
			}
		case st.State.Waiting != nil:
			if st.LastTerminationState.Terminated != nil {
				stopped++
				if !containerShouldRestart(c, spec, st.LastTerminationState.Terminated.ExitCode) {
					stoppedNotRestartable++
				}
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}

	switch {
	case failedInitNotRestartable > 0:
		return v1.PodFailed
	case pendingInit > 0 || (pendingSidecars > 0 && !initialized), waiting > 0:
		// One or more containers have not started.
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		switch {
		case terminal && !podsource.IsStaticPod(pod), stopped == stoppedNotRestartable:
			// Nothing will run again.
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		default:
			// At least one container is restarting.
			return v1.PodRunning
		}
	default:
		return v1.PodPending
	}
}

// isSidecar reports whether c is a restartable init container.
func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// containerShouldRestart reports whether c is restarted after exiting with
// code: its first matching restart rule, else its own restart policy, else
// the pod's (default Always). A RestartAllContainers rule counts as a
// restart.
func containerShouldRestart(c *v1.Container, spec *v1.PodSpec, code int32) bool {
	if c.RestartPolicy != nil {
		if rule, ok := matchingRestartRule(c, code); ok {
			switch rule.Action {
			case v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleActionRestartAllContainers:
				return true
			}
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return code != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyOnFailure:
		return code != 0
	case v1.RestartPolicyNever:
		return false
	default:
		return true
	}
}

// matchingRestartRule returns c's first restart rule matching code.
func matchingRestartRule(c *v1.Container, code int32) (v1.ContainerRestartRule, bool) {
	for _, rule := range c.RestartPolicyRules {
		if rule.ExitCodes == nil {
			continue
		}
		in := false
		for _, v := range rule.ExitCodes.Values {
			if v == code {
				in = true
				break
			}
		}
		switch rule.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return rule, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return rule, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}
