package podstatus

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podstate"
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
			if code := st.State.Terminated.ExitCode; code != 0 && !restarts(c, spec, st.State.Terminated) {
				failedInitNotRestartable++
			}
		case st.State.Waiting != nil && st.LastTerminationState.Terminated != nil:
			if code := st.LastTerminationState.Terminated.ExitCode; code != 0 && !restarts(c, spec, st.LastTerminationState.Terminated) {
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
			if !restarts(c, spec, st.State.Terminated) {
				stoppedNotRestartable++
			}
			if code == 0 {
				succeeded++
			}
		case st.State.Waiting != nil:
			if st.LastTerminationState.Terminated != nil {
				stopped++
				if !restarts(c, spec, st.LastTerminationState.Terminated) {
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
func isSidecar(c *v1.Container) bool { return podstate.IsRestartableInitContainer(c) }

// containerShouldRestart is podstate.ContainerShouldRestart, the one
// restart decision the runtime and the prober also use.
func containerShouldRestart(c *v1.Container, spec *v1.PodSpec, code int32) bool {
	return podstate.ContainerShouldRestart(c, spec, code)
}

// restarts reports whether container c, which ended as t, runs again: its
// exit code says so (containerShouldRestart), or it was stopped to restart
// all its pod's containers in place.
func restarts(c *v1.Container, spec *v1.PodSpec, t *v1.ContainerStateTerminated) bool {
	return containerShouldRestart(c, spec, t.ExitCode) || t.Reason == RestartingAllContainers
}
