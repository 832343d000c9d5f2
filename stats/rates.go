package stats

import (
	"strings"
	"time"
)

// minRateWindow is the shortest interval a CPU rate is computed over: a
// sample taken sooner after the previous one reuses the last rate, so two
// callers a few milliseconds apart do not report a noisy rate.
const minRateWindow = time.Second

// rateRetention is how long a cgroup's series is kept once it stops being
// sampled (the kubelet keeps its CPU usage cache 10 minutes). A pod's or
// container's series goes with the first round that no longer samples it:
// the runtime lists every sandbox and container it has, so one it does not
// list is gone, and a node that churns pods would otherwise hold ten
// minutes of them.
const rateRetention = 10 * time.Minute

// Series keys: "cgroup:" + a cgroup, "pod:" + a sandbox ID, "container:" + a
// container ID. Only cgroup series outlive the round that stops sampling
// them.
const cgroupSeries = "cgroup:"

// cpuRates turns cumulative CPU times into usage rates (nanocores), the way
// the kubelet computes usageNanoCores from two samples. Not safe for
// concurrent use: the Provider calls it only under its round lock.
type cpuRates struct {
	series map[string]*rateSeries
	// round counts the rounds begun; a series records the last one that
	// sampled it.
	round uint64
}

type rateSeries struct {
	baseTime  time.Time
	baseUsage uint64
	rate      uint64
	hasRate   bool
	seen      time.Time
	round     uint64
}

// begin starts a round of samples (see prune).
func (c *cpuRates) begin() { c.round++ }

// update records the cumulative CPU time usage (nanoseconds) of series key
// at t and returns its rate over the window since the previous sample, if
// one at least minRateWindow older exists (or the last rate computed, for a
// sample taken sooner). A counter that went backwards (a new cgroup with a
// reused key) starts the series over.
func (c *cpuRates) update(key string, t time.Time, usage uint64) (uint64, bool) {
	if c.series == nil {
		c.series = map[string]*rateSeries{}
	}
	s, ok := c.series[key]
	if !ok || usage < s.baseUsage || !t.After(s.baseTime) {
		if ok && t.Equal(s.baseTime) && usage == s.baseUsage {
			s.seen, s.round = t, c.round // the same sample again (a runtime's cached stats)
			return s.rate, s.hasRate
		}
		c.series[key] = &rateSeries{baseTime: t, baseUsage: usage, seen: t, round: c.round}
		return 0, false
	}
	s.seen, s.round = t, c.round
	window := t.Sub(s.baseTime)
	if window < minRateWindow {
		return s.rate, s.hasRate
	}
	s.rate = uint64(float64(usage-s.baseUsage) / window.Seconds())
	s.hasRate = true
	s.baseTime, s.baseUsage = t, usage
	return s.rate, true
}

// prune ends a round: it forgets the pod and container series the round
// did not sample, and the cgroup series not sampled since before now −
// rateRetention.
func (c *cpuRates) prune(now time.Time) {
	for k, s := range c.series {
		if now.Sub(s.seen) > rateRetention || (s.round != c.round && !strings.HasPrefix(k, cgroupSeries)) {
			delete(c.series, k)
		}
	}
}
