package cpumanager

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/resources/topology"
)

// BenchmarkAllocate is an admission's CPU work on a 2-socket, 4-NUMA-node
// machine of 80 CPUs: hints and exclusive CPUs for a 4-CPU container, then
// their release.
func BenchmarkAllocate(b *testing.B) {
	m, err := New(Options{Policy: PolicyStatic, Reserved: resource.MustParse("2"), Machine: topology.Synthetic(2, 2, 10, 2, 1<<30)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := guaranteed(fmt.Sprint(i), "p", "4")
		m.GetTopologyHints(p, &p.Spec.Containers[0])
		if err := m.Allocate(p, &p.Spec.Containers[0]); err != nil {
			b.Fatal(err)
		}
		m.mu.Lock()
		m.policy.release(&m.state, string(p.UID), "c0")
		m.mu.Unlock()
	}
}
