package topologymanager_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// nic is a hint provider whose device sits on NUMA node 1.
type nic struct{}

func (nic) GetTopologyHints(*v1.Pod, *v1.Container) map[string][]topologymanager.TopologyHint {
	node1, _ := topologymanager.NewBitMask(1)
	return map[string][]topologymanager.TopologyHint{"example.com/nic": {{NUMANodeAffinity: node1, Preferred: true}}}
}

func (n nic) GetPodTopologyHints(pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	return n.GetTopologyHints(pod, nil)
}

func (nic) Allocate(*v1.Pod, *v1.Container) error { return nil }

// The single-numa-node policy on 2 NUMA nodes: a container whose device
// sits on node 1 is given node 1, which the CPU and memory managers then
// follow.
func Example() {
	m, err := topologymanager.New(topologymanager.Options{
		Policy:  topologymanager.PolicySingleNumaNode,
		Machine: topology.Synthetic(1, 2, 4, 1, 1<<30),
	})
	if err != nil {
		panic(err)
	}
	m.AddHintProvider(nic{})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-1"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	fmt.Println(m.Admit(pod), m.GetAffinity("uid-1", "c").NUMANodeAffinity.Bits())
	// Output: <nil> [1]
}
