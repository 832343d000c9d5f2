package timers

import (
	"testing"
	"time"

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
