package pods

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/status/podstatus"
)

// newUnstartedController returns a Controller on fakes that is not running:
// its handle may be called directly.
func newUnstartedController(t testing.TB) *Controller {
	t.Helper()
	c, err := New(Options{Sources: &fakeSources{updates: make(chan podsource.Update)}, Runtime: newFakeRuntime(),
		Statuses: &fakeStatuses{statuses: map[types.UID]v1.PodStatus{}}, Clock: testclock.NewFakeClock(time.Now()),
		Registerer: prometheus.NewPedanticRegistry(), Node: func() (*v1.Node, bool) { return &v1.Node{}, true }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestUpdateLogVerbosity: at the kubelet's usual --v=2 a reconcile (the
// agent's own status writes coming back) is not logged, as the kubelet's
// "SyncLoop RECONCILE" is at 4; at 4 it is; other updates are at 2.
func TestUpdateLogVerbosity(t *testing.T) {
	pod := churnPod(1)
	pod.Status.Phase = v1.PodRunning
	for _, tc := range []struct {
		op     podsource.Op
		v      int
		logged bool
	}{
		{podsource.OpReconcile, 2, false},
		{podsource.OpReconcile, 4, true},
		{podsource.OpMirror, 2, true},
		{podsource.OpMirror, 1, false},
	} {
		var out strings.Builder
		logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(tc.v), textlogger.Output(&out)))
		newUnstartedController(t).handle(klog.NewContext(context.Background(), logger), podsource.Update{Op: tc.op, Source: "api", Pods: []*v1.Pod{pod}})
		if got := strings.Contains(out.String(), `"Pod update"`); got != tc.logged {
			t.Errorf("%s at --v=%d: logged %v, want %v:\n%s", tc.op, tc.v, got, tc.logged, out.String())
		}
	}
}

// BenchmarkReconcileUpdate handles one reconcile of a known pod at --v=2,
// the log written to io.Discard: what each of the agent's own status
// writes costs when it comes back on the watch.
func BenchmarkReconcileUpdate(b *testing.B) {
	c := newUnstartedController(b)
	ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2), textlogger.Output(io.Discard))))
	pod := churnPod(1)
	pod.Status.Phase = v1.PodRunning
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
	if podstatus.NeedsReadinessSync(pod) {
		b.Fatal("the pod would poke a worker")
	}
	u := podsource.Update{Op: podsource.OpReconcile, Source: "api", Pods: []*v1.Pod{pod}}
	b.ReportAllocs()
	for b.Loop() {
		c.handle(ctx, u)
	}
}
