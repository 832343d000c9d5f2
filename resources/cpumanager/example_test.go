package cpumanager_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/resources/cpumanager"
	"github.com/nodekit/nodekit/resources/topology"
)

// A static CPU manager on a machine of 4 cores with 2 threads each, CPU 0
// (and its sibling 4) reserved: a Guaranteed container asking for 2 CPUs
// gets a whole core of its own, and the shared pool shrinks.
func Example() {
	m, err := cpumanager.New(cpumanager.Options{
		Policy:       cpumanager.PolicyStatic,
		ReservedCPUs: cpuset.New(0, 4),
		Reserved:     resource.MustParse("2"),
		Machine:      topology.Synthetic(1, 1, 4, 2, 1<<30),
	})
	if err != nil {
		panic(err)
	}
	two := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "db", Resources: v1.ResourceRequirements{Requests: two, Limits: two}}}},
	}
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		panic(err)
	}
	fmt.Println("db:", m.ExclusiveCPUs("uid-1", "db"))
	fmt.Println("shared:", m.SharedCPUs())
	// Output:
	// db: 1,5
	// shared: 0,2-4,6-7
}
