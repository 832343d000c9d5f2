package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nodekit/nodekit/e2e/bench"
	"github.com/nodekit/nodekit/e2e/cluster"
)

// breakdown is where a nodekit agent's time went over one burst, from the
// change of its metrics.
type breakdown struct {
	pods int
	// agent is nodekit_pod_start_agent_duration_seconds: the agent first
	// seeing a pod → its watch showing the pod's containers started.
	agent bench.Histogram
	// internal is nodekit_pod_start_internal_duration_seconds: the agent
	// first seeing a pod → the agent sends the status (PATCH) showing the
	// pod's containers started; startPatch is
	// nodekit_pod_start_status_patch_duration_seconds, that PATCH's round
	// trip on the agent's clock (the client's side and the API server's;
	// the API server's own time is in its audit log, see node.statusPatches).
	internal, startPatch bench.Histogram
	// patchPhases are nodekit_pod_start_status_patch_phase_duration_seconds
	// by phase (startPatchPhases' order): startPatch split where the
	// agent's HTTP client sees it.
	patchPhases [len(startPatchPhases)]bench.Histogram
	// sched is go_sched_latencies_seconds: how long the agent's
	// goroutines waited runnable for a core, by decade.
	sched bench.Histogram
	// patchLimiter is rest_client_rate_limiter_duration_seconds of the
	// PATCHes: the waits of the client's rate limiter before them.
	patchLimiter bench.Histogram
	// sli is kubelet_pod_start_sli_duration_seconds (creation → watch shows
	// started, less image pulls): coarse buckets, from 0.5 s.
	sli bench.Histogram
	// worker is kubelet_pod_worker_duration_seconds by operation.
	worker map[string]bench.Histogram
	// statusSync is kubelet_pod_status_sync_duration_seconds: a status
	// change → its write.
	statusSync bench.Histogram
	// patches are the pod status PATCHes sent.
	patches float64
	// criOps and criTime are the CRI calls and their summed duration by
	// operation (kubelet_runtime_operations_*).
	criOps  map[string]float64
	criTime map[string]time.Duration
	relists bench.Histogram
	// turnWait is nodekit_pod_start_turn_wait_seconds: the waits for a
	// start turn (--max-parallel-pod-starts), one per turn taken.
	turnWait bench.Histogram
	// allocated is the bytes the agent's Go heap allocated
	// (go_memstats_alloc_bytes_total) and gcs the garbage collections it
	// ran (go_gc_duration_seconds' count): the garbage a burst makes.
	allocated, gcs float64
}

// startPatchPhases are the phases of
// nodekit_pod_start_status_patch_phase_duration_seconds, in order.
var startPatchPhases = [...]string{"connection", "write", "answer", "read"}

// newBreakdown computes the breakdown from the agent's metrics before and
// after a burst of pods.
func newBreakdown(before, after cluster.Metrics, pods int) *breakdown {
	b := &breakdown{pods: pods, worker: map[string]bench.Histogram{}, criTime: map[string]time.Duration{}}
	b.agent, _ = bench.HistogramDelta(before, after, "nodekit_pod_start_agent_duration_seconds", nil)
	b.internal, _ = bench.HistogramDelta(before, after, "nodekit_pod_start_internal_duration_seconds", nil)
	b.startPatch, _ = bench.HistogramDelta(before, after, "nodekit_pod_start_status_patch_duration_seconds", nil)
	for i, phase := range startPatchPhases {
		b.patchPhases[i], _ = bench.HistogramDelta(before, after, "nodekit_pod_start_status_patch_phase_duration_seconds", map[string]string{"phase": phase})
	}
	b.sched, _ = bench.HistogramDelta(before, after, "go_sched_latencies_seconds", nil)
	b.patchLimiter, _ = bench.HistogramDelta(before, after, "rest_client_rate_limiter_duration_seconds", map[string]string{"verb": "PATCH"})
	b.sli, _ = bench.HistogramDelta(before, after, "kubelet_pod_start_sli_duration_seconds", nil)
	b.statusSync, _ = bench.HistogramDelta(before, after, "kubelet_pod_status_sync_duration_seconds", nil)
	b.relists, _ = bench.HistogramDelta(before, after, "kubelet_pleg_relist_duration_seconds", nil)
	b.turnWait, _ = bench.HistogramDelta(before, after, "nodekit_pod_start_turn_wait_seconds", nil)
	for _, op := range []string{"create", "update", "sync", "kill"} {
		if h, ok := bench.HistogramDelta(before, after, "kubelet_pod_worker_duration_seconds", map[string]string{"operation_type": op}); ok && h.Count > 0 {
			b.worker[op] = h
		}
	}
	b.allocated = after.Sum("go_memstats_alloc_bytes_total", nil) - before.Sum("go_memstats_alloc_bytes_total", nil)
	b.gcs = summaryCount(after, "go_gc_duration_seconds") - summaryCount(before, "go_gc_duration_seconds")
	b.patches = after.Sum("nodekit_pod_status_patches_total", map[string]string{"result": "patched"}) -
		before.Sum("nodekit_pod_status_patches_total", map[string]string{"result": "patched"})
	b.criOps = bench.CounterDeltas(before, after, "kubelet_runtime_operations_total", "operation_type")
	for op := range b.criOps {
		if h, ok := bench.HistogramDelta(before, after, "kubelet_runtime_operations_duration_seconds", map[string]string{"operation_type": op}); ok {
			b.criTime[op] = time.Duration(h.Sum * float64(time.Second))
		}
	}
	return b
}

