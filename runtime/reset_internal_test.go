package runtime

import (
	"slices"
	"testing"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
)

// TestResetActionsOrder: every instance of the init and regular containers
// is removed, in the kubelet's order: the victims (regular, then init
// containers), then the containers whose exit matched a RestartAllContainers
// rule (regular, then init); running ones are stopped first; ephemeral
// containers stay.
func TestResetActionsOrder(t *testing.T) {
	always, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyNever
	rules := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	pod := &v1.Pod{Spec: v1.PodSpec{
		RestartPolicy: v1.RestartPolicyNever,
		InitContainers: []v1.Container{
			{Name: "init"},
			{Name: "sidecar", RestartPolicy: &always},
			{Name: "source-sidecar", RestartPolicy: &always, RestartPolicyRules: rules},
		},
		Containers: []v1.Container{
			{Name: "source", RestartPolicy: &never, RestartPolicyRules: rules},
			{Name: "regular"},
		},
		EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug"}}},
	}}
	st := &podstate.PodStatus{Containers: []*podstate.ContainerStatus{
		{ID: "debug-1", Name: "debug", State: podstate.ContainerStateRunning},
		{ID: "regular-1", Name: "regular", State: podstate.ContainerStateRunning},
		{ID: "source-1", Name: "source", State: podstate.ContainerStateExited, ExitCode: 42},
		{ID: "source-sidecar-2", Name: "source-sidecar", State: podstate.ContainerStateExited, ExitCode: 42},
		{ID: "source-sidecar-1", Name: "source-sidecar", State: podstate.ContainerStateExited, ExitCode: 1},
		{ID: "sidecar-1", Name: "sidecar", State: podstate.ContainerStateCreated},
		{ID: "init-1", Name: "init", State: podstate.ContainerStateExited},
	}}
	var got []string
	for _, r := range resetActions(pod, st) {
		id := r.id
		if r.kill {
			id += " (kill)"
		}
		got = append(got, id)
	}
	want := []string{"regular-1 (kill)", "init-1", "sidecar-1 (kill)", "source-sidecar-1", "source-1", "source-sidecar-2"}
	if !slices.Equal(got, want) {
		t.Errorf("reset order %q, want %q", got, want)
	}
}
