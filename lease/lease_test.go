package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/lease"
)

var leasesGR = schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}

func TestCreatesLeaseWithOwnerReference(t *testing.T) {
	h := newHarness(t, nil, node())
	h.start()
	h.nextRenewWait()

	h.requireActions("get leases", "get nodes", "create leases")
	l := h.lease()
	if got := ptr.Deref(l.Spec.HolderIdentity, ""); got != nodeName {
		t.Errorf("holderIdentity = %q, want %q", got, nodeName)
	}
	if got := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); got != 40 {
		t.Errorf("leaseDurationSeconds = %d, want 40", got)
	}
	h.requireRenewedNow()
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: nodeUID}}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0] != want[0] {
		t.Errorf("ownerReferences = %+v, want %+v", l.OwnerReferences, want)
	}
}

func TestOptionsShapeTheLease(t *testing.T) {
	h := newHarness(t, func(o *lease.Options) {
		o.HolderIdentity = "agent-7"
		o.LeaseDurationSeconds = 20
		o.RenewIntervalFraction = 0.1
	}, node())
	h.start()
	if d := h.nextWait(); d < 2*time.Second || d > 2080*time.Millisecond {
		t.Fatalf("renew wait = %v, want 20s × 0.1 = 2s plus at most 4%%", d)
	}
	l := h.lease()
	if got := ptr.Deref(l.Spec.HolderIdentity, ""); got != "agent-7" {
		t.Errorf("holderIdentity = %q, want agent-7", got)
	}
	if got := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); got != 20 {
		t.Errorf("leaseDurationSeconds = %d, want 20", got)
	}
}

func TestRenewsWithUpdateOnlyEveryInterval(t *testing.T) {
	h := newHarness(t, nil, node())
	h.start()
	d := h.nextRenewWait()
	h.newActions()
	created := h.lease()

	for range 3 {
		// Just short of the jittered interval nothing happens: the
		// controller still waits on its timer.
		h.clock.Step(d - time.Nanosecond)
		if !h.clock.HasWaiters() {
			t.Fatal("renew timer fired before the interval elapsed")
		}
		h.requireActions()
		h.clock.Step(time.Nanosecond)
		d = h.nextRenewWait()
		h.requireActions("update leases")
		h.requireRenewedNow()
	}
	l := h.lease()
	if l.UID != created.UID || len(l.OwnerReferences) != 1 {
		t.Errorf("renewal replaced the lease or lost its owner: %+v", l.ObjectMeta)
	}
}

func TestConflictRereadsThenUpdates(t *testing.T) {
	var repeated atomic.Int32
	h := newHarness(t, func(o *lease.Options) {
		o.OnRepeatedFailure = func() { repeated.Add(1) }
	}, node())
	h.start()
	d := h.nextRenewWait()
	h.newActions()

	// Another writer changed the lease, so our copy is stale.
	other := h.lease().DeepCopy()
	other.Annotations = map[string]string{"example.com/touched": "yes"}
	if err := h.client.Tracker().Update(leasesGVR, other, corev1.NamespaceNodeLease); err != nil {
		t.Fatal(err)
	}
	h.failFirst("update", "leases", 1, apierrors.NewConflict(leasesGR, nodeName, errors.New("stale")))

	h.clock.Step(d)
	h.nextRenewWait()
	h.requireActions("update leases", "get leases", "update leases")
	h.requireRenewedNow()
	if got := h.lease().Annotations["example.com/touched"]; got != "yes" {
		t.Errorf("update after the conflict dropped the other writer's annotation")
	}
	if n := repeated.Load(); n != 0 {
		t.Errorf("OnRepeatedFailure called %d times on a conflict, want 0", n)
	}
}

func TestRecreatesDeletedLease(t *testing.T) {
	var repeated atomic.Int32
	h := newHarness(t, func(o *lease.Options) {
		o.OnRepeatedFailure = func() { repeated.Add(1) }
	}, node())
	h.start()
	d := h.nextRenewWait()
	h.newActions()
	if err := h.client.Tracker().Delete(leasesGVR, corev1.NamespaceNodeLease, nodeName); err != nil {
		t.Fatal(err)
	}

	h.clock.Step(d)
	d = h.nextRenewWait()
	h.requireActions("update leases", "get leases", "get nodes", "create leases")
	h.requireRenewedNow()
	if l := h.lease(); len(l.OwnerReferences) != 1 {
		t.Errorf("re-created lease has owner references %+v, want the node", l.OwnerReferences)
	}
	if n := repeated.Load(); n != 0 {
		t.Errorf("OnRepeatedFailure called %d times for a deleted lease, want 0", n)
	}

	// The next renewal updates the re-created lease.
	h.clock.Step(d)
	h.nextRenewWait()
	h.requireActions("update leases")
}

