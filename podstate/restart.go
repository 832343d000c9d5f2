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
