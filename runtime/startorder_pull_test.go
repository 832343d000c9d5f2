package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodekit/nodekit/podstate"

	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// blockingPulls holds every PullImage until release is closed, telling
// pulling when one starts.
type blockingPulls struct {
	cri.ImageManagerService
	pulling chan struct{}
	release chan struct{}
}

func (b *blockingPulls) PullImage(ctx context.Context, img *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	b.pulling <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return b.ImageManagerService.PullImage(ctx, img, auth, sandbox)
}

// With one pod start at a time, a pod pulling its image gives its turn up:
// a pod whose image is present starts meanwhile, and the first pod starts
// once its pull is done.
func TestPodStartTurnIsNotHeldOverAPull(t *testing.T) {
	var pulls *blockingPulls
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakecri.Options{PullAny: true}, func(o *runtime.PodManagerOptions) {
		o.MaxParallelPodStarts = 1
		o.Registerer = reg
		pulls = &blockingPulls{ImageManagerService: o.Images, pulling: make(chan struct{}, 1), release: make(chan struct{})}
		o.Images = pulls
	})
	slowCtr := ctr("app", "sleep", "3600")
	slowCtr.Image = "example.com/slow:v1"
	slow := newPod("slow", slowCtr)
	fast := newPod("fast", ctr("app", "sleep", "3600"))

	slowStatus := h.status(slow)
	slowDone := make(chan runtime.SyncResult, 1)
	go func() { slowDone <- h.pm.SyncPod(h.ctx, slow, slowStatus, runtime.SyncInput{Volumes: h.volumes(slow)}) }()
	select {
	case <-pulls.pulling:
	case res := <-slowDone:
		t.Fatalf("the pod needing a pull synced without pulling: %+v", res)
	}
	// The only turn is free while slow pulls: fast starts now.
	fastStatus := h.status(fast)
	fastDone := make(chan runtime.SyncResult, 1)
	go func() { fastDone <- h.pm.SyncPod(h.ctx, fast, fastStatus, runtime.SyncInput{Volumes: h.volumes(fast)}) }()
	select {
	case res := <-fastDone:
		if res.Err != nil || len(res.Waiting) != 0 {
			t.Fatalf("pod fast, started during another pod's pull: %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("pod fast did not start while pod slow pulled its image: the pull holds the only turn")
	}
	if c := h.container(fast, "app"); c.State != podstate.ContainerStateRunning {
		t.Fatalf("container of pod fast is %s, want running", c.State)
	}
	close(pulls.release)
	if res := <-slowDone; res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("pod slow after its pull: %+v", res)
	}
	if c := h.container(slow, "app"); c.State != podstate.ContainerStateRunning {
		t.Fatalf("container of pod slow is %s, want running", c.State)
	}
	// Three turns taken: slow's, fast's, slow's again after its pull.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var turns uint64
	for _, f := range families {
		if f.GetName() == "nodekit_pod_start_turn_wait_seconds" {
			turns = f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if turns != 3 {
		t.Fatalf("%d start turn waits observed, want 3 (slow, fast, slow after its pull)", turns)
	}
}
