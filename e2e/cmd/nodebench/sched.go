package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"strings"
	"time"

	"github.com/nodekit/nodekit/e2e/bench"
)

// schedLatencies is the runtime/metrics name of the time goroutines spent
// runnable before they ran.
const schedLatencies = "/sched/latencies:seconds"

// readSchedLatencies reads this process's scheduling latencies.
func readSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// gTrackingPeriod is the Go runtime's sampling of scheduling latencies:
// it times one goroutine transition in eight (runtime.gTrackingPeriod).
const gTrackingPeriod = 8

// schedWaitsBetween says how many goroutine wake-ups the runtime sampled
// between two reads of readSchedLatencies, how many of them waited for a
// core longer
// than 0.1, 1, 10 and 100 ms (a bucket counts when its lower bound does;
// the runtime's buckets are a sixteenth of a power of two wide), and their
// summed wait, each bucket's at its midpoint, scaled by the sampling to
// all wake-ups: "1500 sampled wake-ups (one in 8), over 0.1 ms: 300, …,
// all waiting about 450 ms".
// Empty when either read is missing.
func schedWaitsBetween(before, after *metrics.Float64Histogram) string {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return ""
	}
	thresholds := []time.Duration{100 * time.Microsecond, time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond}
	over := make([]uint64, len(thresholds))
	var total uint64
	var sum float64
	for i := range after.Counts {
		n := after.Counts[i] - before.Counts[i]
		if n == 0 {
			continue
		}
		total += n
		lo, hi := after.Buckets[i], after.Buckets[i+1]
		if math.IsInf(lo, -1) {
			lo = 0
		}
		if math.IsInf(hi, 1) {
			hi = lo
		}
		sum += float64(n) * (lo + hi) / 2
		for j, t := range thresholds {
			if lo >= t.Seconds() {
				over[j] += n
			}
		}
	}
	parts := []string{fmt.Sprintf("%d sampled wake-ups (one in %d)", total, gTrackingPeriod)}
	for j, t := range thresholds {
		parts = append(parts, fmt.Sprintf("over %s: %d", bench.FormatDuration(t), over[j]))
	}
	parts = append(parts, fmt.Sprintf("all waiting about %s", bench.FormatDuration(time.Duration(sum*gTrackingPeriod*float64(time.Second)))))
	return strings.Join(parts, ", ")
}

// runDelayReading is a reading of bench.RunDelay of the processes a burst
// on a node concerns: its agent, this process (the fake runtime's, on a
// fakecri node), kube-apiserver and etcd.
type runDelayReading struct {
	who    []string
	pids   []int
	before []bench.RunDelay
	at     time.Time
	err    error
}

// runDelays reads the run delays of n's agent, this process and the
// control plane's API server and etcd now.
func (b *benchmark) runDelays(n *node) *runDelayReading {
	r := &runDelayReading{who: []string{"agent", "nodebench"}, pids: []int{n.agent.PID(), os.Getpid()}, at: time.Now()}
	for _, server := range []string{"kube-apiserver", "etcd"} {
		pid, err := b.cp.ServerPID(server)
		r.err = errors.Join(r.err, err)
		r.who, r.pids = append(r.who, server), append(r.pids, pid)
	}
	for _, pid := range r.pids {
		d, err := bench.ReadRunDelay(pid)
		r.err = errors.Join(r.err, err)
		r.before = append(r.before, d)
	}
	return r
}

// since says what each process's threads did since r was read: "over
// 812 ms: agent ran 310 ms and waited 95 ms for a CPU; nodebench …", or
// why not.
func (r *runDelayReading) since() string {
	if r.err != nil {
		return r.err.Error()
	}
	parts := []string{"over " + bench.FormatDuration(time.Since(r.at)) + ": "}
	for i, pid := range r.pids {
		now, err := bench.ReadRunDelay(pid)
		if err != nil {
			return err.Error()
		}
		d := now.Sub(r.before[i])
		parts = append(parts, fmt.Sprintf("%s ran %s and waited %s for a CPU", r.who[i], bench.FormatDuration(d.OnCPU), bench.FormatDuration(d.Waiting)))
	}
	return parts[0] + strings.Join(parts[1:], "; ")
}
