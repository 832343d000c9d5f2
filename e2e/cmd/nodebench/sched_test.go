package main

import (
	"math"
	"runtime/metrics"
	"testing"
)

// TestSchedWaitsBetween: the wake-ups between two reads are counted by
// how long they waited, and their waits summed at their buckets'
// midpoints.
func TestSchedWaitsBetween(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0, 50e-6, 200e-6, 2e-3, 20e-3, 200e-3, math.Inf(1)}
	before := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{0, 5, 1, 1, 1, 1, 0}}
	after := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{0, 105, 11, 5, 3, 2, 0}}
	// 100 waits of 0–50 µs, 10 of 50–200 µs, 4 of 0.2–2 ms, 2 of 2–20 ms,
	// 1 of 20–200 ms (a bucket counts over a threshold when its lower bound
	// is); their sum at the midpoints: 100×25 µs + 10×125 µs + 4×1.1 ms +
	// 2×11 ms + 110 ms = 140.15 ms, 1.12 s for all wake-ups (one in 8
	// sampled).
	got := schedWaitsBetween(before, after)
	want := "117 sampled wake-ups (one in 8), over 0.1 ms: 7, over 1.0 ms: 3, over 10 ms: 1, over 100 ms: 0, all waiting about 1.12 s"
	if got != want {
		t.Errorf("schedWaitsBetween = %q, want %q", got, want)
	}
	if got := schedWaitsBetween(nil, after); got != "" {
		t.Errorf("without a first read: %q, want nothing", got)
	}
}
