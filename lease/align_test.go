package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nodekit/nodekit/lease"
	"github.com/nodekit/nodekit/ticks"
)

// renewalsOnTicks runs a controller whose Align is the ticks at phase on
// its clock and returns its first n renew waits, each of them checked to
// be within the kubelet's [10 s, 10.4 s] and followed by an UPDATE.
func renewalsOnTicks(t *testing.T, phase time.Duration, n int) []time.Duration {
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
		h.clock.Step(d)
	}
	return waits
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