func TestBacksOffWhileTheLeaseCannotBeRead(t *testing.T) {
	const failures = 9
	h := newHarness(t, nil, node())
	failed := h.failFirst("get", "leases", failures, apierrors.NewInternalError(errors.New("etcd is down")))
	h.start()

	want := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 7 * time.Second, 7 * time.Second,
	}
	var total time.Duration
	for i, w := range want {
		if d := h.nextWait(); d != w {
			t.Fatalf("back-off %d = %v, want %v", i, d, w)
		}
		h.requireActions("get leases")
		h.clock.Step(w)
		total += w
	}
	h.nextRenewWait()
	h.requireActions("get leases", "get nodes", "create leases")
	h.requireRenewedNow()
	if n := failed(); n != failures {
		t.Errorf("%d GETs failed, want %d", n, failures)
	}

	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(`
# HELP nodekit_node_lease_renewal_failures_total Failed API requests made to renew the node lease, by operation: get, create, update (the lease) and get_node (the Node, for the lease's owner reference).
# TYPE nodekit_node_lease_renewal_failures_total counter
nodekit_node_lease_renewal_failures_total{operation="create"} 0
nodekit_node_lease_renewal_failures_total{operation="get"} 9
nodekit_node_lease_renewal_failures_total{operation="get_node"} 0
nodekit_node_lease_renewal_failures_total{operation="update"} 0
`), "nodekit_node_lease_renewal_failures_total"); err != nil {
		t.Error(err)
	}
	// The cycle's duration includes every back-off sleep.
	if sum := histogramSum(t, h.reg, "nodekit_node_lease_renew_duration_seconds"); sum != total.Seconds() {
		t.Errorf("renew duration sum = %v, want %v", sum, total.Seconds())
	}
}

func TestCreateWaitsForTheNode(t *testing.T) {
	h := newHarness(t, nil) // the node is not registered yet
	h.start()
	if d := h.nextWait(); d != 100*time.Millisecond {
		t.Fatalf("first back-off = %v, want 100ms", d)
	}
	h.requireActions("get leases", "get nodes")

	if err := h.client.Tracker().Add(node()); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(100 * time.Millisecond)
	h.nextRenewWait()
	h.requireActions("get leases", "get nodes", "create leases")
	if l := h.lease(); len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != nodeUID {
		t.Errorf("ownerReferences = %+v, want the node", l.OwnerReferences)
	}
	if got := failureCount(t, h.reg, "get_node"); got != 1 {
		t.Errorf("get_node failures = %v, want 1", got)
	}
}

func TestUpdateAddsOwnerReferenceWhenTheNodeCanBeRead(t *testing.T) {
	existing := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("previous-holder"),
			LeaseDurationSeconds: ptr.To[int32](15),
		},
	}
	h := newHarness(t, nil, existing) // no node yet
	h.start()
	d := h.nextRenewWait()
	// The node cannot be read: the lease is renewed without an owner.
	h.requireActions("get leases", "get nodes", "update leases")
	h.requireRenewedNow()
	l := h.lease()
	if len(l.OwnerReferences) != 0 {
		t.Fatalf("ownerReferences = %+v, want none", l.OwnerReferences)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != nodeName || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 40 {
		t.Errorf("spec = %+v, want holder %q and duration 40", l.Spec, nodeName)
	}

	if err := h.client.Tracker().Add(node()); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(d)
	d = h.nextRenewWait()
	h.requireActions("get nodes", "update leases")
	if l := h.lease(); len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != nodeUID {
		t.Fatalf("ownerReferences = %+v, want the node", l.OwnerReferences)
	}

	// With the owner set, renewals no longer read the node.
	h.clock.Step(d)
	h.nextRenewWait()
	h.requireActions("update leases")
}

func TestOnRepeatedFailure(t *testing.T) {
	var repeated atomic.Int32
	h := newHarness(t, func(o *lease.Options) {
		o.OnRepeatedFailure = func() { repeated.Add(1) }
	}, node())
	h.start()
	d := h.nextRenewWait()
	h.newActions()

	// Two rounds of five failed updates: one from the latest lease, one
	// after reading it again. Each round calls OnRepeatedFailure after
	// every failed retry, the first failure excepted.
	h.failFirst("update", "leases", 10, apierrors.NewServiceUnavailable("overloaded"))
	h.clock.Step(d)
	d = h.nextRenewWait()
	u := "update leases"
	h.requireActions(u, u, u, u, u, "get leases", u, u, u, u, u)
	if n := repeated.Load(); n != 8 {
		t.Errorf("OnRepeatedFailure called %d times, want 8", n)
	}

	// The API server recovered: the next renewal updates from the lease
	// read in the failed cycle.
	h.clock.Step(d)
	h.nextRenewWait()
	h.requireActions(u)
	h.requireRenewedNow()
	if got := failureCount(t, h.reg, "update"); got != 10 {
		t.Errorf("update failures = %v, want 10", got)
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, nil, node())
	h.start()
	d := h.nextRenewWait()
	h.clock.Step(d)
	h.nextRenewWait()

	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(`
# HELP nodekit_node_lease_renewals_total Successful writes (create or update) of the node lease.
# TYPE nodekit_node_lease_renewals_total counter
nodekit_node_lease_renewals_total 2
`), "nodekit_node_lease_renewals_total"); err != nil {
		t.Error(err)
	}
	lastRenew := family(t, h.reg, "nodekit_node_lease_last_renew_timestamp_seconds").GetMetric()[0].GetGauge().GetValue()
	if want := float64(h.clock.Now().UnixNano()) / 1e9; lastRenew != want {
		t.Errorf("last renew timestamp = %v, want %v", lastRenew, want)
	}
	// Both cycles wrote the lease at once: no time passed on the clock.
	duration := family(t, h.reg, "nodekit_node_lease_renew_duration_seconds").GetMetric()[0].GetHistogram()
	if duration.GetSampleCount() != 2 || duration.GetSampleSum() != 0 {
		t.Errorf("renew duration count, sum = %d, %v; want 2, 0", duration.GetSampleCount(), duration.GetSampleSum())
	}
	for _, op := range []string{"get", "create", "update", "get_node"} {
		if got := failureCount(t, h.reg, op); got != 0 {
			t.Errorf("%s failures = %v, want 0", op, got)
		}
	}
	if problems, err := testutil.GatherAndLint(h.reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %+v", err, problems)
	}
}

