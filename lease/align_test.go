package lease_test

import (
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodekit/nodekit/lease"
	"github.com/nodekit/nodekit/ticks"
)

// renewalsOnTicks runs a controller whose Align is the ticks at phase on
// its clock and returns its first n renew waits, each of them checked to
// be within the kubelet's [10 s, 10.4 s] and followed by an UPDATE.
func renewalsOnTicks(t *testing.T, phase time.Duration, n int) []time.Duration {
	t.Helper()
	_, waits := startOnTicks(t, phase, n)
	return waits
}

// startOnTicks starts a controller on the ticks at phase and returns it
// with its first n renew waits, blocked on the last one.
func startOnTicks(t *testing.T, phase time.Duration, n int) (*harness, []time.Duration) {
	t.Helper()
	h := newHarness(t, func(o *lease.Options) { o.Align = ticks.New(o.Clock, phase) }, node())
	h.start()
	var waits []time.Duration
	for i := range n {
		d := h.nextRenewWait()
		if i == 0 {
			h.newActions() // the creation
		} else {
			h.requireActions("update leases")
		}
		waits = append(waits, d)
		if i < n-1 {
			h.clock.Step(d)
		}
	}
	return h, waits
}

func seconds(s ...float64) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out
}

// TestRenewalsDriftOntoTheTicks: on ticks, each renewal still comes 10 to
// 10.4 s after the last, as the kubelet's; when no tenth tick falls in
// that band, 10.4 s, until one does; from then on every 10 s, on the
// ticks.
func TestRenewalsDriftOntoTheTicks(t *testing.T) {
	// t0 is 5 s past a multiple of ten seconds: the tenth ticks at phase
	// 8.3 s come 3.3 s after the Lease's creation, then every 10 s. The
	// renewals at 10.4 s steps meet one after eight: the ninth wait,
	// 10.1 s, ends on the tick at 93.3 s.
	got := renewalsOnTicks(t, 8300*time.Millisecond, 12)
	want := seconds(10.4, 10.4, 10.4, 10.4, 10.4, 10.4, 10.4, 10.4, 10.1, 10, 10, 10)
	if !slices.Equal(got, want) {
		t.Errorf("renew waits = %v, want %v", got, want)
	}
	// A tick within the first band: on it at once.
	got = renewalsOnTicks(t, 5200*time.Millisecond, 3)
	if want := seconds(10.2, 10, 10); !slices.Equal(got, want) {
		t.Errorf("renew waits with a tick 10.2 s after the creation = %v, want %v", got, want)
	}
}

// TestFailedRenewalWaitsTheKubeletsJitter: after a cycle that wrote no
// renewal, the next wait is the kubelet's random one, not the tick's.
func TestFailedRenewalWaitsTheKubeletsJitter(t *testing.T) {
	h, waits := startOnTicks(t, 5200*time.Millisecond, 3)
	if want := seconds(10.2, 10, 10); !slices.Equal(waits, want) {
		t.Fatalf("renew waits = %v, want %v", waits, want)
	}
	// The renewal due now fails: five updates, a read, five updates.
	h.failFirst("update", "leases", 10, apierrors.NewServiceUnavailable("overloaded"))
	h.clock.Step(waits[2])
	d := h.nextRenewWait()
	u := "update leases"
	h.requireActions(u, u, u, u, u, "get leases", u, u, u, u, u)
	// On the ticks it would be 10 s exactly; a random jitter is that with
	// a probability of about 2^-53.
	if d == 10*time.Second {
		t.Errorf("wait after a failed renewal = %v, the tick's: want the kubelet's random jitter", d)
	}
}
