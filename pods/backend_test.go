package pods

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodekit/nodekit/status/podstatus"
)

// flakyBackend fails CreatePod while createErr is set, and runs nothing.
type flakyBackend struct {
	mu        sync.Mutex
	createErr error
	created   map[string]bool
}

func (b *flakyBackend) CreatePod(_ context.Context, pod *v1.Pod) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.createErr != nil {
		return b.createErr
	}
	b.created[pod.Namespace+"/"+pod.Name] = true
	return nil
}
func (*flakyBackend) UpdatePod(context.Context, *v1.Pod) error { return nil }
func (*flakyBackend) DeletePod(context.Context, *v1.Pod) error { return nil }
func (b *flakyBackend) GetPodStatus(_ context.Context, ns, name string) (*v1.PodStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.created[ns+"/"+name] {
		return nil, fmt.Errorf("%s/%s: %w", ns, name, ErrPodNotFound)
	}
	return &v1.PodStatus{Phase: v1.PodPending}, nil
}
func (*flakyBackend) GetPods(context.Context) ([]*v1.Pod, error) { return nil, nil }

// TestBackendCreateFailureIsInTheStatus: a CreatePod error is the pod's
// status reason ProviderFailed with the error as message and a
// ProviderCreateFailed warning event, as virtual-kubelet; a pod that must
// not restart fails; once a create works the reason goes.
func TestBackendCreateFailureIsInTheStatus(t *testing.T) {
	b := &flakyBackend{createErr: errors.New("quota exceeded"), created: map[string]bool{}}
	rec := record.NewFakeRecorder(10)
	r, err := NewBackendRuntime(b, BackendRuntimeOptions{Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "nginx"}}}}
	if res := r.SyncPod(ctx, pod); res.Err == nil || !strings.Contains(res.Err.Error(), "quota exceeded") {
		t.Fatalf("SyncPod = %v, want the backend's error", res.Err)
	}
	st, err := r.PodStatus(ctx, pod, podstatus.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != v1.PodPending || st.Reason != ReasonProviderFailed || st.Message != "quota exceeded" {
		t.Errorf("status after a failed create: %s %s %q, want Pending ProviderFailed \"quota exceeded\"", st.Phase, st.Reason, st.Message)
	}
	select {
	case ev := <-rec.Events:
		if ev != "Warning ProviderCreateFailed quota exceeded" {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no event for the failed create")
	}
	never := pod.DeepCopy()
	never.Spec.RestartPolicy = v1.RestartPolicyNever
	if st, _ := r.PodStatus(ctx, never, podstatus.GenerateOptions{}); st.Phase != v1.PodFailed || st.Reason != ReasonProviderFailed {
		t.Errorf("status of a restartPolicy Never pod after a failed create: %s %s, want Failed ProviderFailed", st.Phase, st.Reason)
	}

	b.mu.Lock()
	b.createErr = nil
	b.mu.Unlock()
	if res := r.SyncPod(ctx, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	if st, _ := r.PodStatus(ctx, pod, podstatus.GenerateOptions{}); st.Reason == ReasonProviderFailed {
		t.Errorf("status still %s after a create worked", st.Reason)
	}
}
