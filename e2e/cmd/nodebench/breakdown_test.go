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

// TestBreakdownRateLimiter: the breakdown says how long the client's rate
// limiter held the agent's PATCHes over the burst (its other verbs apart).
func TestBreakdownRateLimiter(t *testing.T) {
	scrape := func(patchSum, patchCount string) cluster.Metrics {
		m, err := cluster.ParseMetrics(strings.NewReader(`# TYPE rest_client_rate_limiter_duration_seconds histogram
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PATCH",le="0.005"} ` + patchCount + `
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PATCH",le="+Inf"} ` + patchCount + `
rest_client_rate_limiter_duration_seconds_sum{host="h",verb="PATCH"} ` + patchSum + `
rest_client_rate_limiter_duration_seconds_count{host="h",verb="PATCH"} ` + patchCount + `
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="POST",le="0.005"} 7
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="POST",le="+Inf"} 7
rest_client_rate_limiter_duration_seconds_sum{host="h",verb="POST"} 3
rest_client_rate_limiter_duration_seconds_count{host="h",verb="POST"} 7
`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	b := newBreakdown(scrape("0.5", "10"), scrape("0.7", "110"), 100)
	if got, want := b.String(), "the client's rate limiter held 100 PATCHes 200 ms in all (mean 2.0 ms)"; !strings.Contains(got, want) {
		t.Errorf("breakdown %q does not say %q", got, want)
	}
}
