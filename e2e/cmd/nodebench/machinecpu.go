package main

import (
	"fmt"
	"math"
	"time"

	"github.com/nodekit/nodekit/e2e/bench"
)

// machineParts are the rows of a containerd burst's machine CPU account,
// in the table's order: what each part is and how it is read.
var machineParts = []struct {
	what string
	part func(*bench.MachineCPU) time.Duration
}{
	{"the agent (its CPU-time clock)", func(m *bench.MachineCPU) time.Duration { return m.Agent }},
	{"the runtime (containerd, its shims, runc, the CNI plugins: containerd's cgroup)", func(m *bench.MachineCPU) time.Duration { return m.Runtime }},
	{"the pods' cgroups (each container's runc init once in its cgroup, pause, sleep)", func(m *bench.MachineCPU) time.Duration { return m.Pods }},
	{"the control plane (etcd, kube-apiserver, -controller-manager, -scheduler: their CPU-time clocks)", func(m *bench.MachineCPU) time.Duration { return m.ControlPlane }},
	{"nodebench (creating and watching the pods)", func(m *bench.MachineCPU) time.Duration { return m.Bench }},
	{"the rest (other processes, interrupts)", func(m *bench.MachineCPU) time.Duration { return m.Rest }},
}

// reportMachineCPU adds the rows of the machine's CPU over nodekit's (n)
// and the kubelet's (k) containerd bursts, either nil: the whole, its
// parts, and the runtime's CRI calls per pod.
func (b *benchmark) reportMachineCPU(pods int, n, k *bench.BurstResult) {
	t := &b.table
	var nm, km *bench.MachineCPU
	if n != nil {
		nm = n.Machine
	}
	if k != nil {
		km = k.Machine
	}
	if nm == nil && km == nil {
		return
	}
	prefix := fmt.Sprintf("%d pods at once, containerd: ", pods)
	cell := func(m *bench.MachineCPU, f func(*bench.MachineCPU) string) string {
		if m == nil {
			return notRun
		}
		return f(m)
	}
	t.Add(bench.Row{
		Metric:  prefix + "the machine's CPU over the burst (/proc/stat: busy of all CPUs over the agent's window)",
		Value:   cell(nm, machineTotal),
		Kubelet: cell(km, machineTotal),
	})
	for _, p := range machineParts {
		part := func(m *bench.MachineCPU) string { return machineShare(p.part(m), m.Busy, pods) }
		t.Add(bench.Row{Metric: prefix + "  of it " + p.what, Value: cell(nm, part), Kubelet: cell(km, part)})
	}
	calls := func(m *bench.MachineCPU) string {
		if m.RuntimeCalls == nil {
			return "not counted"
		}
		return fmt.Sprintf("%.0f (%.1f)", m.RuntimeCallTotal(), m.RuntimeCallTotal()/float64(pods))
	}
	t.Add(bench.Row{Metric: prefix + "the runtime's CRI calls over the burst (per pod; containerd's grpc_server_handled_total)", Value: cell(nm, calls), Kubelet: cell(km, calls)})
	for _, r := range []struct {
		who string
		m   *bench.MachineCPU
	}{{"nodekit's", nm}, {"the kubelet's", km}} {
		if r.m != nil && r.m.RuntimeCalls != nil {
			t.Note("the runtime's CRI calls over %s %d-pod burst on containerd, by method: %s", r.who, pods, r.m.FormatRuntimeCalls())
		}
		if r.m != nil {
			t.Note("the rest of the machine's CPU over %s burst holds the interrupts (irq, softirq): %.2f CPU-s, and the niced processes' (other jobs at nice -n 19): %.2f CPU-s", r.who, r.m.Interrupts.Seconds(), r.m.Niced.Seconds())
		}
	}
	for _, r := range []struct {
		who string
		n   *node
	}{{"nodekit's", b.ctrdNode}, {"the kubelet's", b.kubelet}} {
		if r.n != nil && r.n.shimCgroups != nil {
			t.Note("the runtime's shims while %s burst's pods ran, by the cgroup their CPU is charged to: %v (containerd's: /%s)", r.who, r.n.shimCgroups, b.cgroupName(runtimeCgroup))
		}
	}
	if nm != nil && km != nil && km.Busy > 0 {
		t.Note("the machine's CPU over nodekit's burst is %.2f × the kubelet's (the runtime's %.2f ×): while the runtime is CPU-bound, the last pod runs when the machine did the burst's work, so create → Running p99 falls to about that × the kubelet's at best",
			nm.Busy.Seconds()/km.Busy.Seconds(), ratio(nm.Runtime, km.Runtime))
	}
}

// machineTotal is "busy CPU-s (per pod; utilization of CPUs × window)".
func machineTotal(m *bench.MachineCPU) string {
	return fmt.Sprintf("%.2f CPU-s (%.0f %% of %d CPUs × %s)", m.Busy.Seconds(), 100*m.Utilization(), m.CPUs, bench.FormatDuration(m.Window))
}

// machineShare is "part CPU-s (its share of busy; per pod)".
func machineShare(part, busy time.Duration, pods int) string {
	share := 0.0
	if busy > 0 {
		share = 100 * part.Seconds() / busy.Seconds()
	}
	return fmt.Sprintf("%.2f CPU-s (%.0f %%; %.0f ms per pod)", part.Seconds(), share, part.Seconds()*1000/float64(pods))
}

// ratio is a / b, or NaN when b is zero.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a.Seconds() / b.Seconds()
}
