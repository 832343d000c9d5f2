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

func restartAllPod() *v1.Pod {
	never := v1.ContainerRestartPolicyNever
	rules := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	return &v1.Pod{Spec: v1.PodSpec{
		RestartPolicy:  v1.RestartPolicyNever,
		InitContainers: []v1.Container{{Name: "init"}},
		Containers:     []v1.Container{{Name: "source", RestartPolicy: &never, RestartPolicyRules: rules}, {Name: "regular"}},
	}}
}

func TestAllContainersCouldRestart(t *testing.T) {
	pod := restartAllPod()
	if !AllContainersCouldRestart(&pod.Spec) {
		t.Error("a regular container's RestartAllContainers rule: want true")
	}
	pod.Spec.InitContainers[0].RestartPolicyRules, pod.Spec.Containers[0].RestartPolicyRules = pod.Spec.Containers[0].RestartPolicyRules, nil
	if !AllContainersCouldRestart(&pod.Spec) {
		t.Error("an init container's RestartAllContainers rule: want true")
	}
	pod.Spec.InitContainers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart}}
	if AllContainersCouldRestart(&pod.Spec) {
		t.Error("only Restart rules: want false")
	}
}

func TestShouldAllContainersRestart(t *testing.T) {
	pod := restartAllPod()
	exited := func(name string, code int) *PodStatus {
		return &PodStatus{Containers: []*ContainerStatus{{Name: name, State: ContainerStateExited, ExitCode: code}}}
	}
	terminated := func(name string, code int32) *v1.PodStatus {
		return &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: name,
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}}}
	}
	for _, tc := range []struct {
		name string
		rs   *PodStatus
		api  *v1.PodStatus
		want bool
	}{
		{"nothing known", nil, nil, false},
		{"runtime: exit matches the rule", exited("source", 42), nil, true},
		{"runtime: exit matches no rule", exited("source", 1), nil, false},
		{"runtime: a container without the rule exits 42", exited("regular", 42), nil, false},
		{"API: terminated with a matching exit", nil, terminated("source", 42), true},
		{"API: terminated with another exit", nil, terminated("source", 1), false},
		{"API: the condition is True", &PodStatus{}, &v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.AllContainersRestarting, Status: v1.ConditionTrue}}}, true},
		{"API: the condition is False", &PodStatus{}, &v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse}}}, false},
	} {
		if got := ShouldAllContainersRestart(pod, tc.rs, tc.api); got != tc.want {
			t.Errorf("%s: ShouldAllContainersRestart = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The newest instance decides: a later one running means the exit was
	// already acted on.
	rs := &PodStatus{Containers: []*ContainerStatus{{Name: "source", State: ContainerStateRunning}, {Name: "source", State: ContainerStateExited, ExitCode: 42}}}
	if ShouldAllContainersRestart(pod, rs, nil) {
		t.Error("an older instance's matching exit: want false")
	}
}

func TestAllContainersRestartCleanedUp(t *testing.T) {
	pod := restartAllPod()
	if !AllContainersRestartCleanedUp(pod, &PodStatus{Containers: []*ContainerStatus{{Name: "ephemeral"}}}) {
		t.Error("no init or regular container left: want true")
	}
	if AllContainersRestartCleanedUp(pod, &PodStatus{Containers: []*ContainerStatus{{Name: "init", State: ContainerStateExited}}}) {
		t.Error("an init container left: want false")
	}
}
