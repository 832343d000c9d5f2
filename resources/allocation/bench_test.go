package allocation_test

import (
	"fmt"
	v1 "k8s.io/api/core/v1"
	"testing"

	"github.com/nodekit/nodekit/resources/allocation"
)

// BenchmarkSetAllocatedBurst admits a 30-pod burst, one pod at a time as
// the pod controller does, into a fresh checkpoint per iteration: the
// allocation's share of a burst's CPU.
func BenchmarkSetAllocatedBurst(b *testing.B) {
	pods := make([]*v1.Pod, 30)
	for i := range pods {
		pods[i] = pod(fmt.Sprintf("pod-%02d", i), "100m")
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		m := allocation.New(allocation.Options{RootDir: b.TempDir()})
		b.StartTimer()
		for _, p := range pods {
			if err := m.SetAllocated(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}
