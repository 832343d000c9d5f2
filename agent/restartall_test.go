package agent_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/agent/agenttest"
)

// TestAgentRestartsAllContainers: a whole agent on fakecri, a Job-like pod
// (restartPolicy Never) with an init container, a sidecar and two regular
// containers, one with a RestartAllContainers rule on exit 42. When that
// container exits 42, every container runs again once in the same sandbox:
// each with restart count 1 and a last termination (RestartingAllContainers
// for the ones removed while they ran), the pod Running throughout, and the
// AllContainersRestarting condition False at the end.
func TestAgentRestartsAllContainers(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	pod := agenttest.Pod("restart-all", "busybox")
	never, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	source := pod.Spec.Containers[0]
	source.Name = "source"
	source.RestartPolicy = &never
	source.RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	regular := pod.Spec.Containers[0]
	regular.Name = "regular"
	initC := pod.Spec.Containers[0]
	initC.Name, initC.Command = "init", []string{"true"}
	sidecar := pod.Spec.Containers[0]
	sidecar.Name, sidecar.RestartPolicy = "sidecar", &always
	pod.Spec.InitContainers = []v1.Container{initC, sidecar}
	pod.Spec.Containers = []v1.Container{source, regular}
	pod = n.CreatePod(ctx, pod)

	statusOf := func(p *v1.Pod, name string) v1.ContainerStatus {
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if cs.Name == name {
				return cs
			}
		}
		return v1.ContainerStatus{}
	}
	running := n.WaitForPod(ctx, pod, func(p *v1.Pod) bool {
		return p != nil && statusOf(p, "source").State.Running != nil && statusOf(p, "regular").State.Running != nil
	})
	_, id, _ := strings.Cut(statusOf(running, "source").ContainerID, "://")
	if err := n.CRI.ExitContainer(id, 42, false); err != nil {
		t.Fatal(err)
	}

	names := []string{"init", "sidecar", "source", "regular"}
	got := n.WaitForPod(ctx, pod, func(p *v1.Pod) bool {
		if p == nil || p.Status.Phase != v1.PodRunning {
			return false
		}
		for _, name := range names {
			cs := statusOf(p, name)
			if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
				return false
			}
			if done := name == "init"; (done && cs.State.Terminated == nil) || (!done && cs.State.Running == nil) {
				return false
			}
		}
		return true
	})
	for _, name := range []string{"init", "sidecar", "regular"} {
		if last := statusOf(got, name).LastTerminationState.Terminated; last.Reason != "RestartingAllContainers" {
			t.Errorf("%s: last termination %+v, want reason RestartingAllContainers", name, last)
		}
	}
	if c := agenttest.PodCondition(got, v1.AllContainersRestarting); c.Status != v1.ConditionFalse {
		t.Errorf("AllContainersRestarting %+v once all run again, want False", c)
	}
	if c := agenttest.PodCondition(got, v1.PodInitialized); c.Status != v1.ConditionTrue {
		t.Errorf("Initialized %+v, want True", c)
	}
	if n := n.CRI.Calls("RunPodSandbox"); n != 1 {
		t.Errorf("%d sandboxes created, want the first one kept", n)
	}
	if n := n.CRI.Calls("CreateContainer"); n != 2*len(names) {
		t.Errorf("%d containers created, want each of %v twice", n, names)
	}
}
