package bench_test

import (
	"os"
	"time"

	"github.com/nodekit/nodekit/e2e/bench"
)

// A benchmark summarizes its samples and prints them next to the target and
// the anchors.
func Example() {
	samples := []time.Duration{
		1200 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond, 1100 * time.Millisecond,
	}
	d := bench.Summarize(samples)
	var t bench.Table
	t.Add(bench.Row{
		Metric:  "4 pods at once: create → Running p50",
		Value:   bench.FormatDuration(d.P50),
		Target:  "≤ 1.50 s",
		Kubelet: "2.10 s",
		Anchor:  "kubelet 4.70 s",
		Result:  bench.Verdict(d.P50 <= 1500*time.Millisecond),
	})
	t.Add(bench.Row{Metric: "4 pods at once: p50/p90/p99", Value: d.String()})
	t.Note("samples: %d", d.N)
	_ = t.Write(os.Stdout)
	// Output:
	// METRIC                                NODEKIT                   TARGET    KUBELET (this run)  ANCHOR (brief)  RESULT
	// 4 pods at once: create → Running p50  1.10 s                    ≤ 1.50 s  2.10 s              kubelet 4.70 s  pass
	// 4 pods at once: p50/p90/p99           1.10 s / 1.50 s / 1.50 s  —         —                   —               —
	// - samples: 4
}
