package podstatus

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
)

// Reasons the generated status carries, the kubelet's.
const (
	// containerCreating is the waiting reason of a container not created
	// yet in a pod without init containers.
	containerCreating = "ContainerCreating"
	// podInitializing is the waiting reason of a container not created yet
	// in a pod with init containers.
	podInitializing = "PodInitializing"
	// containerStatusUnknown is the terminated reason of a container that
	// disappeared from the runtime.
	containerStatusUnknown = "ContainerStatusUnknown"

	// unknownContainerStatuses: no container has a status at all.
	unknownContainerStatuses = "UnknownContainerStatuses"
	// podCompleted: the pod succeeded.
	podCompleted = "PodCompleted"
	// podFailed: the pod failed.
	podFailed = "PodFailed"
	// containersNotReady: one or more containers are not ready.
	containersNotReady = "ContainersNotReady"
	// containersNotInitialized: one or more init containers have not
	// completed (or sidecars not started).
	containersNotInitialized = "ContainersNotInitialized"
	// readinessGatesNotReady: a readiness gate's condition is not True.
	readinessGatesNotReady = "ReadinessGatesNotReady"
	// podSandboxNotReady: the pod has no ready sandbox with its network.
	podSandboxNotReady = "PodSandboxNotReady"
	// RestartAllContainersStarted: a container's exit matched a
	// RestartAllContainers rule, and the pod's containers are being
	// removed to start again (the AllContainersRestarting condition).
	RestartAllContainersStarted = "RestartAllContainersStarted"
	// RestartingAllContainers is the waiting reason, and the last
	// termination's reason, of a container removed to restart all of its
	// pod's containers in place.
	RestartingAllContainers = "RestartingAllContainers"
)

// removedForRestartAllMessage is the kubelet's message of a container
// removed to restart all of its pod's containers.
const removedForRestartAllMessage = "The container is removed because RestartAllContainers in place"

// AllContainersRestarting reports whether status has the
// AllContainersRestarting condition True: the pod is restarting all its
// containers in place, and the runtime removes them (the kubelet's syncPod
// reads this from the status it generated).
func AllContainersRestarting(status *v1.PodStatus) bool {
	c := findCondition(status.Conditions, v1.AllContainersRestarting)
	return c != nil && c.Status == v1.ConditionTrue
}

// allContainersRestartingCondition is the kubelet's AllContainersRestarting
// condition of a pod with a RestartAllContainers rule: True, reason
// RestartAllContainersStarted, from a matching exit (restartingAll:
// podstate.ShouldAllContainersRestart) until the runtime removed every init
// and regular container; False once the pod is terminal (reason
// PodCompleted or PodFailed) or nothing restarts. As the kubelet's, it has
// no observed generation.
func allContainersRestartingCondition(pod *v1.Pod, rs *podstate.PodStatus, restartingAll bool, phase v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse}
	switch {
	case phase == v1.PodSucceeded:
		c.Reason = podCompleted
	case phase == v1.PodFailed:
		c.Reason = podFailed
	case restartingAll && !podstate.AllContainersRestartCleanedUp(pod, rs):
		c.Status, c.Reason, c.Message = v1.ConditionTrue, RestartAllContainersStarted, "container exited with restart policy rule"
	}
	return c
}

// kubeletConditions are the condition types the kubelet owns (with the
// 1.37 default feature gates): it writes them on every status update and
// replaces what anyone else wrote. Every other type belongs to someone else
// and is kept as is.
var kubeletConditions = []v1.PodConditionType{
	v1.PodScheduled,
	v1.PodReady,
	v1.PodInitialized,
	v1.ContainersReady,
	v1.PodResizeInProgress,
	v1.PodResizePending,
	v1.PodReadyToStartContainers,
	v1.AllContainersRestarting,
}

// isKubeletCondition reports whether the agent owns condition type t: the
// pod status manager writes these and never the others.
func isKubeletCondition(t v1.PodConditionType) bool {
	return slices.Contains(kubeletConditions, t)
}

