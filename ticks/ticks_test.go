package ticks

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestNilWaitsTheWholePeriod(t *testing.T) {
	var a Align
	if got := a.Wait(10 * time.Second); got != 10*time.Second {
		t.Errorf("nil Align: Wait(10s) = %s, want 10s", got)
	}
}

func TestWaitEndsOnTheNearestTickOfItsKind(t *testing.T) {
	const phase = 300 * time.Millisecond
	base := time.Unix(1_000_000, 0) // an even second: its even ticks are at .3 of even seconds
	for _, tc := range []struct {
		name      string
		now       time.Duration // after base
		d         time.Duration
		wantEndAt time.Duration // after base
	}{
		{"shorter than a step: unchanged", 100 * time.Millisecond, 500 * time.Millisecond, 600 * time.Millisecond},
		{"2 s from an even tick", 300 * time.Millisecond, 2 * time.Second, 2300 * time.Millisecond},
		{"2 s after the round's own work", 340 * time.Millisecond, 2 * time.Second, 2300 * time.Millisecond},
		{"2 s from an odd tick: the nearest even one", 1300 * time.Millisecond, 2 * time.Second, 4300 * time.Millisecond},
		{"10 s from a start between ticks", 2000 * time.Millisecond, 10 * time.Second, 12300 * time.Millisecond},
		{"10 s plus the Lease's jitter", 2310 * time.Millisecond, 10*time.Second + 400*time.Millisecond, 12300 * time.Millisecond},
		{"5 s: any tick", 2300 * time.Millisecond, 5 * time.Second, 7300 * time.Millisecond},
		{"5 s from an odd tick", 7320 * time.Millisecond, 5 * time.Second, 12300 * time.Millisecond},
		{"1 s", 2900 * time.Millisecond, time.Second, 4300 * time.Millisecond},
		{"a minute", 40 * time.Millisecond, time.Minute, 60300 * time.Millisecond},
		{"before the epoch of the grid", -1700 * time.Millisecond, 2 * time.Second, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(base.Add(tc.now))
			got := New(clk, phase).Wait(tc.d)
			if want := tc.wantEndAt - tc.now; got != want {
				t.Errorf("Wait(%s) at base+%s = %s, want %s (ending at base+%s)", tc.d, tc.now, got, want, tc.wantEndAt)
			}
		})
	}
}

// TestBounds checks the contract over many starting points: a wait of at
// least a Step ends within a Step of d (half a Step for an odd number of
// Steps), never before half a Step, and on a tick of its kind.
func TestBounds(t *testing.T) {
	for _, phase := range []time.Duration{0, 700 * time.Millisecond, 1900 * time.Millisecond, -300 * time.Millisecond, 5 * time.Second} {
		for start := time.Duration(0); start < 4*time.Second; start += 37 * time.Millisecond {
			for _, d := range []time.Duration{time.Second, 1499 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 10 * time.Second, 10400 * time.Millisecond, 30 * time.Second, time.Minute} {
				clk := clocktesting.NewFakeClock(time.Unix(0, 0).Add(start))
				got := New(clk, phase).Wait(d)
				odd := (d.Round(Step)/Step)%2 == 1
				slack := Step
				if odd {
					slack = Step / 2
				}
				if got < Step/2 || got < d-slack || got > d+slack {
					t.Fatalf("phase %s, at %s: Wait(%s) = %s, want within %s of it and at least %s", phase, start, d, got, slack, Step/2)
				}
				end := (start + got - phase) % Step
				if end < 0 {
					end += Step
				}
				if end != 0 {
					t.Fatalf("phase %s, at %s: Wait(%s) = %s ends off the ticks", phase, start, d, got)
				}
				if even := ((start+got-phase)/Step)%2 == 0; !odd && !even && start+got-phase >= 0 {
					t.Fatalf("phase %s, at %s: Wait(%s) = %s ends on an odd tick", phase, start, d, got)
				}
			}
		}
	}
}

// TestLoopsShareWakeUps runs the loops of an idle node, each waiting for
// its period after its round (which takes some milliseconds), and counts
// the distinct instants they wake at over a minute: on shared ticks, the
// periods are kept and the wake-ups are the 2 s loop's plus every other
// 5 s round.
func TestLoopsShareWakeUps(t *testing.T) {
	periods := []time.Duration{2 * time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 10 * time.Second,
		10 * time.Second, 10 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}
	for _, align := range []bool{false, true} {
		clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
		a := New(clk, 1234*time.Millisecond)
		if !align {
			a = nil
		}
		start := clk.Now()
		wakes := map[time.Time]bool{}
		rounds := make([]int, len(periods))
		for i, p := range periods {
			// Each loop starts at its own moment of the node's first second
			// and each round takes 3 ms.
			at := start.Add(time.Duration(i) * 97 * time.Millisecond)
			for {
				at = at.Add(3 * time.Millisecond)
				clk.SetTime(at)
				at = at.Add(a.Wait(p))
				if at.Sub(start) > time.Minute+5*time.Second {
					break
				}
				if at.Sub(start) > 5*time.Second {
					wakes[at] = true
					rounds[i]++
				}
			}
		}
		for i, p := range periods {
			if want := int(time.Minute / p); rounds[i] < want-1 || rounds[i] > want+1 {
				t.Errorf("align %t: the %s loop ran %d rounds in a minute, want %d±1", align, p, rounds[i], want)
			}
		}
		t.Logf("align %t: %d wake-ups in a minute", align, len(wakes))
		if align && len(wakes) > 36+1 {
			t.Errorf("aligned: %d wake-ups in a minute, want at most 37 (30 of the 2 s loop, 6 odd rounds of the 5 s one, one slack)", len(wakes))
		}
		if !align && len(wakes) < 100 {
			t.Errorf("not aligned: %d wake-ups in a minute, want each round its own (the test's loops must not share them by chance)", len(wakes))
		}
	}
}
