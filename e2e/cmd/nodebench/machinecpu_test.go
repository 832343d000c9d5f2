package main

import (
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/e2e/bench"
)

// TestReportMachineCPU checks the rows of the machine's CPU over both
// containerd bursts: the whole with its utilization, each part with its
// share and per pod, the CRI calls per pod, and the notes (calls by
// method, the shims' cgroups, the ratio of the two bursts).
func TestReportMachineCPU(t *testing.T) {
	nodekit := &bench.MachineCPU{Window: 4 * time.Second, CPUs: 2, Busy: 6 * time.Second, Agent: 300 * time.Millisecond,
		Runtime: 3 * time.Second, Pods: 600 * time.Millisecond, ControlPlane: 900 * time.Millisecond, Bench: 150 * time.Millisecond,
		Rest: 1050 * time.Millisecond, Interrupts: 200 * time.Millisecond, RuntimeCalls: map[string]float64{"RunPodSandbox": 30, "ContainerStatus": 60}}
	kubelet := &bench.MachineCPU{Window: 6 * time.Second, CPUs: 2, Busy: 12 * time.Second, Agent: 900 * time.Millisecond,
		Runtime: 6 * time.Second, Pods: 600 * time.Millisecond, ControlPlane: 1200 * time.Millisecond, Bench: 150 * time.Millisecond,
		Rest: 3150 * time.Millisecond, RuntimeCalls: map[string]float64{"RunPodSandbox": 30, "ListContainers": 270}}
	b := &benchmark{
		ctrdNode: &node{burst: &bench.BurstResult{Machine: nodekit}, shimCgroups: map[string]int{"/x": 30}},
		kubelet:  &node{burst: &bench.BurstResult{Machine: kubelet}},
	}
	b.reportMachineCPU(30, b.ctrdNode.burst, b.kubelet.burst)
	want := []bench.Row{
		{Metric: "the machine's CPU", Value: "6.00 CPU-s (75 % of 2 CPUs × 4.00 s)", Kubelet: "12.00 CPU-s (100 % of 2 CPUs × 6.00 s)"},
		{Metric: "the agent", Value: "0.30 CPU-s (5 %; 10 ms per pod)", Kubelet: "0.90 CPU-s (8 %; 30 ms per pod)"},
		{Metric: "the runtime", Value: "3.00 CPU-s (50 %; 100 ms per pod)", Kubelet: "6.00 CPU-s (50 %; 200 ms per pod)"},
		{Metric: "the pods' cgroups", Value: "0.60 CPU-s (10 %; 20 ms per pod)", Kubelet: "0.60 CPU-s (5 %; 20 ms per pod)"},
		{Metric: "the control plane", Value: "0.90 CPU-s (15 %; 30 ms per pod)", Kubelet: "1.20 CPU-s (10 %; 40 ms per pod)"},
		{Metric: "nodebench", Value: "0.15 CPU-s (2 %; 5 ms per pod)", Kubelet: "0.15 CPU-s (1 %; 5 ms per pod)"},
		{Metric: "the rest", Value: "1.05 CPU-s (18 %; 35 ms per pod)", Kubelet: "3.15 CPU-s (26 %; 105 ms per pod)"},
		{Metric: "CRI calls", Value: "90 (3.0)", Kubelet: "300 (10.0)"},
	}
	if len(b.table.Rows) != len(want) {
		t.Fatalf("rows = %+v, want %d", b.table.Rows, len(want))
	}
	for i, r := range b.table.Rows {
		if !strings.Contains(r.Metric, want[i].Metric) || r.Value != want[i].Value || r.Kubelet != want[i].Kubelet {
			t.Errorf("row %d = %+v, want metric with %q, %q, %q", i, r, want[i].Metric, want[i].Value, want[i].Kubelet)
		}
	}
	notes := strings.Join(b.table.Notes, "\n")
	for _, s := range []string{"ContainerStatus 60, RunPodSandbox 30", "ListContainers 270, RunPodSandbox 30", "map[/x:30]", "0.50 × the kubelet's (the runtime's 0.50 ×)"} {
		if !strings.Contains(notes, s) {
			t.Errorf("notes lack %q:\n%s", s, notes)
		}
	}

	b = &benchmark{ctrdNode: &node{burst: &bench.BurstResult{}}}
	b.reportMachineCPU(30, b.ctrdNode.burst, nil)
	if len(b.table.Rows) != 0 {
		t.Errorf("no account in either burst: rows %+v", b.table.Rows)
	}
}
