// Package timers holds the small helpers the agent's loops share for their
// k8s.io/utils/clock timers: arming a timer for a deadline, stopping a timer
// so its next Reset starts clean, and picking the earliest of two deadlines.
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

// Arm sets t to fire at deadline on clk, or reports that deadline has come.
// A timer counts from the clock's time at NewTimer or Reset, not from a
// reading the caller made before, so Arm takes the wait from a reading of
// its own, made just before, and reads again if the clock moved by slack or
// more meanwhile (a fake clock's step, a long preemption): armed with a
// stale reading, a timer fires late by as much as the clock moved, and a
// fake clock's timer armed for a deadline already passed fires only at the
// next step.
//
// When deadline has come (due is true), t is stopped and drained and the
// caller must act as if it had fired, without waiting on it. Otherwise t,
// made with clk.NewTimer when nil, fires no earlier than deadline and about
// slack after it at most; it never waits less than slack (slack > 0), so a
// loop that wakes for many close deadlines wakes once for them. t must be
// read by the caller only; the returned timer is t, or the one made.
func Arm(clk clock.Clock, t clock.Timer, deadline time.Time, slack time.Duration) (_ clock.Timer, due bool) {
	for {
		now := clk.Now()
		if !now.Before(deadline) {
			if t != nil {
				Stop(t)
			}
			return t, true
		}
		wait := max(deadline.Sub(now), slack)
		if t == nil {
			t = clk.NewTimer(wait)
		} else {
			Stop(t)
			t.Reset(wait)
		}
		if after := clk.Now(); after.Before(deadline) && after.Sub(now) < slack {
			return t, false
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
