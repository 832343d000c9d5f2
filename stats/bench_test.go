package stats_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/stats"
)

// benchPods is the pod count of the idle CPU target.
const benchPods = 30

// benchHost runs pods pods of two containers each on fakecri (on the real
// clock), with their pod cgroups and log files in the fake tree.
func benchHost(b *testing.B, version int, opts fakecri.Options, pods int) *host {
	h := newHost(b, version)
	h.startCRI(opts)
	h.setCgroup("/kubepods", cgroupValues{cpu: 1e9, usage: gib, rss: gib / 2, limit: 4 * gib})
	for i := range pods {
		uid := fmt.Sprintf("uid-%d", i)
		sb, ids := h.runPod("default", fmt.Sprintf("pod-%d", i), uid, "cpu 10m; memory 20Mi; log started", "app", "sidecar")
		pod := "/kubepods/besteffort/pod" + uid
		h.setCgroup(pod, cgroupValues{cpu: 1e9, usage: 50 << 20, rss: 40 << 20, inactive: 1 << 20})
		h.setCgroup(pod+"/"+sb, cgroupValues{procs: []int{1000 + 3*i}})
		for j, id := range ids {
			h.setCgroup(pod+"/"+id, cgroupValues{procs: []int{1001 + 3*i + j}})
		}
		h.write(h.proc, fmt.Sprintf("%d/net/dev", 1000+3*i), netDev(map[string][4]uint64{"lo": {1, 0, 1, 0}, "eth0": {100, 0, 200, 0}}))
	}
	return h
}

func runSummaryBench(b *testing.B, o stats.Options, cpuMemOnly bool, pods int) {
	o.MaxAge = -1 // every call computes
	o.Clock = clock.RealClock{}
	p, err := stats.New(o)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	get := p.Summary
	if cpuMemOnly {
		get = p.CPUAndMemory
	}
	s, err := get(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if len(s.Pods) != pods {
		b.Fatalf("%d pods, want %d", len(s.Pods), pods)
	}
	b.ReportAllocs()
	before := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := get(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// The process's CPU time: the provider, the CRI client and, in this
	// process too, fakecri's side of the calls.
	b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the user and system CPU time of this process.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSummary computes one summary of 30 pods (60 containers) on a
// fake cgroup v1 tree with fakecri over its gRPC socket: from container
// stats and the pod cgroups (the default) and from pod sandbox stats
// (PodStatsFromCRI), full and CPU and memory only.
func BenchmarkSummary(b *testing.B) {
	for _, bc := range []struct {
		name       string
		fromCRI    bool
		cpuMemOnly bool
	}{
		{"PodCgroups/Full", false, false},
		{"PodCgroups/CPUAndMemory", false, true},
		{"SandboxStats/Full", true, false},
		{"SandboxStats/CPUAndMemory", true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHost(b, 1, fakecri.Options{}, benchPods)
			o := h.options()
			o.Cgroups = h.cgroups()
			o.PodStatsFromCRI = bc.fromCRI
			runSummaryBench(b, o, bc.cpuMemOnly, benchPods)
		})
	}
}

// BenchmarkSummaryRealHost computes a summary with the node's stats from
// this machine's /proc and /sys/fs/cgroup: of 30 fakecri pods (their stats
// from the runtime: no pod cgroups exist for them there), full and CPU and
// memory only, and of no pod at all, full (Idle: the eviction manager's
// round every 10 s on an idle node, as an agent on fakecri computes it,
// without pod cgroups; IdleNoPods: the same with Options.HasPods
// saying the runtime holds no pod, as the agent's PLEG does there).
func BenchmarkSummaryRealHost(b *testing.B) {
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		b.Skipf("no cgroup filesystem on this machine: %v", err)
	}
	for _, bc := range []struct {
		name       string
		pods       int
		cpuMemOnly bool
		hasPods    func() bool
	}{
		{"Full", benchPods, false, nil},
		{"CPUAndMemory", benchPods, true, nil},
		{"Idle", 0, false, nil},
		{"IdleNoPods", 0, false, func() bool { return false }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHost(b, 1, fakecri.Options{}, bc.pods)
			o := h.options()
			o.ProcRoot, o.SysRoot, o.CgroupRoot, o.CgroupVersion = "/proc", "/sys", "/sys/fs/cgroup", 0
			o.HasPods = bc.hasPods
			runSummaryBench(b, o, bc.cpuMemOnly, bc.pods)
		})
	}
}
