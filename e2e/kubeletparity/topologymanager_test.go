package kubeletparity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ktm "k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"

	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// fixedHints is a hint provider with fixed hints.
type fixedHints map[string][]topologymanager.TopologyHint

func (f fixedHints) GetTopologyHints(*v1.Pod, *v1.Container) map[string][]topologymanager.TopologyHint {
	return f
}
func (f fixedHints) GetPodTopologyHints(*v1.Pod) map[string][]topologymanager.TopologyHint { return f }
func (f fixedHints) Allocate(*v1.Pod, *v1.Container) error                                 { return nil }

// TestTopologyMergeMatchesKubelet: for random provider hints on 4 NUMA
// nodes (2 per socket), every policy (with and without
// prefer-closest-numa-nodes) picks the same affinity and admits the same
// pods as the kubelet's policies.
func TestTopologyMergeMatchesKubelet(t *testing.T) {
	logger := klog.Background()
	machine := topology.Synthetic(2, 2, 1, 1, 1<<30)
	distances := ktm.NUMADistances{}
	for _, n := range machine.NUMANodes {
		distances[n.ID] = n.Distances
	}
	numa := &ktm.NUMAInfo{Nodes: machine.NUMANodeIDs(), NUMADistances: distances}
	rng := rand.New(rand.NewPCG(1, 2))
	randomHints := func() (map[string][]topologymanager.TopologyHint, map[string][]ktm.TopologyHint) {
		ours, theirs := map[string][]topologymanager.TopologyHint{}, map[string][]ktm.TopologyHint{}
		for r := 0; r < 1+rng.IntN(2); r++ {
			name := fmt.Sprintf("r%d", r)
			switch rng.IntN(6) {
			case 0:
				ours[name], theirs[name] = nil, nil
				continue
			case 1:
				ours[name], theirs[name] = []topologymanager.TopologyHint{}, []ktm.TopologyHint{}
				continue
			}
			for h := 0; h < 1+rng.IntN(3); h++ {
				bits := rng.IntN(15) + 1
				var ids []int
				for i := 0; i < 4; i++ {
					if bits&(1<<i) != 0 {
						ids = append(ids, i)
					}
				}
				pref := rng.IntN(2) == 0
				om, _ := topologymanager.NewBitMask(ids...)
				km, _ := bitmask.NewBitMask(ids...)
				ours[name] = append(ours[name], topologymanager.TopologyHint{NUMANodeAffinity: om, Preferred: pref})
				theirs[name] = append(theirs[name], ktm.TopologyHint{NUMANodeAffinity: km, Preferred: pref})
			}
		}
		return ours, theirs
	}
	for _, policy := range []string{topologymanager.PolicyBestEffort, topologymanager.PolicyRestricted, topologymanager.PolicySingleNumaNode} {
		for _, closest := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s closest=%v", policy, closest), func(t *testing.T) {
				kopts := ktm.PolicyOptions{PreferClosestNUMA: closest, MaxAllowableNUMANodes: 8}
				var kp ktm.Policy
				switch policy {
				case topologymanager.PolicyBestEffort:
					kp = ktm.NewBestEffortPolicy(numa, kopts)
				case topologymanager.PolicyRestricted:
					kp = ktm.NewRestrictedPolicy(numa, kopts)
				default:
					kp = ktm.NewSingleNumaNodePolicy(numa, kopts)
				}
				for i := 0; i < 300; i++ {
					var providers []map[string][]ktm.TopologyHint
					m, err := topologymanager.New(topologymanager.Options{Policy: policy, Machine: machine,
						PolicyOptions: map[string]string{topologymanager.OptionPreferClosestNUMANodes: fmt.Sprint(closest)}})
					if err != nil {
						t.Fatal(err)
					}
					for p := 0; p < 1+rng.IntN(3); p++ {
						ours, theirs := randomHints()
						m.AddHintProvider(fixedHints(ours))
						providers = append(providers, theirs)
					}
					want, admit := kp.Merge(logger, providers)
					pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: podUID(i)}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
					err = m.Admit(pod)
					if (err == nil) != admit {
						t.Fatalf("case %d %v: kubelet admits %v, nodekit %v", i, providers, admit, err)
					}
					if !admit {
						continue
					}
					got := m.GetAffinity(string(pod.UID), "c")
					wantMask := topologymanager.BitMask(0)
					if want.NUMANodeAffinity != nil {
						wantMask, _ = topologymanager.NewBitMask(want.NUMANodeAffinity.GetBits()...)
					}
					if got.NUMANodeAffinity != wantMask || got.Preferred != want.Preferred {
						t.Fatalf("case %d %v: kubelet %v, nodekit %v", i, providers, want, got)
					}
				}
			})
		}
	}
}

func podUID(i int) k8stypes.UID { return k8stypes.UID(fmt.Sprintf("uid-%d", i)) }
