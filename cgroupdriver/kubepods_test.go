package cgroupdriver

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestKubepodsLimits: capacity less the reservations with "pods" enforced,
// floored at zero, the whole capacity otherwise; the arguments unchanged.
func TestKubepodsLimits(t *testing.T) {
	capacity := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
	kube := v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("512Mi")}
	system := v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi"), v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
	huge := v1.ResourceList{v1.ResourceCPU: resource.MustParse("5")}
	for _, tc := range []struct {
		name     string
		enforce  bool
		reserved []v1.ResourceList
		cpu, mem string
	}{
		{"pods enforced", true, []v1.ResourceList{kube, system}, "3500m", "7Gi"},
		{"not enforced", false, []v1.ResourceList{kube, system}, "4", "8Gi"},
		{"more reserved than the machine has", true, []v1.ResourceList{huge}, "0", "8Gi"},
	} {
		got := KubepodsLimits(capacity, tc.enforce, tc.reserved...)
		if cpu, mem := got[v1.ResourceCPU], got[v1.ResourceMemory]; cpu.Cmp(resource.MustParse(tc.cpu)) != 0 || mem.Cmp(resource.MustParse(tc.mem)) != 0 {
			t.Errorf("%s: cpu/memory = %s/%s, want %s/%s", tc.name, cpu.String(), mem.String(), tc.cpu, tc.mem)
		}
		if _, ok := got[v1.ResourceEphemeralStorage]; ok {
			t.Errorf("%s: a reserved resource the capacity lacks was added: %v", tc.name, got)
		}
	}
	if cpu := capacity[v1.ResourceCPU]; cpu.Cmp(resource.MustParse("4")) != 0 {
		t.Errorf("the capacity was modified: %v", capacity)
	}
}
