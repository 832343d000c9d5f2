package runtime_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// fakeDRA is a runtime.DynamicResources recording its calls.
type fakeDRA struct {
	mu         sync.Mutex
	prepareErr error
	calls      []string
}

func (f *fakeDRA) record(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if call == "prepare" {
		return f.prepareErr
	}
	return nil
}

func (f *fakeDRA) PrepareResources(_ context.Context, pod *v1.Pod) error {
	return f.record("prepare")
}

func (f *fakeDRA) UnprepareResources(_ context.Context, pod *v1.Pod) error {
	return f.record("unprepare")
}

func (f *fakeDRA) ApplyContainerConfig(_ context.Context, _ *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	if err := f.record("config " + c.Name); err != nil {
		return err
	}
	cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: "example.com/gpu=" + c.Name})
	return nil
}

func (f *fakeDRA) history() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// TestDynamicResources: a pod's claims are prepared before its sandbox
// (a failure records FailedPrepareDynamicResources and creates nothing),
// its containers get their CDI devices before the device plugins' hook,
// and KillPod releases the claims once the containers stopped.
func TestDynamicResources(t *testing.T) {
	dra := &fakeDRA{prepareErr: errors.New("prepare dynamic resources: DRA driver gpu.example.com is not registered")}
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.DynamicResources = dra
		o.ContainerConfigHook = func(_ context.Context, _ *v1.Pod, _ *v1.Container, cfg *runtimeapi.ContainerConfig) error {
			cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: "vendor.com/dp=0"})
			return nil
		}
	})
	pleg, err := runtime.NewPLEG(runtime.PLEGOptions{Pods: h.pm, Runtime: h.client.RuntimeService(), Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	b, err := runtime.NewBackend(runtime.BackendOptions{Pods: h.pm, PLEG: pleg, Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod("dra", ctr("app"))
	if res := b.SyncPod(h.ctx, pod); res.Err == nil || h.cri.Calls("RunPodSandbox") != 0 {
		t.Fatalf("sync with claims that cannot be prepared: %v, %d sandboxes; want an error and no sandbox", res.Err, h.cri.Calls("RunPodSandbox"))
	}
	wantEvents(t, h.events(), "Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: prepare dynamic resources: DRA driver gpu.example.com is not registered")

	dra.mu.Lock()
	dra.prepareErr = nil
	dra.mu.Unlock()
	if res := b.SyncPod(h.ctx, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	c := h.container(pod, "app")
	var cdi []string
	for _, d := range h.cri.ContainerConfig(c.ID).CDIDevices {
		cdi = append(cdi, d.Name)
	}
	if want := []string{"example.com/gpu=app", "vendor.com/dp=0"}; !slices.Equal(cdi, want) {
		t.Errorf("the container's CDI devices %v, want %v", cdi, want)
	}
	if err := b.KillPod(h.ctx, pod, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := dra.history(), []string{"prepare", "prepare", "config app", "unprepare"}; !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
}
