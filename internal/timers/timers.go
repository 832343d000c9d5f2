// Package timers holds the two small helpers the agent's loops share for
// their k8s.io/utils/clock timers: stopping a timer so its next Reset starts
// clean, and picking the earliest of two deadlines.
package timers

import (
	"time"

	"k8s.io/utils/clock"
)

// Stop stops t and drains a value it fired meanwhile (fake clocks keep it),
// so its next Reset starts clean. It must be called by t's only reader.
func Stop(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
}

// Earliest returns the earlier of a and b; a zero time means none.
func Earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
