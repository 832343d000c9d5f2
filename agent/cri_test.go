package agent

import (
	"errors"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/machine"
)

// TestKubepodsResources: the kubepods cgroup enforces the machine's CPUs
// and memory less kubeReserved and systemReserved, not the allocatable
// (which also lacks the hard eviction thresholds), and the whole machine
// without "pods" in enforceNodeAllocatable, as the kubelet.
func TestKubepodsResources(t *testing.T) {
	host := func() (*machine.Info, error) { return &machine.Info{NumCores: 4, MemoryCapacity: 8 << 30}, nil }
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
		limits, err := kubepodsResources(cfg, host, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		got := limits()
		if cpu, mem := got[v1.ResourceCPU], got[v1.ResourceMemory]; cpu.Cmp(resource.MustParse(tc.cpu)) != 0 || mem.Cmp(resource.MustParse(tc.mem)) != 0 {
			t.Errorf("%s: kubepods cpu/memory = %s/%s, want %s/%s", tc.name, cpu.String(), mem.String(), tc.cpu, tc.mem)
		}
	}
	failing := func() (*machine.Info, error) { return nil, errors.New("no /proc") }
	limits, err := kubepodsResources(&Config{}, failing, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if got := limits(); got != nil {
		t.Errorf("kubepods without the machine = %v, want nil (left as is)", got)
	}
	cfg := &Config{}
	cfg.Kubelet.KubeReserved = map[string]string{"memory": "lots"}
	if _, err := kubepodsResources(cfg, host, logr.Discard()); err == nil {
		t.Error("an invalid kubeReserved was accepted")
	}
}