// isSharedCondition reports whether the kubelet writes t alongside others
// (the eviction manager's and the node shutdown manager's
// DisruptionTarget).
func isSharedCondition(t v1.PodConditionType) bool { return t == v1.DisruptionTarget }

func condition(pod *v1.Pod, t v1.PodConditionType, status v1.ConditionStatus, reason, message string) v1.PodCondition {
	return v1.PodCondition{Type: t, ObservedGeneration: pod.Generation, Status: status, Reason: reason, Message: message}
}

// readyToStartContainersCondition is True when the pod has exactly one ready
// sandbox, the newest, in the right network namespace and with an IP unless
// it uses the host's network.
func readyToStartContainersCondition(pod *v1.Pod, rs *podstate.PodStatus) v1.PodCondition {
	if msg := sandboxNotReadyMessage(pod, rs); msg != "" {
		return condition(pod, v1.PodReadyToStartContainers, v1.ConditionFalse, podSandboxNotReady, msg)
	}
	return condition(pod, v1.PodReadyToStartContainers, v1.ConditionTrue, "", "")
}

// sandboxNotReadyMessage says why the pod needs a new sandbox, or "".
func sandboxNotReadyMessage(pod *v1.Pod, rs *podstate.PodStatus) string {
	return string(rs.SandboxChange(pod.Spec.HostNetwork))
}

// initializedCondition is True once every regular init container completed
// and every sidecar started, or once a regular container started; and it
// stays True once old (the previous status) has it True, as the kubelet's
// with RestartAllContainersOnContainerExits (on in 1.37): a pod restarting
// all its containers runs its init containers again without becoming
// uninitialized.
func initializedCondition(pod *v1.Pod, old *v1.PodStatus, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	if statuses == nil && len(pod.Spec.InitContainers) > 0 {
		return condition(pod, v1.PodInitialized, v1.ConditionFalse, unknownContainerStatuses, "")
	}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := findStatus(statuses, c.Name)
		switch {
		case st == nil:
			unknown = append(unknown, c.Name)
		case isSidecar(c) && (st.Started == nil || !*st.Started), !isSidecar(c) && !st.Ready:
			incomplete = append(incomplete, c.Name)
		}
	}
	if phase == v1.PodSucceeded && len(unknown) == 0 {
		return condition(pod, v1.PodInitialized, v1.ConditionTrue, podCompleted, "")
	}
	// A regular container that ran means the pod was initialized, even when
	// a sidecar restarts now.
	if anyRegularContainerStarted(pod, statuses) {
		return condition(pod, v1.PodInitialized, v1.ConditionTrue, "", "")
	}
	if msg := listMessage("containers with incomplete status", unknown, incomplete); msg != "" {
		if c := findCondition(old.Conditions, v1.PodInitialized); c != nil && c.Status == v1.ConditionTrue {
			return condition(pod, v1.PodInitialized, v1.ConditionTrue, "", "")
		}
		return condition(pod, v1.PodInitialized, v1.ConditionFalse, containersNotInitialized, msg)
	}
	return condition(pod, v1.PodInitialized, v1.ConditionTrue, "", "")
}

// containersReadyCondition is True when every regular container and sidecar
// is ready.
func containersReadyCondition(pod *v1.Pod, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	if statuses == nil {
		return condition(pod, v1.ContainersReady, v1.ConditionFalse, unknownContainerStatuses, "")
	}
	var unknown, unready []string
	check := func(name string) {
		switch st := findStatus(statuses, name); {
		case st == nil:
			unknown = append(unknown, name)
		case !st.Ready:
			unready = append(unready, name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name)
		}
	}
	for i := range pod.Spec.Containers {
		check(pod.Spec.Containers[i].Name)
	}
	if (phase == v1.PodSucceeded && len(unknown) == 0) || phase == v1.PodFailed {
		return terminalReadyCondition(pod, v1.ContainersReady, phase)
	}
	if msg := listMessage("containers with unready status", unknown, unready); msg != "" {
		return condition(pod, v1.ContainersReady, v1.ConditionFalse, containersNotReady, msg)
	}
	return condition(pod, v1.ContainersReady, v1.ConditionTrue, "", "")
}

