package podstatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchStatuses are a busybox pod's status as the API has it when the
// agent first writes (Pending, only the scheduler's condition) and the
// status it writes once the container started: the burst's commonest patch.
func benchStatuses() (apiStatus, status v1.PodStatus) {
	t0 := metav1.NewTime(time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(2 * time.Second))
	apiStatus = v1.PodStatus{Phase: v1.PodPending, QOSClass: v1.PodQOSBestEffort,
		Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: t0}}}
	status = v1.PodStatus{Phase: v1.PodRunning, QOSClass: v1.PodQOSBestEffort, HostIP: "10.0.0.2", HostIPs: []v1.HostIP{{IP: "10.0.0.2"}},
		PodIP: "10.88.0.7", PodIPs: []v1.PodIP{{IP: "10.88.0.7"}}, StartTime: &t0,
		Conditions: []v1.PodCondition{
			{Type: v1.PodReadyToStartContainers, Status: v1.ConditionTrue, LastTransitionTime: t1},
			{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: t0},
			{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: t1},
			{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: t1},
			{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: t0},
		},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true, Started: new(true), Image: "docker.io/library/busybox:latest",
			ImageID: "sha256:0123456789abcdef", ContainerID: "containerd://0123456789abcdef",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: t1}}}},
	}
	return apiStatus, status
}

// BenchmarkPreparePatch builds the strategic merge patch of the agent's
// commonest pod status write (Pending → Running).
func BenchmarkPreparePatch(b *testing.B) {
	apiStatus, status := benchStatuses()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := preparePatch("uid-1", apiStatus, status); err != nil {
			b.Fatal(err)
		}
	}
}
