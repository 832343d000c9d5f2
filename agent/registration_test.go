package agent_test

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/status"
)

// TestRegistrationHelpers: an admit handler written as a plain AdmitFunc and
// a setter constructor, registered with the typed helpers, both take effect
// in a running agent (a hand-annotated provider of the wrong type would land
// in a group nobody reads and the pod would run).
func TestRegistrationHelpers(t *testing.T) {
	noGPU := pods.AdmitFunc(func(a pods.AdmitAttributes) pods.AdmitResult {
		if a.Pod.Labels["needs"] == "gpu" {
			return pods.AdmitResult{Reason: "NoGPU", Message: "this node has no GPU"}
		}
		return pods.AdmitResult{Admit: true}
	})
	n := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{
		pods.AsAdmitHandler("NoGPU", pods.OrderGeneralPredicates+1, noGPU),
		status.AsSetter("Flavor", status.OrderReady-1, func() status.Setter { return setLabelCondition }),
		// A nil setter under a default's name removes it.
		status.AsSetter(status.SetterImages, 0, status.Setter(nil)),
	}})
	ctx := agenttest.Context(t)
	node := n.WaitForNode(ctx, func(n *v1.Node) bool { return agenttest.NodeCondition(n, "Flavor").Status == v1.ConditionTrue })
	if len(node.Status.Images) != 0 {
		t.Errorf("images reported although the Images setter was removed: %v", node.Status.Images)
	}
	n.WaitReady(ctx)

	pod := agenttest.Pod("trainer", "busybox")
	pod.Labels = map[string]string{"needs": "gpu"}
	n.CreatePod(ctx, pod)
	got := n.WaitForPod(ctx, pod, agenttest.PodPhase(v1.PodFailed))
	if got.Status.Reason != "NoGPU" || !strings.Contains(got.Status.Message, "no GPU") {
		t.Errorf("status = %q/%q, want the handler's rejection", got.Status.Reason, got.Status.Message)
	}
	if calls := n.CRI.Calls("RunPodSandbox"); calls != 0 {
		t.Errorf("a rejected pod got %d sandboxes", calls)
	}
}

// setLabelCondition sets a condition of the embedder's own.
func setLabelCondition(_ context.Context, node *v1.Node) error {
	now := metav1.Now()
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == "Flavor" {
			node.Status.Conditions[i].LastHeartbeatTime = now
			return nil
		}
	}
	node.Status.Conditions = append(node.Status.Conditions, v1.NodeCondition{
		Type: "Flavor", Status: v1.ConditionTrue, Reason: "Vanilla", LastHeartbeatTime: now, LastTransitionTime: now})
	return nil
}

// mySetter is an embedder's setter type, not a status.OrderedSetter.
type mySetter struct{}

// TestWronglyTypedGroupValueFailsTheStart: the README's old recipe,
// fx.Annotate with the setter group's tag on a constructor returning a
// concrete type, put the value in a group nobody reads; the agent now
// refuses to start and says so.
func TestWronglyTypedGroupValueFailsTheStart(t *testing.T) {
	cfg := agenttest.Config(t, "node-a", "unix:///nonexistent.sock")
	app := fx.New(fx.NopLogger, fx.Supply(cfg), agent.Standalone, agent.CRI,
		fx.Provide(fx.Annotate(func() *mySetter { return &mySetter{} }, fx.ResultTags(`group:"`+status.SetterGroup+`"`))))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), `*agent_test.mySetter was provided to the value group "node_status_setters"`) {
		t.Fatalf("agent with a wrongly typed setter: %v, want a start error naming it", err)
	}
}
