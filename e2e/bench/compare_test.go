package bench

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/e2e/cluster"
)

func TestChangeBringsUnitsTogether(t *testing.T) {
	for _, c := range []struct{ old, cur, want string }{
		{"2.65 s / 3.71 s / 4.14 s", "265 ms / 371 ms / 4.14 s", "×0.10 / ×0.10 / ="},
		{"443 (4.4)", "221 (2.2)", "×0.50 / ×0.50"},
		{"64.9 MiB", "1.00 GiB", "×15.78"},
		{"not run", "1.50 CPU-s", "—"},
		{"0.75 %", "0.10 %", "×0.13"},
	} {
		if got := Change(c.old, c.cur); got != c.want {
			t.Errorf("Change(%q, %q) = %q, want %q", c.old, c.cur, got, c.want)
		}
	}
}

func TestTableRoundTripsThroughJSONAndCompares(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.json")
	old := &Table{Date: "2026-12-01T19:00:00Z", Machine: "2 CPUs", FileSystem: "-fs=host: ext4", Rows: []Row{
		{Metric: "burst p50", Value: "2.00 s", Result: Fail},
		{Metric: "gone", Value: "1"},
	}}
	if err := old.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	read, err := ReadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	cur := &Table{FileSystem: "-fs=ext4: journaled", Rows: []Row{{Metric: "burst p50", Value: "500 ms", Result: Pass}, {Metric: "added", Value: "3"}}}
	var out bytes.Buffer
	if err := Compare(&out, read, cur); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"×0.25", "FAIL → pass", "new figure: added", "figure gone: gone", "2 CPUs",
		"on another file system: before -fs=host: ext4; now -fs=ext4: journaled"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("comparison lacks %q:\n%s", want, out.String())
		}
	}
}

func TestHistogramDeltaQuantiles(t *testing.T) {
	scrape := func(text string) cluster.Metrics {
		m, err := cluster.ParseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	const head = "# TYPE h histogram\n"
	before := scrape(head + `h_bucket{le="0.01"} 5
h_bucket{le="0.02"} 5
h_bucket{le="+Inf"} 5
h_sum 0.02
h_count 5
`)
	after := scrape(head + `h_bucket{le="0.01"} 55
h_bucket{le="0.02"} 105
h_bucket{le="+Inf"} 105
h_sum 1.52
h_count 105
`)
	h, ok := HistogramDelta(before, after, "h", nil)
	if !ok || h.Count != 100 {
		t.Fatalf("delta = %+v, %t; want 100 samples", h, ok)
	}
	if got := h.Quantile(0.5); got != 10*time.Millisecond {
		t.Errorf("p50 = %v, want 10ms", got)
	}
	if got := h.Quantile(0.99); got < 19*time.Millisecond || got > 20*time.Millisecond {
		t.Errorf("p99 = %v, want 19.8ms", got)
	}
	if got := h.Mean(); got != 15*time.Millisecond {
		t.Errorf("mean = %v, want 15ms", got)
	}
	if got, want := h.Buckets(), "≤ 10 ms: 50, ≤ 20 ms: 50"; got != want {
		t.Errorf("buckets = %q, want %q (empty buckets left out)", got, want)
	}
	over := scrape(head + `h_bucket{le="1"} 2
h_bucket{le="5"} 3
h_bucket{le="+Inf"} 4
h_sum 70
h_count 4
`)
	h, _ = HistogramDelta(nil, over, "h", nil)
	if got, want := h.Buckets(), "≤ 1.00 s: 2, ≤ 5.00 s: 1, > 5.00 s: 1"; got != want {
		t.Errorf("buckets = %q, want %q", got, want)
	}
	if got := (Histogram{}).Buckets(); got != "none" {
		t.Errorf("no samples: buckets = %q, want none", got)
	}
}
