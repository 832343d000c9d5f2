package podstate

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContainerShouldRestart(t *testing.T) {
	never, onFailure, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyAlways
	in := func(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) []v1.ContainerRestartRule {
		return []v1.ContainerRestartRule{{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}}
	}
	for _, tc := range []struct {
		name      string
		podPolicy v1.RestartPolicy
		policy    *v1.ContainerRestartPolicy
		rules     []v1.ContainerRestartRule
		code      int32
		want      bool
	}{
		{"pod default is Always", "", nil, nil, 0, true},
		{"pod Never", v1.RestartPolicyNever, nil, nil, 1, false},
		{"pod OnFailure, success", v1.RestartPolicyOnFailure, nil, nil, 0, false},
		{"pod OnFailure, failure", v1.RestartPolicyOnFailure, nil, nil, 1, true},
		{"container Never beats pod OnFailure", v1.RestartPolicyOnFailure, &never, nil, 1, false},
		{"container Always beats pod Never", v1.RestartPolicyNever, &always, nil, 0, true},
		{"container OnFailure, success", v1.RestartPolicyAlways, &onFailure, nil, 0, false},
		{"rule In matches", v1.RestartPolicyNever, &never, in(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 42), 42, true},
		{"rule In misses", v1.RestartPolicyNever, &never, in(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 42), 1, false},
		{"rule NotIn matches", v1.RestartPolicyNever, &never, in(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpNotIn, 0), 3, true},
		{"rule RestartAllContainers restarts", v1.RestartPolicyNever, &never, in(v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleOnExitCodesOpIn, 7), 7, true},
		{"rules need a container policy", v1.RestartPolicyNever, nil, in(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 42), 42, false},
	} {
		c := &v1.Container{Name: "c", RestartPolicy: tc.policy, RestartPolicyRules: tc.rules}
		if got := ContainerShouldRestart(c, &v1.PodSpec{RestartPolicy: tc.podPolicy}, tc.code); got != tc.want {
			t.Errorf("%s: ContainerShouldRestart(exit %d) = %v, want %v", tc.name, tc.code, got, tc.want)
		}
	}
}

func TestShouldContainerBeRestarted(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	c := &v1.Container{Name: "c", RestartPolicy: &never}
	pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{*c}}}
	for _, tc := range []struct {
		name   string
		latest *ContainerStatus
		want   bool
	}{
		{"never ran", nil, true},
		{"running", &ContainerStatus{State: ContainerStateRunning}, false},
		{"created", &ContainerStatus{State: ContainerStateCreated}, true},
		{"unknown", &ContainerStatus{State: ContainerStateUnknown}, true},
		{"exited, container Never", &ContainerStatus{State: ContainerStateExited, ExitCode: 1}, false},
	} {
		if got := ShouldContainerBeRestarted(pod, c, tc.latest); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if ShouldContainerBeRestarted(deleted, c, nil) {
		t.Error("a deleted pod's container is never (re)started")
	}
	if ContainerRestartsWithoutExitCode(c, &pod.Spec) {
		t.Error("a probe kill of a Never container does not restart it")
	}
	if !RunsOnce(&v1.Container{}, &v1.PodSpec{RestartPolicy: v1.RestartPolicyOnFailure}) || RunsOnce(&v1.Container{RestartPolicy: &never}, &v1.PodSpec{RestartPolicy: v1.RestartPolicyOnFailure}) {
		t.Error("RunsOnce: the container's policy, else the pod's OnFailure")
	}
}
