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

// TestBreakdownPatchPhases: the breakdown splits the start PATCHes'
// round trip by phase, each phase's samples of the burst apart from those
// before it.
func TestBreakdownPatchPhases(t *testing.T) {
	scrape := func(n string) string {
		text := "# TYPE nodekit_pod_start_status_patch_phase_duration_seconds histogram\n"
		for _, phase := range []string{"connection", "write", "answer", "read"} {
			le := map[string]string{"connection": "0.001", "write": "0.002", "answer": "0.05", "read": "0.01"}[phase]
			text += `nodekit_pod_start_status_patch_phase_duration_seconds_bucket{phase="` + phase + `",le="` + le + `"} ` + n + "\n" +
				`nodekit_pod_start_status_patch_phase_duration_seconds_bucket{phase="` + phase + `",le="+Inf"} ` + n + "\n" +
				`nodekit_pod_start_status_patch_phase_duration_seconds_sum{phase="` + phase + `"} 0` + "\n" +
				`nodekit_pod_start_status_patch_phase_duration_seconds_count{phase="` + phase + `"} ` + n + "\n"
		}
		return text
	}
	breakdownSays(t, scrape("7"), scrape("107"), "(100 PATCHes; ")
	breakdownSays(t, scrape("7"), scrape("107"), "answer 25 ms / 45 ms / 50 ms")
}

// TestBreakdownSchedulingLatencies: the breakdown counts the agent's
// goroutine wake-ups over the burst that waited for a core longer than
// each of the runtime's bounds from 82 µs on.
func TestBreakdownSchedulingLatencies(t *testing.T) {
	scrape := func(counts [4]string) string {
		return `# TYPE go_sched_latencies_seconds histogram
go_sched_latencies_seconds_bucket{le="7.167999999999999e-06"} ` + counts[0] + `
go_sched_latencies_seconds_bucket{le="8.191999999999999e-05"} ` + counts[1] + `
go_sched_latencies_seconds_bucket{le="0.0009175039999999999"} ` + counts[2] + `
go_sched_latencies_seconds_bucket{le="0.010485759999999998"} ` + counts[3] + `
go_sched_latencies_seconds_bucket{le="+Inf"} ` + counts[3] + `
go_sched_latencies_seconds_sum 0
go_sched_latencies_seconds_count ` + counts[3] + `
`
	}
	breakdownSays(t, scrape([4]string{"10", "20", "30", "40"}), scrape([4]string{"510", "820", "930", "1040"}),
		"1000 sampled wake-ups (one in 8), waited for a core (go_sched_latencies_seconds) over 82 µs: 200, over 918 µs: 100, over 10 ms: 0")
}
