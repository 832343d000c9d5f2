package main

import (
	"strings"
	"testing"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// TestBreakdownGarbage: the breakdown says how much the agent's Go heap
// allocated over the burst, per pod, and in how many collections, from
// the Go collector's counter and summary before and after.
func TestBreakdownGarbage(t *testing.T) {
	scrape := func(alloc, gcs string) cluster.Metrics {
		m, err := cluster.ParseMetrics(strings.NewReader(`# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total ` + alloc + `
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.0001
go_gc_duration_seconds_sum 0.01
go_gc_duration_seconds_count ` + gcs + `
`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	b := newBreakdown(scrape("1048576", "10"), scrape("3145728", "13"), 100)
	if got, want := b.String(), "Go heap allocated 2.0 MiB (20 KiB per pod) in 3 GC cycles"; !strings.Contains(got, want) {
		t.Errorf("breakdown %q does not say %q", got, want)
	}
}
