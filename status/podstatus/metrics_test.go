package podstatus_test

import (
	"strconv"
	"testing"

	"github.com/nodekit/nodekit/status/podstatus"
)

// TestStartLatencyBuckets holds what the pod start histograms' quantiles
// rest on: no bucket below 10 s is more than 25 % wider than its
// lower bound, the targets' 50 ms and 200 ms are bounds, and every bound reads
// as the decimal it is in the exposition.
func TestStartLatencyBuckets(t *testing.T) {
	b := podstatus.StartLatencyBuckets
	if b[0] != 0.001 || b[len(b)-1] != 60 {
		t.Fatalf("buckets run %v to %v; want 0.001 to 60", b[0], b[len(b)-1])
	}
	bounds := map[float64]bool{}
	for i, v := range b {
		bounds[v] = true
		if s := strconv.FormatFloat(v, 'g', -1, 64); len(s) > 6 {
			t.Errorf("bound %d reads %s in the exposition; want a short decimal", i, s)
		}
		if i == 0 {
			continue
		}
		if v <= b[i-1] {
			t.Fatalf("bound %d (%v) is not above the one before (%v)", i, v, b[i-1])
		}
		if v <= 10 && v/b[i-1] > 1.25+1e-9 {
			t.Errorf("bucket %v–%v is %.0f %% wide; want ≤ 25 %% below 10 s", b[i-1], v, 100*(v/b[i-1]-1))
		}
	}
	for _, v := range []float64{0.05, 0.1, 0.2, 0.3, 0.5, 1} {
		if !bounds[v] {
			t.Errorf("%v s is not a bound", v)
		}
	}
}
