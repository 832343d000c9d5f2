package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

func podLevel(cpuReq, cpuLim, memReq, memLim string) *v1.ResourceRequirements {
	return &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq), v1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// TestResizePodLevelInPlace: a container without limits of a pod with
// pod-level limits runs with the pod's (as the kubelet's getCPULimit and
// getMemoryLimit); a resize of the pod-level resources
// (InPlacePodLevelResourcesVerticalScaling) updates the pod's cgroup and
// those containers in the kubelet's order — memory shrinks here
// (containers first, then the pod's cgroup), cpu grows (the pod's cgroup
// first) — without a restart, leaves a container with limits of its own
// alone, and records what the pod's cgroup was given.
func TestResizePodLevelInPlace(t *testing.T) {
	type podCgroupCall struct {
		memLimit, cpuLimit string
		appMemory, appCPU  int64
	}
	var calls []podCgroupCall
	var h *harness
	h = newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.UpdatePodCgroup = func(_ context.Context, pod *v1.Pod) error {
			l := h.status(pod).Container("app").Reported.Limits
			q := l[v1.ResourceCPU]
			calls = append(calls, podCgroupCall{memLimit: pod.Spec.Resources.Limits.Memory().String(), cpuLimit: pod.Spec.Resources.Limits.Cpu().String(),
				appMemory: l.Memory().Value(), appCPU: q.MilliValue()})
			return nil
		}
	})
	app := ctr("app")
	app.Resources = v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}
	side := ctr("side")
	side.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("16Mi")},
	}
	pod := newPod("plr", app, side)
	pod.Spec.Resources = podLevel("200m", "400m", "64Mi", "128Mi")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	before := h.container(pod, "app")
	if q := before.Reported.Limits[v1.ResourceCPU]; before.Reported.Limits.Memory().Value() != 128<<20 || q.MilliValue() != 400 {
		t.Fatalf("app runs with %v, want the pod-level limits 400m and 128Mi", before.Reported.Limits)
	}
	if got, ok := h.pm.PodLevelActuated(pod.UID); !ok || podstate.ComputeResourcesOf(got) != podstate.ComputeResourcesOf(pod.Spec.Resources) {
		t.Errorf("pod-level resources actuated %v (%t), want those the cgroup was made with", got, ok)
	}
	sideBefore := h.container(pod, "side")

	pod.Spec.Resources = podLevel("300m", "600m", "64Mi", "96Mi")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	c := h.container(pod, "app")
	if c.ID != before.ID || c.RestartCount != 0 {
		t.Fatalf("app %s (restarts %d), want %s resized in place", c.ID, c.RestartCount, before.ID)
	}
	if q := c.Reported.Limits[v1.ResourceCPU]; c.Reported.Limits.Memory().Value() != 96<<20 || q.MilliValue() != 600 {
		t.Errorf("app runs with %v, want the new pod-level limits 600m and 96Mi", c.Reported.Limits)
	}
	if s := h.container(pod, "side"); s.ID != sideBefore.ID || podstate.ComputeResourcesOf(s.Reported) != podstate.ComputeResourcesOf(sideBefore.Reported) {
		t.Errorf("side %s runs with %v, want %s unchanged", s.ID, s.Reported, sideBefore.ID)
	}
	want := []podCgroupCall{
		{memLimit: "96Mi", cpuLimit: "400m", appMemory: 96 << 20, appCPU: 400}, // memory shrinks: containers first
		{memLimit: "96Mi", cpuLimit: "600m", appMemory: 96 << 20, appCPU: 400}, // cpu grows: the pod's cgroup first
	}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("pod cgroup updates %+v, want %+v", calls, want)
	}
	if n := h.cri.Calls("UpdateContainerResources"); n != 2 {
		t.Errorf("UpdateContainerResources called %d times, want 2 (app's memory, then cpu)", n)
	}
	if got, _ := h.pm.PodLevelActuated(pod.UID); podstate.ComputeResourcesOf(got) != podstate.ComputeResourcesOf(pod.Spec.Resources) {
		t.Errorf("pod-level resources actuated %v, want %v", got, pod.Spec.Resources)
	}
	if res := h.sync(pod, nil); res.Err != nil || h.cri.Calls("UpdateContainerResources") != 2 || len(calls) != 2 {
		t.Errorf("second sync: %v, %d updates, %d pod cgroup updates", res.Err, h.cri.Calls("UpdateContainerResources"), len(calls))
	}
}

// TestResizePodLevelMemoryBelowUsage: a pod-level memory limit cut below
// what the pod's containers use (fakecri reports 4 MiB each) is refused
// before anything changes, with the kubelet's message.
func TestResizePodLevelMemoryBelowUsage(t *testing.T) {
	updates := 0
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.UpdatePodCgroup = func(context.Context, *v1.Pod) error { updates++; return nil }
	})
	pod := newPod("plr", ctr("a"), ctr("b"))
	pod.Spec.Resources = podLevel("100m", "200m", "32Mi", "64Mi")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	pod.Spec.Resources = podLevel("100m", "200m", "6Mi", "6Mi")
	res := h.sync(pod, nil)
	want := fmt.Sprintf("cannot decrease memory limits: attempting to set pod memory limit (%d) below current usage (%d)", 6<<20, 2*fakecri.DefaultContainerMemory)
	if !errors.Is(res.Err, runtime.ErrResizePodInPlace) || !strings.Contains(h.pm.ResizeError(pod.UID), want) {
		t.Fatalf("sync error %v, ResizeError %q; want %q", res.Err, h.pm.ResizeError(pod.UID), want)
	}
	if n := h.cri.Calls("UpdateContainerResources"); n != 0 || updates != 0 {
		t.Errorf("%d container and %d pod cgroup updates, want none", n, updates)
	}
}

// TestPodLevelCgroupSetAfterRestart: an agent that does not know what a
// running pod's cgroup was given (it restarted) sets it to the pod-level
// allocation once, then records it.
func TestPodLevelCgroupSetAfterRestart(t *testing.T) {
	var updates []string
	opts := func(o *runtime.PodManagerOptions) {
		o.UpdatePodCgroup = func(_ context.Context, pod *v1.Pod) error {
			updates = append(updates, pod.Spec.Resources.Limits.Cpu().String())
			return nil
		}
	}
	h := newHarness(t, fakecri.Options{}, opts)
	pod := newPod("plr", ctr("app"))
	pod.Spec.Resources = podLevel("100m", "200m", "32Mi", "64Mi")
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	// A new PodManager on the same runtime: the agent restarted.
	pm, err := runtime.NewPodManager(h.opts)
	if err != nil {
		t.Fatal(err)
	}
	restarted := *h
	restarted.pm = pm
	if _, ok := restarted.pm.PodLevelActuated(pod.UID); ok {
		t.Fatal("a new PodManager knows the pod's cgroup")
	}
	if res := restarted.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(updates) != 1 || updates[0] != "200m" {
		t.Errorf("pod cgroup updates %v, want one to the allocation", updates)
	}
	if got, ok := restarted.pm.PodLevelActuated(pod.UID); !ok || podstate.ComputeResourcesOf(got) != podstate.ComputeResourcesOf(pod.Spec.Resources) {
		t.Errorf("after the sync: actuated %v (%t)", got, ok)
	}
	if res := restarted.sync(pod, nil); res.Err != nil || len(updates) != 1 {
		t.Errorf("second sync: %v, %d pod cgroup updates", res.Err, len(updates))
	}
	if n := restarted.cri.Calls("UpdateContainerResources"); n != 0 {
		t.Errorf("UpdateContainerResources called %d times", n)
	}
}