// readyCondition is ContainersReady further gated by the pod's readiness
// gates, looked up in conditions.
func readyCondition(pod *v1.Pod, conditions []v1.PodCondition, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	cr := containersReadyCondition(pod, statuses, phase)
	if cr.Status != v1.ConditionTrue {
		return condition(pod, v1.PodReady, cr.Status, cr.Reason, cr.Message)
	}
	var msgs []string
	for _, gate := range pod.Spec.ReadinessGates {
		c := findCondition(conditions, gate.ConditionType)
		switch {
		case c == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(gate.ConditionType)))
		case c.Status != v1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(gate.ConditionType), c.Status))
		}
	}
	if len(msgs) > 0 {
		return condition(pod, v1.PodReady, v1.ConditionFalse, readinessGatesNotReady, strings.Join(msgs, ", "))
	}
	return condition(pod, v1.PodReady, v1.ConditionTrue, "", "")
}

// terminalReadyCondition is the False Ready or ContainersReady condition of
// a pod in a terminal phase.
func terminalReadyCondition(pod *v1.Pod, t v1.PodConditionType, phase v1.PodPhase) v1.PodCondition {
	reason := ""
	switch phase {
	case v1.PodFailed:
		reason = podFailed
	case v1.PodSucceeded:
		reason = podCompleted
	}
	return condition(pod, t, v1.ConditionFalse, reason, "")
}

// listMessage is the kubelet's "containers with unknown status: [a], <what>:
// [b c]".
func listMessage(what string, unknown, other []string) string {
	var parts []string
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("containers with unknown status: %s", unknown))
	}
	if len(other) > 0 {
		parts = append(parts, fmt.Sprintf("%s: %s", what, other))
	}
	return strings.Join(parts, ", ")
}

func findCondition(conditions []v1.PodCondition, t v1.PodConditionType) *v1.PodCondition {
	for i := range conditions {
		if conditions[i].Type == t {
			return &conditions[i]
		}
	}
	return nil
}

// setCondition replaces the condition of c's type in conditions, or
// appends c.
func setCondition(conditions []v1.PodCondition, c v1.PodCondition) []v1.PodCondition {
	if old := findCondition(conditions, c.Type); old != nil {
		*old = c
		return conditions
	}
	return append(conditions, c)
}

func findStatus(statuses []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

// anyRegularContainerStarted reports whether a regular container of pod is
// running or terminated in statuses.
func anyRegularContainerStarted(pod *v1.Pod, statuses []v1.ContainerStatus) bool {
	for i := range pod.Spec.Containers {
		if st := findStatus(statuses, pod.Spec.Containers[i].Name); st != nil && (st.State.Running != nil || st.State.Terminated != nil) {
			return true
		}
	}
	return false
}

// NeedsReadinessSync reports whether pod, as its source last saw it, has
// readiness gates and a Ready condition that disagrees with them: another
// writer changed a gate's condition, so the agent syncs the pod (generates
// and sets its status again) on this RECONCILE update, as the kubelet's
// HandlePodReconcile does. Other status-only changes need no sync; the
// Manager's periodic sync rewrites what someone else overwrote.
func NeedsReadinessSync(pod *v1.Pod) bool {
	if pod == nil || len(pod.Spec.ReadinessGates) == 0 {
		return false
	}
	cur := findCondition(pod.Status.Conditions, v1.PodReady)
	if cur == nil {
		return false
	}
	statuses := append(append([]v1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	if len(statuses) == 0 {
		statuses = nil
	}
	want := readyCondition(pod, pod.Status.Conditions, statuses, pod.Status.Phase)
	return cur.Status != want.Status || cur.Message != want.Message
}
