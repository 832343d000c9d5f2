package pods

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/podsource"
)

// TestActiveDeadlineSeconds: a pod that runs longer than its
// spec.activeDeadlineSeconds (counted from its start time) is stopped and
// ends Failed with reason DeadlineExceeded, as the kubelet's active
// deadline handler; one within its deadline keeps running.
func TestActiveDeadlineSeconds(t *testing.T) {
	h := newControllerHarness(t)
	pod, other := churnPod(7), churnPod(8)
	pod.Spec.ActiveDeadlineSeconds = ptrTo[int64](30)
	other.Spec.ActiveDeadlineSeconds = ptrTo[int64](3600)
	start := metav1.NewTime(h.clock.Now())
	pod.Status.StartTime, other.Status.StartTime = &start, &start
	h.send(podsource.OpAdd, pod, other)
	h.waitFor("the pods running", func() bool {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.running[pod.UID] && h.rt.running[other.UID]
	})
	if st, _ := h.statuses.GetPodStatus(pod.UID); st.Phase != v1.PodRunning {
		t.Fatalf("within its deadline the pod is %s, want Running", st.Phase)
	}
	// Time passes a second per poll until the deadline is behind.
	h.waitFor("the pod failed for its deadline", func() bool {
		h.clock.Step(time.Second)
		st, _ := h.statuses.GetPodStatus(pod.UID)
		return st.Phase == v1.PodFailed
	})
	st, _ := h.statuses.GetPodStatus(pod.UID)
	if st.Reason != "DeadlineExceeded" || st.Message != "Pod was active on the node longer than the specified deadline" {
		t.Errorf("final status %s: %q, want DeadlineExceeded", st.Reason, st.Message)
	}
	if elapsed := h.clock.Since(start.Time); elapsed < 30*time.Second {
		t.Errorf("stopped after %v, before its 30s deadline", elapsed)
	}
	if st, _ := h.statuses.GetPodStatus(other.UID); st.Phase != v1.PodRunning {
		t.Errorf("the pod within its deadline is %s, want Running", st.Phase)
	}
}

func TestActiveDeadlineLeft(t *testing.T) {
	now := time.Now()
	started := metav1.NewTime(now.Add(-10 * time.Second))
	pod := &v1.Pod{Spec: v1.PodSpec{ActiveDeadlineSeconds: ptrTo[int64](30)}}
	if left, ok := activeDeadlineLeft(pod, nil, now); !ok || left != 30*time.Second {
		t.Errorf("not started: %v %v, want the whole 30s", left, ok)
	}
	if left, _ := activeDeadlineLeft(pod, &v1.PodStatus{StartTime: &started}, now); left != 20*time.Second {
		t.Errorf("started 10s ago: %v left, want 20s", left)
	}
	if _, ok := activeDeadlineLeft(&v1.Pod{}, nil, now); ok {
		t.Error("a pod without activeDeadlineSeconds has a deadline")
	}
}
