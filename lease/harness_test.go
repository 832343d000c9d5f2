package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/lease"
)

const (
	nodeName = "node-a"
	nodeUID  = "3f1c6a52-8e1b-4d53-9f0e-2b7f3c1d9a10"
)

var (
	t0         = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	leasesGVR  = coordinationv1.SchemeGroupVersion.WithResource("leases")
	nodesGVR   = corev1.SchemeGroupVersion.WithResource("nodes")
	errTimeout = fmt.Errorf("timed out after %v", wait.ForeverTestTimeout)
)

// recordingClock is a fake clock that reports the duration of every timer
// the controller starts, once the timer is armed. Each report is a point
// where the controller is blocked on the clock, so the test can inspect the
// cluster and step the clock without racing the controller.
type recordingClock struct {
	*testingclock.FakeClock
	timers chan time.Duration
}

func newRecordingClock() *recordingClock {
	return &recordingClock{FakeClock: testingclock.NewFakeClock(t0), timers: make(chan time.Duration, 1000)}
}

func (c *recordingClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.timers <- d
	return t
}

func node() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: nodeUID}}
}

// harness runs a Controller on a fake clientset and a recording clock.
type harness struct {
	t      *testing.T
	client *fake.Clientset
	clock  *recordingClock
	reg    *prometheus.Registry
	ctrl   *lease.Controller
	seen   int

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan error
}

// newHarness builds a controller for nodeName; opts may adjust Options
// before New.
func newHarness(t *testing.T, opts func(*lease.Options), objects ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		t:      t,
		client: fake.NewClientset(objects...),
		clock:  newRecordingClock(),
		reg:    prometheus.NewPedanticRegistry(),
	}
	o := lease.Options{Client: h.client, NodeName: nodeName, Clock: h.clock, Registerer: h.reg}
	if opts != nil {
		opts(&o)
	}
	ctrl, err := lease.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.ctrl = ctrl
	return h
}

// start runs the controller until the test ends.
func (h *harness) start() {
	_, ctx := ktesting.NewTestContext(h.t)
	ctx, h.cancel = context.WithCancel(ctx)
	h.done = make(chan error, 1)
	go func() { h.done <- h.ctrl.Run(ctx) }()
	h.t.Cleanup(h.stop)
}

// stop cancels Run and requires it to return nil promptly.
func (h *harness) stop() {
	h.t.Helper()
	h.stopOnce.Do(func() {
		h.cancel()
		select {
		case err := <-h.done:
			if err != nil {
				h.t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(wait.ForeverTestTimeout):
			h.t.Errorf("Run did not return after cancel: %v", errTimeout)
		}
	})
}

// nextWait returns the duration of the next timer the controller arms.
func (h *harness) nextWait() time.Duration {
	h.t.Helper()
	select {
	case d := <-h.clock.timers:
		return d
	case <-time.After(wait.ForeverTestTimeout):
		h.t.Fatalf("controller armed no timer: %v", errTimeout)
		return 0
	}
}

// nextRenewWait returns the next timer, requiring it to be a renew
// interval: 10 s plus at most 4% jitter with the default options.
func (h *harness) nextRenewWait() time.Duration {
	h.t.Helper()
	d := h.nextWait()
	if d < 10*time.Second || d > 10400*time.Millisecond {
		h.t.Fatalf("renew wait = %v, want within [10s, 10.4s]", d)
	}
	return d
}

// newActions returns the API requests made since the last call, as
// "verb resource" strings.
func (h *harness) newActions() []string {
	all := h.client.Actions()
	var out []string
	for _, a := range all[h.seen:] {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	h.seen = len(all)
	return out
}

func (h *harness) requireActions(want ...string) {
	h.t.Helper()
	got := h.newActions()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Fatalf("API requests = %q, want %q", got, want)
	}
}

// lease reads the stored lease without recording an action.
func (h *harness) lease() *coordinationv1.Lease {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(leasesGVR, corev1.NamespaceNodeLease, nodeName)
	if err != nil {
		h.t.Fatalf("read lease: %v", err)
	}
	return obj.(*coordinationv1.Lease)
}

func (h *harness) requireRenewedNow() {
	h.t.Helper()
	l := h.lease()
	if l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(h.clock.Now()) {
		h.t.Fatalf("renewTime = %v, want %v", l.Spec.RenewTime, h.clock.Now())
	}
}

// failFirst makes the first n requests with verb on resource fail with err
// (every request when n < 0). It returns a func reporting how many failed.
func (h *harness) failFirst(verb, resource string, n int, err error) func() int {
	var mu sync.Mutex
	failed := 0
	h.client.PrependReactor(verb, resource, func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if n >= 0 && failed >= n {
			return false, nil, nil
		}
		failed++
		return true, nil, err
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return failed
	}
}

// family gathers the metric family name from reg.
func family(t *testing.T, reg prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return nil
}

// failureCount is nodekit_node_lease_renewal_failures_total{operation}.
func failureCount(t *testing.T, reg prometheus.Gatherer, operation string) float64 {
	t.Helper()
	for _, m := range family(t, reg, "nodekit_node_lease_renewal_failures_total").GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "operation" && l.GetValue() == operation {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no failure series for operation %q", operation)
	return 0
}

// histogramSum is the sum of the unlabelled histogram name.
func histogramSum(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	return family(t, reg, name).GetMetric()[0].GetHistogram().GetSampleSum()
}
