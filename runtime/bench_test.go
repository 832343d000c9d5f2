package runtime_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/imagepull"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// BenchmarkSyncPod measures the first SyncPod of a one-container pod on
// fakecri over a unix socket: status read, sandbox, image check, container
// create and start. Each iteration uses a new pod.
func BenchmarkSyncPod(b *testing.B) {
	benchmarkSyncPod(b, newHarness(b, fakecri.Options{}, func(o *runtime.PodManagerOptions) { o.Recorder = nil }))
}

// BenchmarkSyncPodVerifyingPullCredentials is BenchmarkSyncPod with the
// image pull manager (the agent's default): the present image is checked
// against the records before it is used.
func BenchmarkSyncPodVerifyingPullCredentials(b *testing.B) {
	root := b.TempDir()
	benchmarkSyncPod(b, newHarness(b, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.Recorder = nil
		m, err := imagepull.New(imagepull.Options{RootDir: root, Images: o.Images, Clock: o.Clock})
		if err != nil {
			b.Fatal(err)
		}
		o.ImagePulls = m
	}))
}

func benchmarkSyncPod(b *testing.B, h *harness) {
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
