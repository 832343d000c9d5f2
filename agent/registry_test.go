package agent

import (
	"testing"
)

// TestServedRegistryHasSchedulingLatencies: the registry an agent serves
// holds the runtime's scheduling latencies (nodebench splits a burst's
// waits for a core with them) beside the Go collector's defaults.
func TestServedRegistryHasSchedulingLatencies(t *testing.T) {
	cfg := &Config{}
	_, g := newRegistry(cfg)
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"go_sched_latencies_seconds": false, "go_goroutines": false, "go_gc_gogc_percent": false}
	for _, f := range families {
		if _, ok := want[f.GetName()]; ok {
			want[f.GetName()] = true
			if f.GetName() == "go_sched_latencies_seconds" && len(f.GetMetric()[0].GetHistogram().GetBucket()) < 5 {
				t.Errorf("go_sched_latencies_seconds has %d buckets, want decades from below a microsecond to a second", len(f.GetMetric()[0].GetHistogram().GetBucket()))
			}
		}
	}
	for name, found := range want {
		if !found {
			t.Errorf("the served registry lacks %s", name)
		}
	}
}
