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
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/status/podstatus"
)

// flakyBackend fails CreatePod while createErr is set and UpdatePod while
// updateErr is, and runs nothing.
type flakyBackend struct {
	mu        sync.Mutex
	createErr error
	updateErr error
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
func (b *flakyBackend) UpdatePod(context.Context, *v1.Pod) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.updateErr
}
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

// TestBackendFailureIsInTheStatus: a CreatePod or UpdatePod error is the
// pod's status reason ProviderFailed with the error as message, a
// ProviderCreateFailed or ProviderUpdateFailed warning event, as
// virtual-kubelet, and an error-level line naming the pod; a pod that must
// not restart fails; once the call works the reason goes.
func TestBackendFailureIsInTheStatus(t *testing.T) {
	b := &flakyBackend{createErr: errors.New("quota exceeded"), created: map[string]bool{}}
	rec := record.NewFakeRecorder(10)
	r, err := NewBackendRuntime(b, BackendRuntimeOptions{Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	errorLines := func() (lines []string) {
		for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
			if e.Type == ktesting.LogError {
				lines = append(lines, fmt.Sprint(e.Message, e.Err, e.ParameterKVList))
			}
		}
		return lines
	}
	// works lets the backend's calls work and checks that the failure
	// leaves pod's status.
	works := func(what string, pod *v1.Pod) {
		t.Helper()
		b.mu.Lock()
		b.createErr, b.updateErr = nil, nil
		b.mu.Unlock()
		if res := r.SyncPod(ctx, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		if st, _ := r.PodStatus(ctx, pod, podstatus.GenerateOptions{}); st.Reason == ReasonProviderFailed {
			t.Errorf("status still %s after %s worked", st.Reason, what)
		}
	}
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
	wantEvent(t, rec, "Warning ProviderCreateFailed quota exceeded")
	never := pod.DeepCopy()
	never.Spec.RestartPolicy = v1.RestartPolicyNever
	if st, _ := r.PodStatus(ctx, never, podstatus.GenerateOptions{}); st.Phase != v1.PodFailed || st.Reason != ReasonProviderFailed {
		t.Errorf("status of a restartPolicy Never pod after a failed create: %s %s, want Failed ProviderFailed", st.Phase, st.Reason)
	}
	works("a create", pod)

	b.mu.Lock()
	b.updateErr = errors.New("image not allowed")
	b.mu.Unlock()
	updated := pod.DeepCopy()
	updated.Spec.Containers[0].Image = "nginx:2"
	if res := r.SyncPod(ctx, updated); res.Err == nil || !strings.Contains(res.Err.Error(), "update pod default/web in the backend: image not allowed") {
		t.Fatalf("SyncPod of a changed spec = %v, want the backend's error naming the pod", res.Err)
	}
	if st, _ := r.PodStatus(ctx, updated, podstatus.GenerateOptions{}); st.Reason != ReasonProviderFailed || st.Message != "image not allowed" {
		t.Errorf("status after a failed update: %s %q, want ProviderFailed \"image not allowed\"", st.Reason, st.Message)
	}
	wantEvent(t, rec, "Warning ProviderUpdateFailed image not allowed")
	if lines := errorLines(); len(lines) != 2 || !strings.Contains(lines[0], "quota exceeded [pod default/web") || !strings.Contains(lines[1], "image not allowed [pod default/web") {
		t.Errorf("error lines %q, want the create's and the update's, naming the pod", lines)
	}
	works("an update", updated)
}

// wantEvent checks that rec's next event, already recorded, is want.
func wantEvent(t *testing.T, rec *record.FakeRecorder, want string) {
	t.Helper()
	select {
	case ev := <-rec.Events:
		if ev != want {
			t.Errorf("event %q, want %q", ev, want)
		}
	default:
		t.Errorf("no event, want %q", want)
	}
}
