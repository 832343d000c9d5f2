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

func TestWaitEndsOnATickOfItsKind(t *testing.T) {
	const phase = 300 * time.Millisecond
	// A multiple of ten seconds: its even ticks are at .3 of even seconds,
	// its fifth ones at 0.3 and 5.3, its tenth ones at 0.3.
	base := time.Unix(1_000_000, 0)
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
		{"10 s from a tenth tick", 10300 * time.Millisecond, 10 * time.Second, 20300 * time.Millisecond},
		{"10 s after the round's own work", 10340 * time.Millisecond, 10 * time.Second, 20300 * time.Millisecond},
		{"10 s plus the Lease's jitter", 10310 * time.Millisecond, 10*time.Second + 400*time.Millisecond, 20300 * time.Millisecond},
		{"10 s from a start off the tenth ticks: the last one before it is due", 2000 * time.Millisecond, 10 * time.Second, 10300 * time.Millisecond},
		{"10 s due just before a tenth tick: that one", 9900 * time.Millisecond, 10 * time.Second, 20300 * time.Millisecond},
		{"30 s: a tenth tick", 12300 * time.Millisecond, 30 * time.Second, 40300 * time.Millisecond},
		{"a minute", 40 * time.Millisecond, time.Minute, 60300 * time.Millisecond},
		{"5 s from a fifth tick", 5320 * time.Millisecond, 5 * time.Second, 10300 * time.Millisecond},
		{"5 s from a tick off the fifth ones: the last fifth one before it is due", 2300 * time.Millisecond, 5 * time.Second, 5300 * time.Millisecond},
		{"1 s", 2900 * time.Millisecond, time.Second, 4300 * time.Millisecond},
		{"3 s: any tick", 2300 * time.Millisecond, 3 * time.Second, 5300 * time.Millisecond},
		{"before the epoch of the grid", -1700 * time.Millisecond, 2 * time.Second, 300 * time.Millisecond},
		{"10 s before the epoch of the grid", -11700 * time.Millisecond, 10 * time.Second, -9700 * time.Millisecond},
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
// least a Step ends on a tick of its kind, never before half a Step; for a
// multiple of five Steps at most half a Step after d and less than its
// grid (five or ten Steps) before, otherwise within a Step of d (half a
// Step for an odd number of Steps).
func TestBounds(t *testing.T) {
	for _, phase := range []time.Duration{0, 700 * time.Millisecond, 1900 * time.Millisecond, -300 * time.Millisecond, 5 * time.Second, 13 * time.Second} {
		for start := time.Duration(0); start < 12*time.Second; start += 37 * time.Millisecond {
			for _, d := range []time.Duration{time.Second, 1499 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second, 10400 * time.Millisecond, 15 * time.Second, 30 * time.Second, time.Minute} {
				clk := clocktesting.NewFakeClock(time.Unix(0, 0).Add(start))
				got := New(clk, phase).Wait(d)
				n := d.Round(Step) / Step
				grid := Step
				switch {
				case n%10 == 0:
					grid = 10 * Step
				case n%5 == 0:
					grid = 5 * Step
				case n%2 == 0:
					grid = 2 * Step
				}
				lo, hi := d-Step, d+Step
				switch {
				case n%5 == 0:
					lo, hi = d-grid+Step/2, d+Step/2
				case n%2 == 1:
					lo, hi = d-Step/2, d+Step/2
				}
				if got < Step/2 || got < lo || got > hi {
					t.Fatalf("phase %s, at %s: Wait(%s) = %s, want between %s and %s and at least %s", phase, start, d, got, lo, hi, Step/2)
				}
				end := (start + got - phase) % grid
				if end < 0 {
					end += grid
				}
				if end != 0 {
					t.Fatalf("phase %s, at %s: Wait(%s) = %s ends off the ticks %s apart", phase, start, d, got, grid)
				}
			}
		}
	}
}

// TestLoopsShareWakeUps runs the loops of an idle node, each waiting for
// its period after its round (which takes some milliseconds), and counts
// the distinct instants they wake at over a minute: on shared ticks, the
// periods are kept and the wake-ups are the 2 s loop's plus every other
// 5 s round; without the 2 s loop, the 10 s loops' (all on one tick,
// however many seconds apart they started) and the 5 s loop's.
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
		wakes, wakesBut2s := map[time.Time]bool{}, map[time.Time]bool{}
		rounds := make([]int, len(periods))
		for i, p := range periods {
			// Each loop starts at its own moment of the node's first
			// seconds and each round takes 3 ms.
			at := start.Add(time.Duration(i) * 797 * time.Millisecond)
			for {
				at = at.Add(3 * time.Millisecond)
				clk.SetTime(at)
				at = at.Add(a.Wait(p))
				if at.Sub(start) > time.Minute+15*time.Second {
					break
				}
				if at.Sub(start) > 15*time.Second {
					wakes[at] = true
					if p != 2*time.Second {
						wakesBut2s[at] = true
					}
					rounds[i]++
				}
			}
		}
		for i, p := range periods {
			if want := int(time.Minute / p); rounds[i] < want-1 || rounds[i] > want+1 {
				t.Errorf("align %t: the %s loop ran %d rounds in a minute, want %d±1", align, p, rounds[i], want)
			}
		}
		t.Logf("align %t: %d wake-ups in a minute, %d without the 2 s loops", align, len(wakes), len(wakesBut2s))
		if align && len(wakes) > 36+1 {
			t.Errorf("aligned: %d wake-ups in a minute, want at most 37 (30 of the 2 s loop, 6 odd rounds of the 5 s one, one slack)", len(wakes))
		}
		if align && len(wakesBut2s) > 12+1 {
			t.Errorf("aligned, without the 2 s loops: %d wake-ups in a minute, want at most 13 (12 of the 5 s loop, the others' on every other one of them, one slack)", len(wakesBut2s))
		}
		if !align && len(wakes) < 100 {
			t.Errorf("not aligned: %d wake-ups in a minute, want each round its own (the test's loops must not share them by chance)", len(wakes))
		}
	}
}
