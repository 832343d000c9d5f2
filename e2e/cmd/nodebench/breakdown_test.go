package main

import (
	"strings"
	"testing"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// breakdownSays checks that the breakdown between the scrapes before and
// after (Prometheus text) of a 100-pod burst says want.
func breakdownSays(t *testing.T, before, after, want string) {
	t.Helper()
	var m [2]cluster.Metrics
	for i, text := range []string{before, after} {
		var err error
		if m[i], err = cluster.ParseMetrics(strings.NewReader(text)); err != nil {
			t.Fatal(err)
		}
	}
	if got := newBreakdown(m[0], m[1], 100).String(); !strings.Contains(got, want) {
		t.Errorf("breakdown %q does not say %q", got, want)
	}
}

// TestBreakdownGarbage: the breakdown says how much the agent's Go heap
// allocated over the burst, per pod, and in how many collections, from
// the Go collector's counter and summary before and after.
func TestBreakdownGarbage(t *testing.T) {
	scrape := func(alloc, gcs string) string {
		return `# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total ` + alloc + `
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.0001
go_gc_duration_seconds_sum 0.01
go_gc_duration_seconds_count ` + gcs + `
`
	}
	breakdownSays(t, scrape("1048576", "10"), scrape("3145728", "13"), "Go heap allocated 2.0 MiB (20 KiB per pod) in 3 GC cycles")
}

// TestBreakdownRateLimiter: the breakdown says how long the client's rate
// limiter held the agent's PATCHes over the burst (its other verbs apart).
func TestBreakdownRateLimiter(t *testing.T) {
	scrape := func(patchSum, patchCount string) string {
		return `# TYPE rest_client_rate_limiter_duration_seconds histogram
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PATCH",le="0.005"} ` + patchCount + `
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="PATCH",le="+Inf"} ` + patchCount + `
rest_client_rate_limiter_duration_seconds_sum{host="h",verb="PATCH"} ` + patchSum + `
rest_client_rate_limiter_duration_seconds_count{host="h",verb="PATCH"} ` + patchCount + `
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="POST",le="0.005"} 7
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="POST",le="+Inf"} 7
rest_client_rate_limiter_duration_seconds_sum{host="h",verb="POST"} 3
rest_client_rate_limiter_duration_seconds_count{host="h",verb="POST"} 7
`
	}
	breakdownSays(t, scrape("0.5", "10"), scrape("0.7", "110"), "the client's rate limiter held 100 PATCHes 200 ms in all (mean 2.0 ms)")
}
