package agent

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

type nodeGetter struct{ node *v1.Node }

func (g nodeGetter) Node() (*v1.Node, bool) { return g.node, g.node != nil }

// TestKubepodsResources: the kubepods cgroup enforces the capacity less
// kubeReserved and systemReserved, not the allocatable (which also lacks the
// hard eviction thresholds), and the capacity without "pods" in
// enforceNodeAllocatable, as the kubelet.
func TestKubepodsResources(t *testing.T) {
	node := &v1.Node{Status: v1.NodeStatus{
		Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("3"), v1.ResourceMemory: resource.MustParse("6Gi")},
	}}
	for _, tc := range []struct {
		name     string
		enforce  []string
		cpu, mem string
	}{
		{"pods enforced", []string{"pods"}, "3500m", "7Gi"},
		{"not enforced", []string{}, "4", "8Gi"},
	} {
		cfg := &Config{}
		cfg.Kubelet.KubeReserved = map[string]string{"cpu": "500m", "memory": "512Mi"}
		cfg.Kubelet.SystemReserved = map[string]string{"memory": "512Mi"}
		cfg.Kubelet.EvictionHard = map[string]string{"memory.available": "1Gi"}
		cfg.Kubelet.EnforceNodeAllocatable = tc.enforce
		limits, err := kubepodsResources(cfg, nodeGetter{node})
		if err != nil {
			t.Fatal(err)
		}
		got := limits()
		if cpu, mem := got[v1.ResourceCPU], got[v1.ResourceMemory]; cpu.Cmp(resource.MustParse(tc.cpu)) != 0 || mem.Cmp(resource.MustParse(tc.mem)) != 0 {
			t.Errorf("%s: kubepods cpu/memory = %s/%s, want %s/%s", tc.name, cpu.String(), mem.String(), tc.cpu, tc.mem)
		}
	}
	limits, err := kubepodsResources(&Config{}, nodeGetter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := limits(); got != nil {
		t.Errorf("kubepods before the node is known = %v, want nil (left as is)", got)
	}
}
