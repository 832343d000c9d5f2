package runtime_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestSyncOfANewPodReturnsItsStatus: the first sync of a pod the runtime
// has nothing of returns the pod's runtime status (SyncResult.Status),
// equal to what GetPodStatus reads after it, read with one ContainerStatus
// call per created container but no list and no PodSandboxStatus beyond
// the one that reads the new sandbox's IPs; a sync of a pod the runtime
// holds, or one that failed, returns none.
func TestSyncOfANewPodReturnsItsStatus(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("web", ctr("app", "sleep", "3600"), ctr("side", "sleep", "3600"))
	before := h.status(pod)
	calls := func() map[string]int {
		m := map[string]int{}
		for _, c := range []string{"ListPodSandbox", "PodSandboxStatus", "ListContainers", "ContainerStatus"} {
			m[c] = h.cri.Calls(c)
		}
		return m
	}
	was := calls()
	res := h.pm.SyncPod(h.ctx, pod, before, runtime.SyncInput{Volumes: h.volumes(pod)})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	now := calls()
	for c, want := range map[string]int{"ListPodSandbox": 0, "PodSandboxStatus": 1, "ListContainers": 0, "ContainerStatus": 2} {
		if got := now[c] - was[c]; got != want {
			t.Errorf("%s calls during the sync: %d, want %d", c, got, want)
		}
	}
	if res.Status == nil {
		t.Fatal("the first sync of a new pod returned no status")
	}
	read := h.status(pod)
	// Containers created at the same instant (the fake clock) come in
	// either order.
	a, b := *read, *res.Status
	a.TimeStamp = b.TimeStamp
	for _, st := range []*podstate.PodStatus{&a, &b} {
		st.Containers = slices.Clone(st.Containers)
		slices.SortFunc(st.Containers, func(x, y *podstate.ContainerStatus) int { return strings.Compare(x.ID, y.ID) })
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the sync's status differs from GetPodStatus's:\nread %+v\nsync %+v", a, b)
		for i := range min(len(a.Sandboxes), len(b.Sandboxes)) {
			t.Logf("sandbox %d: read %+v sync %+v", i, *a.Sandboxes[i], *b.Sandboxes[i])
		}
		for i := range min(len(a.Containers), len(b.Containers)) {
			t.Logf("container %d: read %+v sync %+v", i, *a.Containers[i], *b.Containers[i])
		}
	}
	if len(res.Status.Containers) != 2 || res.Status.Containers[0].State != podstate.ContainerStateRunning {
		t.Errorf("containers %+v, want 2 running", res.Status.Containers)
	}

	// The runtime holds the pod now: a sync (nothing to do) returns none.
	if res := h.sync(pod, nil); res.Status != nil {
		t.Errorf("a sync of a pod the runtime holds returned a status")
	}

	// A new pod whose container cannot be created: no status.
	bad := newPod("bad", v1.Container{Name: "app", Image: "missing:1", ImagePullPolicy: v1.PullNever})
	if res := h.sync(bad, nil); res.Err == nil || res.Status != nil {
		t.Errorf("a failed sync: err %v, status %v; want an error and no status", res.Err, res.Status)
	}
}