// summaryCount is the sample count of summary name in m (0 when absent).
func summaryCount(m cluster.Metrics, name string) float64 {
	f, ok := m[name]
	if !ok || len(f.Metric) == 0 {
		return 0
	}
	return float64(f.Metric[0].GetSummary().GetSampleCount())
}

// turnWaitPerPod is the time the burst's pods waited for start turns, on
// average per pod.
func (b *breakdown) turnWaitPerPod() time.Duration {
	return time.Duration(b.turnWait.Sum / float64(b.pods) * float64(time.Second))
}

// statusWritesPerPod is the pod status PATCHes per pod.
func (b *breakdown) statusWritesPerPod() float64 { return b.patches / float64(b.pods) }

// String is the breakdown as one line for the notes.
func (b *breakdown) String() string {
	var parts []string
	parts = append(parts, fmt.Sprintf("agent's internal latency (seen → started status PATCH sent, %d pods) p50/p90/p99 %s / %s / %s, mean %s",
		b.internal.Count, bench.FormatDuration(b.internal.Quantile(0.5)), bench.FormatDuration(b.internal.Quantile(0.9)),
		bench.FormatDuration(b.internal.Quantile(0.99)), bench.FormatDuration(b.internal.Mean())))
	if b.startPatch.Count > 0 {
		parts = append(parts, fmt.Sprintf("that PATCH's round trip on the agent's clock (sent → answered: the client's side and the API server's) p50/p90/p99 %s / %s / %s, mean %s",
			bench.FormatDuration(b.startPatch.Quantile(0.5)), bench.FormatDuration(b.startPatch.Quantile(0.9)),
			bench.FormatDuration(b.startPatch.Quantile(0.99)), bench.FormatDuration(b.startPatch.Mean())))
	}
	if b.patchPhases[0].Count > 0 {
		var phases []string
		for i, h := range b.patchPhases {
			phases = append(phases, fmt.Sprintf("%s %s / %s / %s (mean %s)", startPatchPhases[i], bench.FormatDuration(h.Quantile(0.5)),
				bench.FormatDuration(h.Quantile(0.9)), bench.FormatDuration(h.Quantile(0.99)), bench.FormatDuration(h.Mean())))
		}
		parts = append(parts, fmt.Sprintf("that round trip by phase on the agent's HTTP client (%d PATCHes; connection: rate limiter and pool, write: stream, headers and body, answer: → first byte as the read loop took it, read: → body decoded, writer awake) p50/p90/p99 %s",
			b.patchPhases[0].Count, strings.Join(phases, ", ")))
	}
	if b.sched.Count > 0 {
		parts = append(parts, fmt.Sprintf("agent's goroutines: %d sampled wake-ups (one in %d), waited for a core (go_sched_latencies_seconds) %s", b.sched.Count, gTrackingPeriod, schedWaits(b.sched)))
	}
	if b.patchLimiter.Count > 0 {
		parts = append(parts, fmt.Sprintf("the client's rate limiter held %d PATCHes %s in all (mean %s)", b.patchLimiter.Count,
			bench.FormatDuration(time.Duration(b.patchLimiter.Sum*float64(time.Second))), bench.FormatDuration(b.patchLimiter.Mean())))
	}
	parts = append(parts, fmt.Sprintf("agent's share (seen → watch shows started, %d pods) p50/p99 %s / %s, mean %s",
		b.agent.Count, bench.FormatDuration(b.agent.Quantile(0.5)), bench.FormatDuration(b.agent.Quantile(0.99)), bench.FormatDuration(b.agent.Mean())))
	if b.sli.Count > 0 {
		parts = append(parts, fmt.Sprintf("kubelet_pod_start_sli_duration_seconds p50/p99 %s / %s",
			bench.FormatDuration(b.sli.Quantile(0.5)), bench.FormatDuration(b.sli.Quantile(0.99))))
	}
	var ops []string
	for op := range b.worker {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		h := b.worker[op]
		parts = append(parts, fmt.Sprintf("pod worker %s: %d syncs, mean %s, total %s", op, h.Count, bench.FormatDuration(h.Mean()),
			bench.FormatDuration(time.Duration(h.Sum*float64(time.Second)))))
	}
	// The kubelet's buckets (…, 0.5, 1, 5, 10 s) are too wide for a
	// quantile: a first Pending status held PendingWriteDelay (1 s) lands
	// in 1–5 s and a p99 interpolated there reads 4.9 s. The counts per
	// bucket say what is known.
	parts = append(parts, fmt.Sprintf("pod status writes %.0f (%.2f per pod), change → written mean %s, by bucket %s",
		b.patches, b.statusWritesPerPod(), bench.FormatDuration(b.statusSync.Mean()), b.statusSync.Buckets()))
	total, totalTime := 0.0, time.Duration(0)
	for op, n := range b.criOps {
		total += n
		totalTime += b.criTime[op]
	}
	ops = ops[:0]
	for op := range b.criOps {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return b.criTime[ops[i]] > b.criTime[ops[j]] })
	var cri []string
	for _, op := range ops {
		cri = append(cri, fmt.Sprintf("%s %.0f in %s", op, b.criOps[op], bench.FormatDuration(b.criTime[op])))
	}
	parts = append(parts, fmt.Sprintf("CRI calls %.0f (%.1f per pod) taking %s in all: %s", total, total/float64(b.pods),
		bench.FormatDuration(totalTime), strings.Join(cri, ", ")))
	parts = append(parts, fmt.Sprintf("PLEG relists %d taking %s", b.relists.Count, bench.FormatDuration(time.Duration(b.relists.Sum*float64(time.Second)))))
	if b.allocated > 0 {
		parts = append(parts, fmt.Sprintf("Go heap allocated %s (%.0f KiB per pod) in %.0f GC cycles",
			bench.FormatMiB(uint64(b.allocated)), b.allocated/1024/float64(b.pods), b.gcs))
	}
	parts = append(parts, fmt.Sprintf("start turns %d waited %s per pod (p50/p99 %s / %s)", b.turnWait.Count, bench.FormatDuration(b.turnWaitPerPod()),
		bench.FormatDuration(b.turnWait.Quantile(0.5)), bench.FormatDuration(b.turnWait.Quantile(0.99))))
	return strings.Join(parts, "; ")
}

