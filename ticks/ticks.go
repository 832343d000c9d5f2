// Package ticks puts a node's periodic loops on shared ticks, so that one
// wake-up of the process serves several of them.
//
// An idle node agent runs a dozen loops with the kubelet's periods: pod
// housekeeping every 2 s, the runtime status poll every 5 s, the node
// status, the pod status sync, the eviction round and log rotation every
// 10 s, the image list every 30 s, container GC every minute. Each on a
// timer of its own, with the phase of whenever it started, they wake the
// process about 110 times a minute, and each wake-up costs the Go
// scheduler and sysmon more than the loop's own work. On shared ticks the
// same rounds take about 40 wake-ups; about 12 (every 10 s loop and every
// other status poll on one tick, the other polls on the tick halfway)
// where housekeeping, with nothing on the node, looks every 10 s (package
// pods). The Lease does not hand its waits to Align as they are: a
// ten-Step loop's first round may come up to nine and a half Steps early
// here, and a renewal that early is a write the kubelet would not send;
// package lease asks for the tick within its jitter and drifts onto the
// ticks over minutes instead.
//
// The ticks of a node are one Step apart, at the node's phase; a wait of
// an even number of Steps (2 s) lands on every other tick, the even ones;
// a wait of a multiple of ten Steps (10 s, 30 s, a minute) on every tenth,
// the phase's (even ticks too), so that all those loops wake together
// whenever each started; a multiple of five Steps (the 5 s poll) on every
// fifth, so that every other round shares the ten-Step loops' wake-up; any
// other wait on any tick. A loop keeps its period: it asks Align for the
// wait before each next round, and Align moves that round to a tick of its
// kind: the nearest one, at most half a Step (one Step for an even wait)
// away, or, for the multiples of five Steps, the last one at most half a
// Step after the round is due, so that such a round may come early, never
// more than half a Step late. Since a round starts on a tick, the next one
// is due a period later, plus the round's own time, and that again rounds
// to exactly one period after the last: in the steady state each loop runs
// exactly every period, as a ticker would, and only its first round moves
// (a ten-Step loop's by up to nine and a half Steps, earlier).
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
// ten Steps: the tenth ticks are at phase + 10kStep, the fifth ones at
// phase + 5kStep, the even ones at phase + 2kStep). A wait d shorter than a
// Step is returned unchanged. A longer one that rounds to n Steps ends on a
// tick: when n is a multiple of five, on the last fifth tick (tenth tick
// when n is a multiple of ten) at or before now + d + Step/2, so the
// result is between d - 4.5 Steps (d - 9.5 Steps) and d + Step/2;
// otherwise on the tick nearest to now + d, an even one when n is even,
// within a Step of d (half a Step when n is odd). The result is at least
// half a Step.
func New(clk clock.PassiveClock, phase time.Duration) Align {
	phase = ((phase % (10 * Step)) + 10*Step) % (10 * Step)
	return func(d time.Duration) time.Duration {
		if d < Step {
			return d
		}
		n := d.Round(Step) / Step
		now := clk.Now().UnixNano()
		due := now + int64(d) - int64(phase)
		var step, k int64
		if n%5 == 0 {
			step = int64(5 * Step)
			if n%10 == 0 {
				step = int64(10 * Step)
			}
			// The last grid point at or before due + Step/2.
			k = floorDiv(due+int64(Step/2), step)
		} else {
			step = int64(Step)
			if n%2 == 0 {
				step = int64(2 * Step)
			}
			// The grid point nearest due.
			k = floorDiv(due+step/2, step)
		}
		return time.Duration(k*step + int64(phase) - now)
	}
}

// floorDiv is a / b rounded down (a may be negative on a fake clock near
// the epoch; b is positive).
func floorDiv(a, b int64) int64 {
	k := a / b
	if a%b < 0 {
		k--
	}
	return k
}

// RandomPhase returns a phase for New, uniform over ten Steps: nodes with
// their own phases spread their rounds (a fleet's Lease renewals, say)
// over the ticks instead of sending them at the same instant.
func RandomPhase() time.Duration {
	return rand.N(10 * Step)
}
