package timers

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestEarliest(t *testing.T) {
	a, b := time.Unix(10, 0), time.Unix(20, 0)
	for _, tc := range []struct{ x, y, want time.Time }{
		{a, b, a}, {b, a, a}, {time.Time{}, b, b}, {a, time.Time{}, a}, {time.Time{}, time.Time{}, time.Time{}},
	} {
		if got := Earliest(tc.x, tc.y); !got.Equal(tc.want) {
			t.Errorf("Earliest(%v, %v) = %v, want %v", tc.x, tc.y, got, tc.want)
		}
	}
}

func TestStopDrainsAFiredTimer(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	tm := clk.NewTimer(time.Second)
	clk.Step(time.Second) // fired: a value waits in its channel
	Stop(tm)
	tm.Reset(time.Minute)
	select {
	case <-tm.C():
		t.Fatal("the value fired before Stop came out after Reset")
	default:
	}
	clk.Step(time.Minute)
	select {
	case <-tm.C():
	default:
		t.Fatal("the reset timer did not fire")
	}
}

func TestArmFiresAtTheDeadline(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	tm, due := Arm(clk, nil, time.Unix(10, 0), time.Millisecond)
	if due {
		t.Fatal("due 10 s early")
	}
	clk.Step(10*time.Second - time.Nanosecond)
	select {
	case <-tm.C():
		t.Fatal("fired before the deadline")
	default:
	}
	clk.Step(time.Nanosecond)
	select {
	case <-tm.C():
	default:
		t.Fatal("did not fire at the deadline")
	}
	// Re-armed for a deadline within slack: it waits slack, once.
	if _, due := Arm(clk, tm, clk.Now().Add(time.Microsecond), time.Millisecond); due {
		t.Fatal("due before the deadline")
	}
	clk.Step(time.Microsecond)
	select {
	case <-tm.C():
		t.Fatal("fired sooner than slack")
	default:
	}
	clk.Step(time.Millisecond)
	select {
	case <-tm.C():
	default:
		t.Fatal("did not fire slack after the reading")
	}
}

func TestArmReportsAPassedDeadline(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(10, 0))
	tm := clk.NewTimer(time.Second)
	clk.Step(time.Second) // fired: its value must not come out later
	got, due := Arm(clk, tm, time.Unix(10, 0), time.Millisecond)
	if !due || got != tm {
		t.Fatalf("Arm at the deadline = %v, %v; want t, due", got, due)
	}
	if clk.HasWaiters() {
		t.Error("the timer is still armed")
	}
	select {
	case <-tm.C():
		t.Error("the timer's old value was left in its channel")
	default:
	}
	if got, due := Arm(clk, nil, time.Unix(5, 0), time.Millisecond); !due || got != nil {
		t.Errorf("Arm(nil) past the deadline = %v, %v; want nil, due", got, due)
	}
}

// steppingClock steps its fake clock once, by step, when a timer is made
// or reset: a step between Arm's reading and the timer's arming.
type steppingClock struct {
	*clocktesting.FakeClock
	step time.Duration
}

func (c *steppingClock) takeStep() {
	if d := c.step; d > 0 {
		c.step = 0
		c.Step(d)
	}
}

func (c *steppingClock) NewTimer(d time.Duration) clock.Timer {
	c.takeStep()
	return &steppingTimer{Timer: c.FakeClock.NewTimer(d), clk: c}
}

type steppingTimer struct {
	clock.Timer
	clk *steppingClock
}

func (t *steppingTimer) Reset(d time.Duration) bool {
	t.clk.takeStep()
	return t.Timer.Reset(d)
}

func TestArmTakesTheWaitAgainWhenTheClockMovedWhileArming(t *testing.T) {
	for _, tc := range []struct {
		name       string
		step       time.Duration
		wantDue    bool
		fireStepAt time.Duration // from the start, to the deadline (10 s)
	}{
		{name: "a step before the deadline", step: 4 * time.Second, fireStepAt: 10 * time.Second},
		{name: "a step to the deadline", step: 10 * time.Second, wantDue: true},
		{name: "a step past the deadline", step: 15 * time.Second, wantDue: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(0, 0)
			clk := &steppingClock{FakeClock: clocktesting.NewFakeClock(start)}
			for _, first := range []bool{true, false} {
				clk.SetTime(start)
				var tm clock.Timer
				if !first {
					tm = clk.NewTimer(time.Hour)
				}
				clk.step = tc.step
				tm, due := Arm(clk, tm, start.Add(10*time.Second), time.Millisecond)
				if due != tc.wantDue {
					t.Fatalf("due = %v, want %v (made here: %v)", due, tc.wantDue, first)
				}
				if due {
					continue
				}
				// The clock stood at start+step when the timer was
				// armed: armed from the reading before, it would fire
				// at 10 s + step.
				clk.SetTime(start.Add(tc.fireStepAt))
				select {
				case <-tm.C():
				default:
					t.Fatalf("did not fire at the deadline (made here: %v)", first)
				}
			}
		})
	}
}
