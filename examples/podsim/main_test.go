package main

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
)

// TestPodLevelNode runs the simulator as a whole agent on a fake clientset:
// the node turns Ready with the backend's version, a pod runs and turns
// Ready with the kubelet's conditions, a pod whose containers exit 0
// Succeeds, and a deleted pod's object is removed.
func TestPodLevelNode(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{Runtime: agent.PodBackend(func(clk clock.Clock) *simulator { return newSimulator(clk) })})
	ctx := agenttest.Context(t)
	node := n.WaitReady(ctx)
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; v != "podsim://0.1.0" {
		t.Errorf("containerRuntimeVersion = %q", v)
	}

	web := n.CreatePod(ctx, agenttest.Pod("web", "nginx"))
	got := n.WaitForPod(ctx, web, agenttest.PodRunningAndReady)
	if got.Status.PodIP == "" || !strings.HasPrefix(got.Status.PodIP, "10.88.") || got.Status.HostIP != "127.0.0.1" {
		t.Errorf("podIP/hostIP = %q/%q", got.Status.PodIP, got.Status.HostIP)
	}
	for _, c := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodScheduled} {
		if agenttest.PodCondition(got, c).Status != v1.ConditionTrue {
			t.Errorf("condition %s = %+v", c, agenttest.PodCondition(got, c))
		}
	}

	job := agenttest.Pod("job", "busybox")
	job.Spec.RestartPolicy = v1.RestartPolicyNever
	job.Annotations = map[string]string{RunSecondsAnnotation: "1"}
	job = n.CreatePod(ctx, job)
	done := n.WaitForPod(ctx, job, agenttest.PodPhase(v1.PodSucceeded))
	if cs := done.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 0 {
		t.Errorf("job container statuses = %+v", cs)
	}

	// A graceful deletion as the API server records it: the agent stops
	// the pod through the backend and deletes the object.
	now, grace := metav1.NewTime(time.Now()), int64(30)
	got.DeletionTimestamp, got.DeletionGracePeriodSeconds = &now, &grace
	if _, err := n.Client.CoreV1().Pods("default").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.WaitForPod(ctx, web, agenttest.PodGone)
}
