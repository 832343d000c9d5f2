package podstatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

func TestSameStatusIsNotQueued(t *testing.T) {
	m, err := NewManager(Options{Client: fake.NewClientset(), Clock: testingclock.NewFakeClock(time.Unix(1e9, 0))})
	if err != nil {
		t.Fatal(err)
	}
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "a"}}},
	}
	s := Generate(p, nil, nil, GenerateOptions{})
	m.SetPodStatus(p, s)
	version := m.statuses[p.UID].version
	<-m.signal

	m.SetPodStatus(p, s)
	if m.statuses[p.UID].version != version {
		t.Error("an equal status made a new version")
	}
	select {
	case <-m.signal:
		t.Error("an equal status queued a write")
	default:
	}

	// A pod being deleted is always written.
	now := metav1.Now()
	p.DeletionTimestamp = &now
	m.SetPodStatus(p, s)
	if m.statuses[p.UID].version != version+1 {
		t.Error("the status of a pod being deleted was dropped")
	}
}

func TestMergePodStatus(t *testing.T) {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 2}}
	stamp := metav1.NewTime(time.Unix(2e9, 0))
	api := v1.PodStatus{
		Phase:                 v1.PodRunning,
		Conditions:            []v1.PodCondition{{Type: "example.com/x", Status: v1.ConditionTrue}, {Type: v1.PodReady, Status: v1.ConditionTrue}},
		ResourceClaimStatuses: []v1.PodResourceClaimStatus{{Name: "gpu"}},
	}
	ours := v1.PodStatus{
		Phase: v1.PodFailed,
		Conditions: []v1.PodCondition{
			{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet"},
			{Type: v1.PodReady, Status: v1.ConditionTrue},
			{Type: v1.ContainersReady, Status: v1.ConditionTrue},
		},
	}

	// Containers may still run: the phase and DisruptionTarget wait.
	got := mergePodStatus(p, api, ours, true, stamp)
	if got.Phase != v1.PodRunning || findCondition(got.Conditions, v1.DisruptionTarget) != nil {
		t.Errorf("while running: phase %s, conditions %+v", got.Phase, got.Conditions)
	}
	if c := findCondition(got.Conditions, "example.com/x"); c == nil {
		t.Error("foreign condition lost")
	}
	if len(got.ResourceClaimStatuses) != 1 {
		t.Error("resource claim statuses lost")
	}

	// Stopped: terminal, DisruptionTarget stamped now, never Ready.
	got = mergePodStatus(p, api, ours, false, stamp)
	if got.Phase != v1.PodFailed {
		t.Errorf("phase %s", got.Phase)
	}
	if c := findCondition(got.Conditions, v1.DisruptionTarget); c == nil || !c.LastTransitionTime.Equal(&stamp) {
		t.Errorf("DisruptionTarget = %+v", c)
	}
	for _, ty := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
		if c := findCondition(got.Conditions, ty); c.Status != v1.ConditionFalse || c.Reason != podFailed || c.ObservedGeneration != 2 {
			t.Errorf("%s = %+v", ty, c)
		}
	}
	if ours.Phase != v1.PodFailed || ours.Conditions[1].Status != v1.ConditionTrue {
		t.Error("mergePodStatus modified its argument")
	}
}
