package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

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

// slowSandboxes makes every sandbox creation take a second on clk: a
// runtime slow enough for the start bound to hold.
type slowSandboxes struct {
	cri.RuntimeService
	clk *clocktesting.FakeClock
}

func (s *slowSandboxes) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	id, err := s.RuntimeService.RunPodSandbox(ctx, cfg, handler)
	s.clk.Step(time.Second)
	return id, err
}

// With one pod start at a time on a runtime slow to create sandboxes, a
// pod pulling its image gives its turn up: a pod whose image is present
// starts meanwhile, and the first pod starts once its pull is done.
func TestPodStartTurnIsNotHeldOverAPull(t *testing.T) {
	var pulls *blockingPulls
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakecri.Options{PullAny: true}, func(o *runtime.PodManagerOptions) {
		o.MaxParallelPodStarts = 1
		o.Registerer = reg
		pulls = &blockingPulls{ImageManagerService: o.Images, pulling: make(chan struct{}, 1), release: make(chan struct{})}
		o.Images = pulls
		o.Runtime = &slowSandboxes{RuntimeService: o.Runtime, clk: o.Clock.(*clocktesting.FakeClock)}
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

// heldCreates holds the CreateContainer calls of the pod named pod until
// release is closed, telling creating when one starts.
type heldCreates struct {
	cri.RuntimeService
	pod      string
	creating chan struct{}
	release  chan struct{}
}

func (h *heldCreates) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	if sandbox.GetMetadata().GetName() == h.pod {
		h.creating <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return h.RuntimeService.CreateContainer(ctx, sandboxID, cfg, sandbox)
}

// With one pod start at a time, a runtime that creates sandboxes fast (the
// fake one, on a fake clock: in no time) lifts the bound: while a pod holds
// the only turn, another pod starts all the same.
func TestPodStartsAreNotBoundOnAFastRuntime(t *testing.T) {
	var held *heldCreates
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.MaxParallelPodStarts = 1
		held = &heldCreates{RuntimeService: o.Runtime, pod: "first", creating: make(chan struct{}, 1), release: make(chan struct{})}
		o.Runtime = held
	})
	first, second := newPod("first", ctr("app", "sleep", "3600")), newPod("second", ctr("app", "sleep", "3600"))
	firstStatus := h.status(first)
	firstDone := make(chan runtime.SyncResult, 1)
	go func() {
		firstDone <- h.pm.SyncPod(h.ctx, first, firstStatus, runtime.SyncInput{Volumes: h.volumes(first)})
	}()
	select {
	case <-held.creating:
	case res := <-firstDone:
		t.Fatalf("pod first synced without creating its container: %+v", res)
	}
	// first holds the only turn, its sandbox created in no time.
	secondStatus := h.status(second)
	secondDone := make(chan runtime.SyncResult, 1)
	go func() {
		secondDone <- h.pm.SyncPod(h.ctx, second, secondStatus, runtime.SyncInput{Volumes: h.volumes(second)})
	}()
	select {
	case res := <-secondDone:
		if res.Err != nil || len(res.Waiting) != 0 {
			t.Fatalf("pod second: %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("pod second did not start while pod first held the only turn: the bound held on a fast runtime")
	}
	if c := h.container(second, "app"); c.State != podstate.ContainerStateRunning {
		t.Fatalf("container of pod second is %s, want running", c.State)
	}
	close(held.release)
	if res := <-firstDone; res.Err != nil {
		t.Fatalf("pod first: %+v", res)
	}
}
