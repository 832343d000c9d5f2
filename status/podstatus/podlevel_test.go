package podstatus_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

func plr(cpuReq, cpuLim, memReq, memLim string) *v1.ResourceRequirements {
	return &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq), v1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// TestPodLevelResizeStatus: for a running pod with pod-level resources,
// status.resources are what its cgroup was given
// (GenerateOptions.PodLevelActuated), allocatedResources the allocation;
// while they differ the pod is PodResizeInProgress; a container without
// limits counts with the pod-level ones; a pod not running yet reports the
// allocation.
func TestPodLevelResizeStatus(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	p.Status.Phase = v1.PodRunning
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}
	p.Spec.Resources = plr("200m", "400m", "64Mi", "128Mi")
	c := running("a", t0)
	c.Resources = podstate.EffectiveResources(p.Spec.Resources, &p.Spec.Containers[0].Resources)
	opts := podstatus.GenerateOptions{PodLevelActuated: p.Spec.Resources.DeepCopy()}
	s := podstatus.Generate(p, rt(c), nil, opts)
	if cond := findCond(s, v1.PodResizeInProgress); cond != nil {
		t.Errorf("nothing to resize (the container runs with the pod-level limits), yet %+v", cond)
	}
	if !equality.Semantic.DeepEqual(s.Resources, p.Spec.Resources) {
		t.Errorf("status resources %v, want %v", s.Resources, p.Spec.Resources)
	}

	// The allocation changes; the pod's cgroup still has the old values
	// (its container already the new ones).
	p.Spec.Resources = plr("300m", "600m", "64Mi", "96Mi")
	c.Resources = podstate.EffectiveResources(p.Spec.Resources, &p.Spec.Containers[0].Resources)
	s = podstatus.Generate(p, rt(c), nil, opts)
	if cond := findCond(s, v1.PodResizeInProgress); cond == nil || cond.Status != v1.ConditionTrue {
		t.Errorf("pod-level resize not actuated: PodResizeInProgress = %+v, want True", cond)
	}
	if want := plr("200m", "400m", "64Mi", "128Mi"); !equality.Semantic.DeepEqual(s.Resources, want) {
		t.Errorf("status resources %v, want what the cgroup has %v", s.Resources, want)
	}
	if got := s.AllocatedResources[v1.ResourceCPU]; got.Cmp(resource.MustParse("300m")) != 0 {
		t.Errorf("allocated cpu %s, want 300m", got.String())
	}

	// Actuated.
	opts.PodLevelActuated = p.Spec.Resources.DeepCopy()
	s = podstatus.Generate(p, rt(c), nil, opts)
	if cond := findCond(s, v1.PodResizeInProgress); cond != nil {
		t.Errorf("resize actuated, yet %+v", cond)
	}
	if !equality.Semantic.DeepEqual(s.Resources, p.Spec.Resources) {
		t.Errorf("status resources %v, want %v", s.Resources, p.Spec.Resources)
	}

	// Not running yet: the allocation, whatever the cgroup.
	p.Status.Phase = v1.PodPending
	opts.PodLevelActuated = plr("1", "2", "1Gi", "2Gi")
	if s = podstatus.Generate(p, rt(c), nil, opts); !equality.Semantic.DeepEqual(s.Resources, p.Spec.Resources) {
		t.Errorf("pending pod: status resources %v, want the allocation %v", s.Resources, p.Spec.Resources)
	}
}
