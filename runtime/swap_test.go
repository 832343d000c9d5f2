package runtime_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestContainerSwapLimits: the CRI resources carry the kubelet's swap
// settings: on cgroup v2 memory.swap.max 0 (NoSwap) for every container
// but, under LimitedSwap, those of non-critical Burstable pods whose
// memory request differs from their limit, which get (request / node
// memory) × node swap; on cgroup v1 the memory+swap limit is the memory
// limit; nothing without the swap controller.
func TestContainerSwapLimits(t *testing.T) {
	const memory, swap = 8 << 30, 4 << 30
	burstable := func(req, limit string) v1.ResourceRequirements {
		r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
		if req != "" {
			r.Requests[v1.ResourceMemory] = resource.MustParse(req)
		}
		if limit != "" {
			r.Limits[v1.ResourceMemory] = resource.MustParse(limit)
		}
		return r
	}
	critical := func(p *v1.Pod) bool { return p.Spec.Priority != nil && *p.Spec.Priority >= 2_000_000_000 }
	for _, tc := range []struct {
		name       string
		behavior   string
		cgroup     int
		controller bool
		qos        v1.PodQOSClass
		priority   int32
		resources  v1.ResourceRequirements
		// wantMax is memory.swap.max, "" for none; wantV1 the v1
		// memory+swap limit.
		wantMax string
		wantV1  int64
	}{
		{name: "LimitedSwap, Burstable", behavior: runtime.LimitedSwap, cgroup: 2, controller: true, qos: v1.PodQOSBurstable,
			resources: burstable("1Gi", "2Gi"), wantMax: "536870912"},
		{name: "LimitedSwap, Burstable without a limit", behavior: runtime.LimitedSwap, cgroup: 2, controller: true, qos: v1.PodQOSBurstable,
			resources: burstable("2Gi", ""), wantMax: "1073741824"},
		{name: "LimitedSwap, request equal to the limit", behavior: runtime.LimitedSwap, cgroup: 2, controller: true, qos: v1.PodQOSBurstable,
			resources: burstable("1Gi", "1Gi"), wantMax: "0"},
		{name: "LimitedSwap, no memory request or limit", behavior: runtime.LimitedSwap, cgroup: 2, controller: true, qos: v1.PodQOSBurstable,
			resources: burstable("", ""), wantMax: "0"},
		{name: "LimitedSwap, Guaranteed", behavior: runtime.LimitedSwap, cgroup: 2, controller: true, qos: v1.PodQOSGuaranteed,
			resources: burstable("1Gi", "2Gi"), wantMax: "0"},
		{name: "LimitedSwap, BestEffort", behavior: runtime.LimitedSwap, cgroup: 2, controller: true, qos: v1.PodQOSBestEffort, wantMax: "0"},
		{name: "LimitedSwap, critical", behavior: runtime.LimitedSwap, cgroup: 2, controller: true, qos: v1.PodQOSBurstable, priority: 2_000_001_000,
			resources: burstable("1Gi", "2Gi"), wantMax: "0"},
		{name: "NoSwap", behavior: runtime.NoSwap, cgroup: 2, controller: true, qos: v1.PodQOSBurstable,
			resources: burstable("1Gi", "2Gi"), wantMax: "0"},
		{name: "default", cgroup: 2, controller: true, qos: v1.PodQOSBurstable, resources: burstable("1Gi", "2Gi"), wantMax: "0"},
		{name: "no swap controller", behavior: runtime.LimitedSwap, cgroup: 2, qos: v1.PodQOSBurstable, resources: burstable("1Gi", "2Gi")},
		{name: "cgroup v1", behavior: runtime.NoSwap, cgroup: 1, controller: true, qos: v1.PodQOSBurstable,
			resources: burstable("1Gi", "2Gi"), wantV1: 2 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
				o.MemoryCapacity = memory
				o.CgroupVersion = func() (int, error) { return tc.cgroup, nil }
				o.Swap = &runtime.SwapOptions{
					Behavior: tc.behavior, Capacity: swap, Critical: critical,
					ControllerAvailable: func(bool) bool { return tc.controller },
				}
			})
			app := ctr("app")
			app.Resources = tc.resources
			pod := newPod("swap", app)
			pod.Status.QOSClass = tc.qos
			if tc.priority != 0 {
				pod.Spec.Priority = ptr.To(tc.priority)
			}
			if res := h.sync(pod, nil); res.Err != nil {
				t.Fatal(res.Err)
			}
			r := h.cri.ContainerConfig(h.container(pod, "app").ID).GetLinux().GetResources()
			got, ok := r.GetUnified()["memory.swap.max"]
			if tc.wantMax == "" && ok || tc.wantMax != "" && got != tc.wantMax {
				t.Errorf("memory.swap.max %q (set: %v), want %q", got, ok, tc.wantMax)
			}
			if r.GetMemorySwapLimitInBytes() != tc.wantV1 {
				t.Errorf("memory+swap limit %d, want %d", r.GetMemorySwapLimitInBytes(), tc.wantV1)
			}
		})
	}
}

// TestSwapBehaviorValidated: an unknown swap behavior is refused with the
// kubelet's message, LimitedSwap without a critical-pod test too.
func TestSwapBehaviorValidated(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	for _, tc := range []struct {
		swap runtime.SwapOptions
		want string
	}{
		{runtime.SwapOptions{Behavior: "UnlimitedSwap"}, `memorySwap.swapBehavior "UnlimitedSwap" must be one of: "", "LimitedSwap" or "NoSwap"`},
		{runtime.SwapOptions{Behavior: runtime.LimitedSwap}, "needs SwapOptions.Critical"},
	} {
		_, err := runtime.NewPodManager(runtime.PodManagerOptions{Runtime: h.client.RuntimeService(), Images: h.client.ImageService(), Swap: &tc.swap})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.swap, err, tc.want)
		}
	}
}
