package podstate

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestEffectiveResources(t *testing.T) {
	q := resource.MustParse
	c := &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: q("100m")},
		Limits:   v1.ResourceList{v1.ResourceMemory: q("32Mi")},
	}
	if got := EffectiveResources(nil, c); got != c {
		t.Errorf("no pod-level resources: %v, want the container's own", got)
	}
	if got := EffectiveResources(&v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: q("1")}}, c); got != c {
		t.Errorf("pod-level requests only: %v, want the container's own", got)
	}
	pod := &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("1Gi")}}
	got := EffectiveResources(pod, c)
	want := v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: q("100m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("32Mi")},
	}
	if !equality.Semantic.DeepEqual(*got, want) {
		t.Errorf("EffectiveResources = %v, want %v (the container's memory limit, the pod's cpu limit)", got, want)
	}
	if _, ok := c.Limits[v1.ResourceCPU]; ok {
		t.Error("the container's resources were modified")
	}
	if got := EffectiveResources(pod, &v1.ResourceRequirements{}); got.Limits.Cpu().Cmp(q("2")) != 0 || got.Limits.Memory().Cmp(q("1Gi")) != 0 {
		t.Errorf("a container without limits: %v, want the pod's", got)
	}
}
