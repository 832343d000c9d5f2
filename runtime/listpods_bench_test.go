package runtime_test

import (
	"testing"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

// BenchmarkListPodsIdle is the CRI side of one relist of an idle node (no
// pods): what the PLEG does every second on a runtime that streams no
// container events (containerd 1.6), the largest part of such a node's idle
// CPU (docs/performance.md). The fake runtime serves in this process, so
// the figure includes both ends of the gRPC calls.
func BenchmarkListPodsIdle(b *testing.B) {
	h := newHarness(b, fakecri.Options{}, nil)
	b.ReportAllocs()
	for b.Loop() {
		pods, err := h.pm.ListPods(h.ctx, true)
		if err != nil {
			b.Fatal(err)
		}
		if len(pods) != 0 {
			b.Fatalf("%d pods on an idle node", len(pods))
		}
	}
}
