package memorymanager_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/resources/memorymanager"
	"github.com/nodekit/nodekit/resources/topology"
)

// A Static memory manager on 2 NUMA nodes of 1 GiB, 100 MiB reserved on
// node 0: a Guaranteed container asking for 512 MiB is created with
// cpuset.mems 0.
func Example() {
	m, err := memorymanager.New(memorymanager.Options{
		Policy:                     memorymanager.PolicyStatic,
		Machine:                    topology.Synthetic(1, 2, 2, 1, 1<<30),
		ReservedMemory:             []kubeletconfig.MemoryReservation{{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")}}},
		NodeAllocatableReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")},
	})
	if err != nil {
		panic(err)
	}
	rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("512Mi")}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "cache", Resources: v1.ResourceRequirements{Requests: rl, Limits: rl}}}},
	}
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		panic(err)
	}
	cfg := &runtimeapi.ContainerConfig{}
	if err := m.ApplyContainerConfig(context.Background(), pod, &pod.Spec.Containers[0], cfg); err != nil {
		panic(err)
	}
	fmt.Println("cpuset.mems:", cfg.Linux.Resources.CpusetMems)
	// Output: cpuset.mems: 0
}