func TestRunStopsPromptly(t *testing.T) {
	t.Run("during back-off", func(t *testing.T) {
		h := newHarness(t, nil, node())
		h.failFirst("get", "leases", -1, apierrors.NewInternalError(errors.New("down")))
		h.start()
		h.clock.Step(h.nextWait())
		if d := h.nextWait(); d != 200*time.Millisecond {
			t.Fatalf("second back-off = %v, want 200ms", d)
		}
		h.stop() // the clock never reaches the end of the back-off
		h.requireActions("get leases", "get leases")
	})
	t.Run("between renewals", func(t *testing.T) {
		h := newHarness(t, nil, node())
		h.start()
		h.nextRenewWait()
		h.stop()
	})
	t.Run("already cancelled", func(t *testing.T) {
		h := newHarness(t, nil, node())
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.ctrl.Run(ctx); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		h.requireActions()
	})
}

func TestRunTwiceConcurrentlyFails(t *testing.T) {
	h := newHarness(t, nil, node())
	h.start()
	h.nextRenewWait()
	_, ctx := ktesting.NewTestContext(t)
	if err := h.ctrl.Run(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Run = %v, want an already-running error", err)
	}
}

func TestNewValidatesAndDefaults(t *testing.T) {
	client := fake.NewClientset()
	valid := func() lease.Options { return lease.Options{Client: client, NodeName: nodeName} }
	for name, tc := range map[string]struct {
		mutate func(*lease.Options)
		want   string
	}{
		"no client":         {func(o *lease.Options) { o.Client = nil }, "Client is required"},
		"no node name":      {func(o *lease.Options) { o.NodeName = "" }, "NodeName is required"},
		"bad node name":     {func(o *lease.Options) { o.NodeName = "Node_A" }, `invalid node name "Node_A"`},
		"bad namespace":     {func(o *lease.Options) { o.Namespace = "a.b" }, `invalid namespace "a.b"`},
		"negative duration": {func(o *lease.Options) { o.LeaseDurationSeconds = -1 }, "must not be negative"},
		"fraction one":      {func(o *lease.Options) { o.RenewIntervalFraction = 1 }, "must be in (0, 1)"},
		"negative fraction": {func(o *lease.Options) { o.RenewIntervalFraction = -0.5 }, "must be in (0, 1)"},
		"tiny interval":     {func(o *lease.Options) { o.LeaseDurationSeconds = 1; o.RenewIntervalFraction = 1e-10 }, "rounds to zero"},
	} {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.mutate(&o)
			c, err := lease.New(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error containing %q", c, err, tc.want)
			}
		})
	}

	t.Run("duplicate registration", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		o := valid()
		o.Registerer = reg
		if _, err := lease.New(o); err != nil {
			t.Fatal(err)
		}
		if _, err := lease.New(o); err == nil || !strings.Contains(err.Error(), "register metrics") {
			t.Fatalf("second New with the same registry = %v, want a registration error", err)
		}
		// The failed New left nothing half-registered behind.
		if n, err := testutil.GatherAndCount(reg); err != nil || n != 7 {
			t.Fatalf("registry holds %d series (%v), want the first controller's 7", n, err)
		}
	})

	t.Run("defaults", func(t *testing.T) {
		h := newHarness(t, func(o *lease.Options) { o.Clock = nil; o.Registerer = nil }, node())
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- h.ctrl.Run(ctx) }()
		// The real clock drives this controller: wait for its first renewal.
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
			_, err := h.client.Tracker().Get(leasesGVR, corev1.NamespaceNodeLease, nodeName)
			return err == nil, nil
		})
		cancel()
		if err != nil {
			t.Fatalf("lease not created with the real clock: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		l := h.lease()
		if ptr.Deref(l.Spec.HolderIdentity, "") != nodeName || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 40 {
			t.Errorf("default spec = %+v", l.Spec)
		}
	})
}