// schedWaits says how many of h's waits (go_sched_latencies_seconds: the
// runtime's bounds 64 ns, 640 ns, 7.2 µs, 82 µs, 0.92 ms, 10.5 ms, 117 ms)
// lasted over each bound from 50 µs on: "over 82 µs: 900, over 918 µs:
// 120, …".
func schedWaits(h bench.Histogram) string {
	var parts []string
	for i, bound := range h.Bounds {
		if bound < 50e-6 || math.IsInf(bound, 1) {
			continue
		}
		d := time.Duration(bound * float64(time.Second))
		label := fmt.Sprintf("%.0f µs", bound*1e6)
		if d >= time.Millisecond {
			label = bench.FormatDuration(d)
		}
		parts = append(parts, fmt.Sprintf("over %s: %d", label, h.Count-h.Counts[i]))
	}
	return strings.Join(parts, ", ")
}

// profileAgent fetches a profile of n's agent through its node API's
// /debug/pprof/<what> (what: "profile?seconds=N" for CPU, "heap"; see
// cluster.Agent.Profile) and writes it to path. The returned channel gets
// the outcome.
func (b *benchmark) profileAgent(ctx context.Context, n *node, what, path string) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if err := n.agent.Profile(ctx, b.cp.PKI, what, f); err != nil {
				f.Close()
				return err
			}
			b.logf("profile of %s written to %s (go tool pprof -top %s)", n.agent.Name, path, path)
			return f.Close()
		}()
	}()
	return done
}

// saveSmaps copies /proc/<pid>/smaps of n's agent to path, with -profile:
// which mappings (the executable's text and read-only data, the heap
// arenas, stacks) the RSS is in (docs/performance.md).
func (b *benchmark) saveSmaps(n *node, path string) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", n.agent.PID()))
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		b.logf("smaps of %s: %v", n.agent.Name, err)
	}
}
