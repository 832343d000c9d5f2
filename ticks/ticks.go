// Package ticks puts a node's periodic loops on shared ticks, so that one
// wake-up of the process serves several of them.
//
// An idle node agent runs a dozen loops with the kubelet's periods: pod
// housekeeping every 2 s, the runtime status poll every 5 s, the Lease,
// the node status, the pod status sync, the eviction round and log
// rotation every 10 s, the image list every 30 s, container GC every
// minute. Each on a timer of its own, with the phase of whenever it
// started, they wake the process about 110 times a minute, and each
// wake-up costs the Go scheduler and sysmon more than the loop's own work.
// On shared ticks the same rounds take about 40 wake-ups.
//
// The ticks of a node are one Step apart, at the node's phase; a wait of
// an even number of Steps (2 s, 10 s, 30 s, a minute) lands on every other
// tick, the even ones, so that all those loops wake together; an odd one
// (the 5 s poll) on any tick, so every other round shares a wake-up. A
// loop keeps its period: it asks Align for the wait before each next
// round, and Align moves that round to the nearest tick of its kind, at
// most half a Step (one Step for an even wait) away. Since a round starts
// on a tick, the next one is due a period later, plus the round's own
// time, and that again rounds to exactly one period after the last: in
// the steady state each loop runs exactly every period, as a ticker would,
// and only its first round moves, by up to a second.
//
// Loops that follow deadlines of their own (a back-off, a grace period, a
// probe, a held status) are not aligned: only the waits a loop hands to
// Align move.
package ticks

import (
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"
)

// Step is the spacing of a node's ticks.
const Step = time.Second

// Align returns the wait before the next round of a periodic loop whose
// round is due after d. A module's Options take one (nil: every round
// waits d exactly); agent gives all of a node's modules the same, from
// New. It must be safe to call from several goroutines.
type Align func(d time.Duration) time.Duration

// Wait returns a(d), or d when a is nil.
func (a Align) Wait(d time.Duration) time.Duration {
	if a == nil {
		return d
	}
	return a(d)
}

// New returns the Align of ticks Step apart on clk at phase (taken modulo
// two Steps: the even ticks are at phase + 2kStep, the odd ones a Step
// later). A wait d shorter than a Step is returned unchanged; a longer one
// ends on the tick nearest to now + d: an even tick when d rounds to an
// even number of Steps, any tick otherwise. The result is within a Step of
// d and at least half a Step.
func New(clk clock.PassiveClock, phase time.Duration) Align {
	phase = ((phase % (2 * Step)) + 2*Step) % (2 * Step)
	return func(d time.Duration) time.Duration {
		if d < Step {
			return d
		}
		step := int64(Step)
		if (d.Round(Step)/Step)%2 == 0 {
			step = int64(2 * Step)
		}
		now := clk.Now().UnixNano()
		due := now + int64(d) - int64(phase)
		// The grid point nearest due (floored division: due may be negative
		// on a fake clock near the epoch).
		k := (due + step/2) / step
		if (due+step/2)%step < 0 {
			k--
		}
		return time.Duration(k*step + int64(phase) - now)
	}
}

// RandomPhase returns a phase for New, uniform over two Steps: nodes with
// their own phases spread their rounds (a fleet's Lease renewals, say)
// over the ticks instead of sending them at the same instant.
func RandomPhase() time.Duration {
	return rand.N(2 * Step)
}
