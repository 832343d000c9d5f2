package runtime_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// BenchmarkSyncPod measures the first SyncPod of a one-container pod on
// fakecri over a unix socket: status read, sandbox, image check, container
// create and start. Each iteration uses a new pod.
func BenchmarkSyncPod(b *testing.B) {
	h := newHarness(b, fakecri.Options{}, func(o *runtime.PodManagerOptions) { o.Recorder = nil })
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		pod := newPod(fmt.Sprintf("bench-%d", i), ctr("app"))
		pod.UID = types.UID(fmt.Sprintf("uid-bench-%d", i))
		st, err := h.pm.GetPodStatus(h.ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			b.Fatal(err)
		}
		if res := h.pm.SyncPod(h.ctx, pod, st, runtime.SyncInput{}); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}
