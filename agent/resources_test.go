package agent

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/resources/topology"
)

const kubeletConfigHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// The resource managers' settings are checked with the kubelet's
// validation messages.
func TestResourceManagerValidation(t *testing.T) {
	for _, tc := range []struct {
		file string
		want string
	}{
		{"topologyManagerPolicy: tight\n", `invalid configuration: topologyManagerPolicy (--topology-manager-policy) "tight" must be one of: ["none" "best-effort" "restricted" "single-numa-node"]`},
		{"topologyManagerScope: node\n", `invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be one of: "container", or "pod"`},
		{"reservedSystemCPUs: \"0-\"\n", "invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) 0-"},
		{"reservedSystemCPUs: \"0\"\nsystemReservedCgroup: /system\n", "invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)"},
		{"reservedMemory:\n- numaNode: 0\n  limits:\n    cpu: 1\n", `invalid configuration: the limit type "cpu" for NUMA node 0 is not supported, only [memory hugepages-<HugePageSize>] is accepted`},
		{"reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 0\n", `invalid configuration: reserved memory may not be zero for NUMA node 0 and resource "memory"`},
	} {
		file := writeFile(t, "kubelet.yaml", kubeletConfigHeader+tc.file)
		_, err := ParseFlags(klog.Background(), []string{"--config=" + file, "--hostname-override=n"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.file, err, tc.want)
		}
	}
}

// reservedSystemCPUs becomes the CPU reservation, as the kubelet: node
// allocatable and the static policy see 2 reserved CPUs, kubeReserved's
// cpu is dropped.
func TestReservedSystemCPUsOverrideReservation(t *testing.T) {
	file := writeFile(t, "kubelet.yaml", kubeletConfigHeader+"reservedSystemCPUs: \"0,1\"\nkubeReserved:\n  cpu: 500m\n  memory: 1Gi\n")
	cfg, err := ParseFlags(klog.Background(), []string{"--config=" + file, "--hostname-override=n", "--cpu-manager-policy=static", "--cpu-manager-policy-options=full-pcpus-only=true"})
	if err != nil {
		t.Fatal(err)
	}
	kc := &cfg.Kubelet
	if kc.SystemReserved["cpu"] != "2" || kc.KubeReserved["cpu"] != "" || kc.KubeReserved["memory"] != "1Gi" {
		t.Errorf("kubeReserved %v, systemReserved %v", kc.KubeReserved, kc.SystemReserved)
	}
	if kc.CPUManagerPolicyOptions["full-pcpus-only"] != "true" {
		t.Errorf("cpuManagerPolicyOptions %v", kc.CPUManagerPolicyOptions)
	}
	q, err := cfg.reservedCPU()
	if err != nil || q.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("reserved CPU %s (%v), want 2", q.String(), err)
	}
	so, err := cfg.SetterOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := so.SystemReserved[v1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("node status systemReserved cpu %s, want 2", got.String())
	}
}

// memoryReservation is kubeReserved + systemReserved + the hard eviction
// threshold, a percentage of the machine's memory too.
func TestMemoryReservation(t *testing.T) {
	machine := topology.Synthetic(1, 2, 1, 1, 1<<30)
	for _, tc := range []struct {
		file string
		want string
	}{
		{"", "100Mi"},
		{"kubeReserved:\n  memory: 100Mi\nsystemReserved:\n  memory: 50Mi\n", "250Mi"},
		{"evictionHard:\n  memory.available: 10%\n", "214748364"},
	} {
		file := writeFile(t, "kubelet.yaml", kubeletConfigHeader+tc.file)
		cfg, err := ParseFlags(klog.Background(), []string{"--config=" + file, "--hostname-override=n"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := cfg.memoryReservation(machine)
		if err != nil {
			t.Fatal(err)
		}
		if q := got[v1.ResourceMemory]; q.Cmp(resource.MustParse(tc.want)) != 0 {
			t.Errorf("%q: memory reservation %s, want %s", tc.file, q.String(), tc.want)
		}
	}
}

func TestChainConfigHooks(t *testing.T) {
	if chainConfigHooks(nil, nil) != nil {
		t.Error("no hooks chained into one")
	}
	var order []string
	hook := func(name string) containerConfigHook {
		return func(context.Context, *v1.Pod, *v1.Container, *runtimeapi.ContainerConfig) error {
			order = append(order, name)
			return nil
		}
	}
	if err := chainConfigHooks(hook("devices"), nil, hook("cpus"))(context.Background(), nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "devices,cpus" {
		t.Errorf("hooks ran %v", order)
	}
}
