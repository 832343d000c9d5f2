package main

import (
	"fmt"
	"math"
	"time"

	"github.com/nodekit/nodekit/e2e/bench"
)

// The project brief's anchors: the upstream kubelet v1.37.2 (and, where
// given, virtual-kubelet) measured on this machine type with containerd 1.6
// and runc.
const (
	anchorBurstP50     = 4700 * time.Millisecond // 30 pods at once, create → Running
	anchorBurstCPU     = 1300 * time.Millisecond // agent CPU over that burst
	anchorStart        = 750 * time.Millisecond  // process start → Ready
	anchorStartVK      = 190 * time.Millisecond
	anchorIdleRSS      = 93 << 20
	anchorIdleRSSVK    = 65 << 20
	anchorPodsRSS      = 110 << 20
	anchorPodsRSSVK    = 72 << 20
	anchorIdleCPU      = 0.9 // % of a core
	targetBurstRatio   = 0.5 // p50
	targetBurstP99     = 0.8
	targetShareRatio   = 0.2 // the agent's own share (bound → Running less the runtime's time), mean
	targetCPURatio     = 0.25
	targetOverheadP99  = 200 * time.Millisecond // bound → Running seen by a client, 100 pods on fakecri
	targetAgentP99     = 50 * time.Millisecond  // the agent's internal latency, 100 pods on fakecri
	targetStatusWrites = 1.5                    // pod status writes per pod
	targetStart        = 50 * time.Millisecond
	targetIdleRSS      = 40 << 20
	targetPodsRSS      = 45 << 20
	targetIdleCPU      = 0.1  // % of a core, on containerd
	targetIdleCPUFake  = 0.05 // % of a core, on fakecri
	targetLeasePeriod  = 10 * time.Second
	targetStatusPeriod = 5 * time.Minute
	targetFleetNodes   = 1000
	targetFleetRSS     = 1 << 30
	targetFleetReady   = 30 * time.Second
	targetFleetHold    = 5 * time.Minute
	// kwok v0.8.0: 1,000 nodes at 13 % of a core in all; an agent may use
	// twice kwok's per node.
	anchorKwokNodeCPU = 13.0 / 1000 // % of a core per node
	targetFleetCPU    = 2 * anchorKwokNodeCPU
)

const notRun = "not run"

// report fills the table from whatever was measured; rows whose figures
// are missing say so.
func (b *benchmark) report() {
	t := &b.table
	t.Date, t.Machine = time.Now().UTC().Format(time.RFC3339), machine()
	t.Note("machine: %s; runtime %s", machine(), orNA(b.runtimeVersion, "containerd not used"))
	t.Note("source: %s; command: %s", orNA(t.Commit, "not located"), t.Command)
	t.Note("file system: %s", orNA(t.FileSystem, "not made (the run stopped before)"))
	if b.opts.fleetOnly {
		t.Note("-fleet-only: the single-node figures were not measured")
		b.reportScale()
		return
	}
	if b.containerdSkipped != "" {
		t.Note("containerd figures not measured: %s", b.containerdSkipped)
	}
	if b.kubeletSkipped != "" {
		t.Note("kubelet anchor not measured: %s; the targets use the brief's anchors", b.kubeletSkipped)
	} else if b.kubelet != nil {
		t.Note("kubelet: k8s.io/kubernetes/cmd/kubelet at the version e2e/tools pins, on the same containerd after nodekit's agent stopped, cgroupfs, its own cgroupRoot")
	}
	t.Note("pods: BestEffort, one busybox container running `sleep 3600`, no service account token, scheduled by kube-scheduler through a nodeSelector; " +
		"times are taken when a watching client receives the events")
	t.Note("runtime (CRI) time per pod: the runtime's timestamps, sandbox CreatedAt to container StartedAt; it includes the agent's own calls in between, so the overhead less CRI time is a lower bound of the agent's share")
	b.reportPods()
	b.reportCSI()
	b.reportStartup()
	b.reportResources()
	b.reportTraffic()
	b.reportScale()
}

func (b *benchmark) reportPods() {
	t := &b.table
	var k *bench.BurstResult
	if b.kubelet != nil {
		k = b.kubelet.burst
	}
	var n *bench.BurstResult
	if b.ctrdNode != nil {
		n = b.ctrdNode.burst
	}
	pods := b.opts.containerdPods
	anchorP50, anchorFrom := anchorBurstP50, "brief"
	if k != nil {
		anchorP50, anchorFrom = bench.Summarize(k.CreateToRunning).P50, "kubelet"
	}
	row := bench.Row{
		Metric: fmt.Sprintf("%d pods at once, containerd: create → Running p50", pods),
		Target: fmt.Sprintf("≤ %g × %s = %s", targetBurstRatio, anchorFrom, bench.FormatDuration(scale(anchorP50, targetBurstRatio))),
		Anchor: "kubelet " + bench.FormatDuration(anchorBurstP50) + " (30 pods)",
		Value:  notRun, Kubelet: notRun,
	}
	if n != nil {
		p50 := bench.Summarize(n.CreateToRunning).P50
		row.Value = bench.FormatDuration(p50)
		row.Result = bench.Verdict(p50 <= scale(anchorP50, targetBurstRatio))
	}
	if k != nil {
		row.Kubelet = bench.FormatDuration(anchorP50)
	}
	t.Add(row)
	if k != nil {
		t.Add(kubeletRatioRow(fmt.Sprintf("%d pods at once, containerd: create → Running p99", pods), targetBurstP99, n, k,
			func(r *bench.BurstResult) time.Duration { return bench.Summarize(r.CreateToRunning).P99 }))
	}
	t.Add(distRow(fmt.Sprintf("%d pods at once, containerd: create → Running p50/p90/p99", pods), n, k, func(r *bench.BurstResult) []time.Duration { return r.CreateToRunning }))
	for _, s := range b.podStarts {
		t.Add(distRow(fmt.Sprintf("%d pods at once, containerd, --max-parallel-pod-starts=%d: create → Running p50/p90/p99", pods, s.limit), s.burst, k,
			func(r *bench.BurstResult) []time.Duration { return r.CreateToRunning }))
	}

	anchorCPU, cpuFrom := anchorBurstCPU, "brief"
	if k != nil {
		anchorCPU, cpuFrom = k.AgentCPU, "kubelet"
	}
	row = bench.Row{
		Metric: fmt.Sprintf("%d pods at once, containerd: agent CPU over the burst", pods),
		Target: fmt.Sprintf("≤ %g × %s = %s", targetCPURatio, cpuFrom, cpuSeconds(scale(anchorCPU, targetCPURatio))),
		Anchor: "kubelet " + cpuSeconds(anchorBurstCPU) + " (30 pods)",
		Value:  notRun, Kubelet: notRun,
	}
	if n != nil {
		row.Value = cpuSeconds(n.AgentCPU)
		row.Result = bench.Verdict(n.AgentCPU <= scale(anchorCPU, targetCPURatio))
	}
	if k != nil {
		row.Kubelet = cpuSeconds(k.AgentCPU)
	}
	t.Add(row)
	b.reportMachineCPU(pods, n, k)
	t.Add(distRow(fmt.Sprintf("%d pods at once, containerd: bound → Running p50/p90/p99", pods), n, k, func(r *bench.BurstResult) []time.Duration { return r.BoundToRunning }))
	t.Add(distRow(fmt.Sprintf("%d pods at once, containerd: runtime (CRI) time p50/p90/p99", pods), n, k, func(r *bench.BurstResult) []time.Duration { return r.CRI }))
	t.Add(distRow(fmt.Sprintf("%d pods at once, containerd: bound → Running less CRI time p50/p90/p99", pods), n, k, func(r *bench.BurstResult) []time.Duration { return r.Overhead }))
	if k != nil {
		t.Add(b.ownShareRow(pods, n, k))
		t.Add(b.ownShareFromRequestRow(pods, n, k))
	}

	row = bench.Row{Metric: fmt.Sprintf("%d pods at once, containerd: agent API requests (per pod)", pods), Value: notRun}
	if n != nil {
		r := b.ctrdNode.burstRequests
		row.Value = fmt.Sprintf("%d (%.1f)", r.Total(), float64(r.Total())/float64(pods))
		t.Note("requests of nodekit's agent over the %d-pod burst on containerd: %s", pods, r)
	}
	if k != nil {
		r := b.kubelet.burstRequests
		row.Kubelet = fmt.Sprintf("%d (%.1f)", r.Total(), float64(r.Total())/float64(pods))
		t.Note("requests of the kubelet over its %d-pod burst: %s", pods, r)
	}
	t.Add(row)

	var f *bench.BurstResult
	if b.fake != nil {
		f = b.fake.burst
	}
	for _, r := range []struct {
		who string
		res *bench.BurstResult
	}{{"nodekit on fakecri", f}, {"nodekit on containerd", n}, {"the kubelet", k}} {
		if r.res != nil && r.res.WatchRestarts > 0 {
			t.Note("burst of %s: the apiserver closed the watching client's watch %d times under load; it resumed from the last event, so events in the gaps were seen late",
				r.who, r.res.WatchRestarts)
		}
	}
	fp := b.opts.fakePods
	row = bench.Row{
		Metric: fmt.Sprintf("%d pods at once, fakecri: bound → Running (agent overhead) p50/p90/p99", fp),
		Target: "p99 ≤ " + bench.FormatDuration(targetOverheadP99) + " (100 pods)",
		Value:  notRun,
	}
	if f != nil {
		d := bench.Summarize(f.BoundToRunning)
		row.Value = d.String()
		row.Result = bench.Verdict(d.P99 <= targetOverheadP99)
	}
	t.Add(row)
	t.Add(distRow(fmt.Sprintf("%d pods at once, fakecri: create → Running p50/p90/p99", fp), f, nil, func(r *bench.BurstResult) []time.Duration { return r.CreateToRunning }))
	row = bench.Row{Metric: fmt.Sprintf("%d pods at once, fakecri: agent CPU over the burst", fp), Value: notRun}
	if f != nil {
		row.Value = cpuSeconds(f.AgentCPU)
	}
	t.Add(row)
	row = bench.Row{Metric: fmt.Sprintf("%d pods at once, fakecri: agent API requests (per pod)", fp), Value: notRun}
	if f != nil {
		r := b.fake.burstRequests
		row.Value = fmt.Sprintf("%d (%.1f)", r.Total(), float64(r.Total())/float64(fp))
		t.Note("requests of nodekit's agent over the %d-pod burst on fakecri: %s", fp, r)
	}
	t.Add(row)
	b.reportBreakdown(b.fake, fmt.Sprintf("%d pods at once, fakecri", fp), true)
	b.reportBreakdown(b.ctrdNode, fmt.Sprintf("%d pods at once, containerd", pods), false)
	t.Note("a burst's requests count from its first create to %s after its last pod ran", burstTail)
}

// ownShareRow is the agent's own share of the containerd burst beside the
// kubelet's (k, required): bound → Running less the runtime's time, on
// average per pod, the runtime's time counted from each sandbox's
// CreatedAt. The runtime's time is its CRI time and, for nodekit, the wait
// for a start turn: a pod waits there while the runtime works on the pods
// bound before it (--max-parallel-pod-starts sizes the turns to the
// runtime); the kubelet sends every pod to the runtime at once, so that
// wait is inside its CRI time. Not judged: containerd sets CreatedAt after
// it made the pod's network, which this figure counts as the agent's
// (ownShareFromRequestRow is judged).
func (b *benchmark) ownShareRow(pods int, n, k *bench.BurstResult) bench.Row {
	anchor := bench.Summarize(k.Overhead).Mean
	row := bench.Row{
		Metric: fmt.Sprintf("%d pods at once, containerd: agent's own share (bound → Running less CRI time and the wait for a start turn), mean", pods),
		Value:  notRun, Kubelet: bench.FormatDuration(anchor),
	}
	if n == nil || b.ctrdNode.breakdown == nil {
		return row
	}
	wait := b.ctrdNode.breakdown.turnWaitPerPod()
	overhead := bench.Summarize(n.Overhead).Mean
	v := overhead - wait
	row.Value = fmt.Sprintf("%s (%s less CRI time, %s of it waiting for a turn)", bench.FormatDuration(v), bench.FormatDuration(overhead), bench.FormatDuration(wait))
	if anchor > 0 {
		row.Value += fmt.Sprintf("; %.2f × the kubelet's", float64(v)/float64(anchor))
	}
	return row
}

// ownShareFromRequestRow is ownShareRow's figure with each pod's runtime
// time counted from its first RunPodSandbox request (containerd's log,
// bench.SandboxRequests) instead of the sandbox's CreatedAt, for both
// agents: what containerd does in RunPodSandbox before it creates the
// pause container (the pod's network namespace, the CNI plugins) is the
// runtime's time, not the agent's. It grows with the pods in the runtime at
// once. This is the figure the issue's "agent's own share ≤ 0.2 × the
// kubelet's (bound → Running less the runtime's time)" is judged on.
func (b *benchmark) ownShareFromRequestRow(pods int, n, k *bench.BurstResult) bench.Row {
	row := bench.Row{
		Metric: fmt.Sprintf("%d pods at once, containerd: agent's own share with the runtime's time from its RunPodSandbox request (containerd's log), mean", pods),
		Value:  notRun, Kubelet: notRun,
	}
	var anchor time.Duration
	if k.OverheadFromRequest != nil {
		anchor = bench.Summarize(k.OverheadFromRequest).Mean
		row.Kubelet = bench.FormatDuration(anchor)
		row.Target = fmt.Sprintf("≤ %g × kubelet = %s", targetShareRatio, bench.FormatDuration(scale(anchor, targetShareRatio)))
	}
	if n == nil || n.OverheadFromRequest == nil || b.ctrdNode.breakdown == nil {
		return row
	}
	v := bench.Summarize(n.OverheadFromRequest).Mean - b.ctrdNode.breakdown.turnWaitPerPod()
	row.Value = fmt.Sprintf("%s (before the sandbox's CreatedAt, the runtime took %s of the %s per pod)", bench.FormatDuration(v),
		bench.FormatDuration(bench.Summarize(n.CRIFromRequest).Mean-bench.Summarize(n.CRI).Mean), bench.FormatDuration(bench.Summarize(n.CRIFromRequest).Mean))
	if anchor > 0 {
		row.Value += fmt.Sprintf("; %.2f × the kubelet's", float64(v)/float64(anchor))
		row.Result = bench.Verdict(v <= scale(anchor, targetShareRatio))
	}
	return row
}

// kubeletRatioRow is the row of a figure judged against the kubelet's in
// the same run: nodekit's (n; not run when nil) at most ratio × the
// kubelet's (k, required).
func kubeletRatioRow(metric string, ratio float64, n, k *bench.BurstResult, figure func(*bench.BurstResult) time.Duration) bench.Row {
	anchor := figure(k)
	row := bench.Row{
		Metric: metric,
		Target: fmt.Sprintf("≤ %g × kubelet = %s", ratio, bench.FormatDuration(scale(anchor, ratio))),
		Value:  notRun, Kubelet: bench.FormatDuration(anchor),
	}
	if n != nil {
		v := figure(n)
		row.Value = bench.FormatDuration(v)
		row.Result = bench.Verdict(v <= scale(anchor, ratio))
	}
	return row
}

// reportCSI adds the rows of the CSI burst: each segment's p50/p99.
func (b *benchmark) reportCSI() {
	t := &b.table
	what := fmt.Sprintf("%d pods with a CSI volume each, containerd", b.opts.csiPods)
	for _, seg := range []struct {
		name    string
		samples func(*csiFigures) []time.Duration
	}{
		{"pod bound → volume published", func(f *csiFigures) []time.Duration { return f.boundToPublished }},
		{"volume published → Running", func(f *csiFigures) []time.Duration { return f.publishedToRunning }},
		{"pod bound → Running", func(f *csiFigures) []time.Duration { return f.boundToRunning }},
	} {
		row := bench.Row{Metric: what + ": " + seg.name + " p50/p99", Value: notRun, Kubelet: "nodekit only"}
		if b.csi != nil {
			d := bench.Summarize(seg.samples(b.csi))
			row.Value = fmt.Sprintf("%s / %s", bench.FormatDuration(d.P50), bench.FormatDuration(d.P99))
		}
		t.Add(row)
	}
	if b.csiSkipped != "" {
		t.Note("CSI figures not measured: %s", b.csiSkipped)
	}
	if b.csi != nil {
		t.Note("CSI pods: the e2e module's CSI driver (e2e/csidriver, stage + publish as bind mounts) runs in nodebench's process, registered through the agent's plugins_registry; " +
			"each pod mounts its own static PV through a pre-bound claim; volume published is when the driver's NodePublishVolume returned, on the watching client's clock; the kubelet anchor does not run it")
	}
}

// reportBreakdown adds the rows and the note of a nodekit node's burst
// breakdown; judged applies the fakecri targets.
func (b *benchmark) reportBreakdown(n *node, what string, judged bool) {
	t := &b.table
	internal := bench.Row{Metric: what + ": agent's internal latency (seen → Running status PATCH sent) p50/p99", Value: notRun}
	share := bench.Row{Metric: what + ": agent's share (seen → its watch shows started, less pulls) p50/p99", Value: notRun}
	writes := bench.Row{Metric: what + ": pod status writes per pod", Value: notRun, Anchor: "kubelet: 2 (ContainerCreating, Running)"}
	if judged {
		internal.Target = "p99 ≤ " + bench.FormatDuration(targetAgentP99) + " (100 pods)"
		writes.Target = fmt.Sprintf("≤ %.1f", targetStatusWrites)
	}
	if n != nil && n.breakdown != nil {
		bd := n.breakdown
		p99 := bd.internal.Quantile(0.99)
		internal.Value = fmt.Sprintf("%s / %s", bench.FormatDuration(bd.internal.Quantile(0.5)), bench.FormatDuration(p99))
		share.Value = fmt.Sprintf("%s / %s", bench.FormatDuration(bd.agent.Quantile(0.5)), bench.FormatDuration(bd.agent.Quantile(0.99)))
		writes.Value = fmt.Sprintf("%.2f", bd.statusWritesPerPod())
		if judged {
			internal.Result = bench.Verdict(bd.internal.Count > 0 && p99 <= targetAgentP99)
			writes.Result = bench.Verdict(bd.statusWritesPerPod() <= targetStatusWrites)
		}
		t.Note("where nodekit's agent spent the burst (%s; from its metrics): %s", what, bd)
	}
	if n != nil && len(n.statusPatches) > 0 {
		t.Note("the API server's own time for the agent's %d pod status PATCHes over the burst (%s; its audit log, received → answered: the agent's figure above adds the client's side) p50/p90/p99 %s; the agent's other requests it received while one was under way: %s",
			len(n.statusPatches), what, bench.Summarize(n.statusPatches), n.besidePatches)
	}
	if n != nil && n.burst != nil && len(n.burst.CreateToBound) > 0 {
		t.Note("the scheduler bound the pods (%s) create → bound p50/p90/p99 %s: the closer together the bindings, the more of the pods wait for the agent's start turns (--max-parallel-pod-starts)",
			what, bench.Summarize(n.burst.CreateToBound))
	}
	if n != nil && n.runDelays != "" {
		t.Note("CPU time and waits for a CPU in the kernel's run queues from the burst's start until all its pods ran (%s; /proc/<pid>/task/*/schedstat, every thread summed): %s", what, n.runDelays)
	}
	if n != nil && n.runtimeSched != "" {
		t.Note("nodebench's own goroutines (its fake runtime answering the agent's CRI calls, its watches) over the burst (%s; runtime/metrics /sched/latencies:seconds): %s", what, n.runtimeSched)
	}
	t.Add(internal)
	t.Add(share)
	t.Add(writes)
}

// distRow is a row of p50/p90/p99 of one figure of nodekit's and the
// kubelet's bursts (either may be nil).
func distRow(metric string, n, k *bench.BurstResult, samples func(*bench.BurstResult) []time.Duration) bench.Row {
	row := bench.Row{Metric: metric, Value: notRun}
	if n != nil {
		row.Value = bench.Summarize(samples(n)).String()
	}
	if k != nil {
		row.Kubelet = bench.Summarize(samples(k)).String()
	}
	return row
}

func (b *benchmark) reportStartup() {
	t := &b.table
	anchor := fmt.Sprintf("kubelet %s, virtual-kubelet %s", bench.FormatDuration(anchorStart), bench.FormatDuration(anchorStartVK))
	target := "≤ " + bench.FormatDuration(targetStart)
	for _, c := range []struct {
		what    string
		samples []time.Duration
	}{
		{"agent registers the Node", b.startFake},
		{"Node pre-registered by an admin", b.startFakePre},
	} {
		row := bench.Row{
			Metric: fmt.Sprintf("start → Ready, fakecri, %s (median of %d)", c.what, len(c.samples)),
			Target: target, Anchor: anchor, Value: notRun,
		}
		if len(c.samples) > 0 {
			m := bench.Median(c.samples)
			row.Value = fmt.Sprintf("%s (runs: %s)", bench.FormatDuration(m), durations(c.samples))
			row.Result = bench.Verdict(m <= targetStart)
		}
		t.Add(row)
	}
	row := bench.Row{Metric: "start → Ready, containerd, agent registers the Node (1 run)", Target: target, Anchor: anchor, Value: notRun, Kubelet: notRun}
	if b.ctrdNode != nil && b.ctrdNode.startToReady > 0 {
		row.Value = bench.FormatDuration(b.ctrdNode.startToReady)
		row.Result = bench.Verdict(b.ctrdNode.startToReady <= targetStart)
	}
	if b.kubelet != nil && b.kubelet.startToReady > 0 {
		row.Kubelet = bench.FormatDuration(b.kubelet.startToReady)
	}
	t.Add(row)
}

func (b *benchmark) reportResources() {
	t := &b.table
	// The containerd node is the one comparable with the kubelet; the fake
	// runtime's node stands in when containerd was not used.
	primary, where := b.ctrdNode, "containerd"
	if primary == nil {
		primary, where = b.fake, "fakecri"
	}
	kubelet := b.kubelet
	idleRSS := bench.Row{
		Metric: "RSS idle, " + where, Target: "≤ " + bench.FormatMiB(targetIdleRSS), Value: notRun, Kubelet: notRun,
		Anchor: "kubelet " + bench.FormatMiB(anchorIdleRSS) + ", virtual-kubelet " + bench.FormatMiB(anchorIdleRSSVK),
	}
	if primary != nil && primary.idle != nil {
		idleRSS.Value = bench.FormatMiB(primary.idle.rss)
		idleRSS.Result = bench.Verdict(primary.idle.rss <= targetIdleRSS)
	}
	if kubelet != nil && kubelet.idle != nil {
		idleRSS.Kubelet = bench.FormatMiB(kubelet.idle.rss)
	}
	t.Add(idleRSS)
	// Where the idle RSS is: the heap and the runtime, or the pages of
	// the executable the kernel keeps mapped (docs/performance.md).
	split := func(f *idleFigures) string {
		return bench.FormatMiB(f.rssAnon) + " / " + bench.FormatMiB(f.rssFile)
	}
	idleSplit := bench.Row{Metric: "RSS idle, " + where + ": anonymous / file-backed", Value: notRun, Kubelet: notRun}
	if primary != nil && primary.idle != nil {
		idleSplit.Value = split(primary.idle)
	}
	if kubelet != nil && kubelet.idle != nil {
		idleSplit.Kubelet = split(kubelet.idle)
	}
	t.Add(idleSplit)
	podsRSS := bench.Row{
		Metric: fmt.Sprintf("RSS with %d pods running, containerd", b.opts.containerdPods), Target: "≤ " + bench.FormatMiB(targetPodsRSS) + " (30 pods)",
		Value: notRun, Kubelet: notRun,
		Anchor: "kubelet " + bench.FormatMiB(anchorPodsRSS) + ", virtual-kubelet " + bench.FormatMiB(anchorPodsRSSVK),
	}
	if b.ctrdNode != nil && b.ctrdNode.burst != nil {
		podsRSS.Value = bench.FormatMiB(b.ctrdNode.burstRSS)
		podsRSS.Result = bench.Verdict(b.ctrdNode.burstRSS <= targetPodsRSS)
	}
	if kubelet != nil && kubelet.burst != nil {
		podsRSS.Kubelet = bench.FormatMiB(kubelet.burstRSS)
	}
	t.Add(podsRSS)
	podsSplit := bench.Row{Metric: fmt.Sprintf("RSS with %d pods running, containerd: anonymous / file-backed", b.opts.containerdPods), Value: notRun, Kubelet: notRun}
	if b.ctrdNode != nil && b.ctrdNode.burst != nil {
		podsSplit.Value = bench.FormatMiB(b.ctrdNode.burstRSSAnon) + " / " + bench.FormatMiB(b.ctrdNode.burstRSSFile)
	}
	if kubelet != nil && kubelet.burst != nil {
		podsSplit.Kubelet = bench.FormatMiB(kubelet.burstRSSAnon) + " / " + bench.FormatMiB(kubelet.burstRSSFile)
	}
	t.Add(podsSplit)
	podsSettled := bench.Row{Metric: fmt.Sprintf("RSS with %d pods running, containerd, %s later", b.opts.containerdPods, rssSettle), Value: notRun, Kubelet: notRun}
	if b.ctrdNode != nil && b.ctrdNode.burst != nil {
		podsSettled.Value = bench.FormatMiB(b.ctrdNode.settledRSS)
	}
	if kubelet != nil && kubelet.burst != nil {
		podsSettled.Kubelet = bench.FormatMiB(kubelet.settledRSS)
	}
	t.Add(podsSettled)
	if where == "containerd" && b.fake != nil && b.fake.idle != nil {
		t.Add(bench.Row{Metric: "RSS idle, fakecri", Value: bench.FormatMiB(b.fake.idle.rss), Target: "≤ " + bench.FormatMiB(targetIdleRSS),
			Result: bench.Verdict(b.fake.idle.rss <= targetIdleRSS)})
	}
	fakeRSS := bench.Row{Metric: fmt.Sprintf("RSS with %d pods running, fakecri", b.opts.fakePods), Value: notRun}
	if b.fake != nil && b.fake.burst != nil {
		fakeRSS.Value = bench.FormatMiB(b.fake.burstRSS)
	}
	t.Add(fakeRSS)

	idleTarget := idleCPUTarget(where)
	idleCPU := bench.Row{
		Metric: "idle CPU, " + where, Target: fmt.Sprintf("≤ %g %% of a core", idleTarget),
		Anchor: fmt.Sprintf("kubelet %.1f %%", anchorIdleCPU), Value: notRun, Kubelet: notRun,
	}
	if primary != nil && primary.idle != nil {
		p := cpuPercent(primary.idle.cpu, primary.idle.window)
		idleCPU.Metric += fmt.Sprintf(" (%s window)", primary.idle.window.Round(time.Second))
		idleCPU.Value = fmt.Sprintf("%.3f %%", p)
		idleCPU.Result = bench.Verdict(p <= idleTarget)
	}
	if kubelet != nil && kubelet.idle != nil {
		idleCPU.Kubelet = fmt.Sprintf("%.3f %%", cpuPercent(kubelet.idle.cpu, kubelet.idle.window))
	}
	t.Add(idleCPU)
	if where == "containerd" && primary.idle != nil {
		all := cpuPercent(primary.idle.cpu, primary.idle.window)
		for i, n := range b.ctrdVariants {
			if n.idle == nil {
				continue
			}
			p := cpuPercent(n.idle.cpu, n.idle.window)
			t.Add(bench.Row{Metric: "idle CPU, containerd, " + variantArgs[i].what,
				Value: fmt.Sprintf("%.3f %% (the component's share: %.3f %%; RSS %s)", p, all-p, bench.FormatMiB(n.idle.rss))})
		}
	}
	if where == "containerd" && b.fake != nil && b.fake.idle != nil {
		p := cpuPercent(b.fake.idle.cpu, b.fake.idle.window)
		t.Add(bench.Row{Metric: "idle CPU, fakecri", Value: fmt.Sprintf("%.3f %%", p), Target: fmt.Sprintf("≤ %g %% of a core", targetIdleCPUFake),
			Result: bench.Verdict(p <= targetIdleCPUFake)})
	}
	t.Note("CPU is the agent process's CPU-time clock (clock_gettime of clock_getcpuclockid(pid): all its threads, exited ones included, in ns; utime+stime of /proc/<pid>/stat is the same figure cut to 10 ms steps); RSS is VmRSS of /proc/<pid>/status")
}

// idleCPUTarget is the idle CPU target (% of a core) of an agent on where,
// "containerd" or "fakecri" (the project's targets: on the fake runtime,
// which streams events and answers at once, half of containerd's).
func idleCPUTarget(where string) float64 {
	if where == "fakecri" {
		return targetIdleCPUFake
	}
	return targetIdleCPU
}

func (b *benchmark) reportTraffic() {
	t := &b.table
	primary := b.ctrdNode
	if primary == nil {
		primary = b.fake
	}
	var k *idleFigures
	if b.kubelet != nil {
		k = b.kubelet.idle
	}
	if primary == nil || primary.idle == nil {
		t.Add(bench.Row{Metric: "idle API requests per node", Value: notRun})
		return
	}
	f := primary.idle
	window := f.window
	perWindow := func(r bench.Requests, keys ...string) int {
		n := 0
		for _, key := range keys {
			n += r[key]
		}
		return n
	}
	// A renewal every period, each a request's time after the last: a
	// window holds one fewer than it fits when the renewals drift across
	// its ends (60 s held 5 for the kubelet and nodekit alike).
	fits := window.Seconds() / targetLeasePeriod.Seconds()
	minLeases, maxLeases := int(math.Floor(fits))-1, int(math.Ceil(fits))
	leases := perWindow(f.requests, "update leases")
	row := bench.Row{
		Metric: fmt.Sprintf("idle %s, %s: Lease updates (audit log; agent metric %.0f)", window.Round(time.Second), primary.agent.Name, f.leaseRenewals),
		Value:  fmt.Sprintf("%d", leases), Target: fmt.Sprintf("1 per %s: %d–%d", targetLeasePeriod, minLeases, maxLeases),
		Anchor: "1 per 10 s", Result: bench.Verdict(leases >= minLeases && leases <= maxLeases),
	}
	if k != nil {
		row.Kubelet = fmt.Sprintf("%d", perWindow(k.requests, "update leases"))
	}
	t.Add(row)
	statusKeys := []string{"patch nodes/status", "update nodes/status", "patch nodes", "update nodes"}
	status := perWindow(f.requests, statusKeys...)
	maxStatus := int(math.Ceil(window.Seconds() / targetStatusPeriod.Seconds()))
	row = bench.Row{
		Metric: fmt.Sprintf("idle %s, %s: node status writes (agent metric %.0f)", window.Round(time.Second), primary.agent.Name, f.nodeStatusPatches),
		Value:  fmt.Sprintf("%d", status), Target: fmt.Sprintf("on change or every %s: ≤ %d", targetStatusPeriod, maxStatus),
		Anchor: "on change or every 5 min", Result: bench.Verdict(status <= maxStatus),
	}
	if k != nil {
		row.Kubelet = fmt.Sprintf("%d", perWindow(k.requests, statusKeys...))
	}
	t.Add(row)
	podKeys := []string{"patch pods/status", "update pods/status", "patch pods", "update pods"}
	pods := perWindow(f.requests, podKeys...)
	row = bench.Row{
		Metric: fmt.Sprintf("idle %s, %s: pod writes (agent metric %.0f patched)", window.Round(time.Second), primary.agent.Name, f.podStatusPatches),
		Value:  fmt.Sprintf("%d", pods), Target: "0", Anchor: "no periodic pod patches", Result: bench.Verdict(pods == 0),
	}
	if k != nil {
		row.Kubelet = fmt.Sprintf("%d", perWindow(k.requests, podKeys...))
	}
	t.Add(row)
	row = bench.Row{
		Metric: fmt.Sprintf("idle %s, %s: all API requests (per minute)", window.Round(time.Second), primary.agent.Name),
		Value:  fmt.Sprintf("%d (%.1f)", f.requests.Total(), perMinute(f.requests.Total(), window)),
	}
	if k != nil {
		row.Kubelet = fmt.Sprintf("%d (%.1f)", k.requests.Total(), perMinute(k.requests.Total(), k.window))
	}
	t.Add(row)
	t.Note("idle requests of %s: %s", primary.agent.Name, f.requests)
	if primary != b.fake && b.fake != nil && b.fake.idle != nil {
		t.Note("idle requests of %s: %s", b.fake.agent.Name, b.fake.idle.requests)
	}
	if k != nil {
		t.Note("idle requests of the kubelet: %s", k.requests)
	}
}

func (b *benchmark) reportScale() {
	t := &b.table
	if b.opts.nodes == 0 {
		return
	}
	f := b.fleet
	what := fmt.Sprintf("%d agents in one process, fakecri: ", b.opts.nodes)
	row := bench.Row{Metric: what + "first start → all Ready", Value: notRun,
		Target: fmt.Sprintf("≤ %s at %d nodes", bench.FormatDuration(targetFleetReady), targetFleetNodes)}
	rss := bench.Row{
		Metric: what + "process RSS, peak over the run (all Ready; end of the hold)",
		Target: fmt.Sprintf("≤ %s at %d nodes", bench.FormatMiB(targetFleetRSS), targetFleetNodes), Value: notRun,
	}
	perNodeTarget := fmt.Sprintf("≤ %.2f MiB (%s at %d nodes, less the baseline)", float64(targetFleetRSS)/(1<<20)/targetFleetNodes, bench.FormatMiB(targetFleetRSS), targetFleetNodes)
	perNodeRSS := bench.Row{Metric: what + "RSS per node (above the process before the fleet)", Value: notRun, Target: perNodeTarget}
	perNodeHeap := bench.Row{Metric: what + "live heap per node (after a forced GC)", Value: notRun}
	perNodeGo := bench.Row{Metric: what + "goroutines / goroutine stacks per node", Value: notRun}
	idleCPU := bench.Row{Metric: what + "idle CPU per node (over -hold)", Value: notRun,
		Target: fmt.Sprintf("≤ %.3f %% of a core (2 × kwok)", targetFleetCPU), Anchor: fmt.Sprintf("kwok %.3f %% per node (1,000 at 13 %%)", anchorKwokNodeCPU)}
	hold := bench.Row{Metric: what + "every node stays Ready", Value: notRun, Target: "all Ready for " + targetFleetHold.String()}
	pods := bench.Row{Metric: fmt.Sprintf("%d agents in one process, fakecri: %d pods per node bound at once, first create → all Running (RSS)", b.opts.nodes, b.opts.fleetPods), Value: notRun}
	defer func() {
		for _, r := range []bench.Row{row, rss, perNodeRSS, perNodeHeap, perNodeGo, idleCPU, hold, pods} {
			t.Add(r)
		}
	}()
	if f != nil {
		row.Value = bench.FormatDuration(f.allReady)
		perNode := float64(f.rssAfter-min(f.rssBefore, f.rssAfter)) / float64(f.nodes)
		rss.Value = fmt.Sprintf("%s (%s, %.2f MiB per node above %s before; %s)", bench.FormatMiB(f.peakRSS),
			bench.FormatMiB(f.rssAfter), perNode/(1<<20), bench.FormatMiB(f.rssBefore), holdRSS(f))
		perNodeRSS.Value = fmt.Sprintf("%.2f MiB (%.2f MiB after a forced GC)", perNode/(1<<20),
			float64(f.rssAfterGC-min(f.rssBefore, f.rssAfterGC))/float64(f.nodes)/(1<<20))
		perNodeRSS.Result = bench.Verdict(perNode <= float64(targetFleetRSS)/targetFleetNodes)
		perNodeHeap.Value = fmt.Sprintf("%.0f KiB", float64(f.memAfter.heapObjects-min(f.memBefore.heapObjects, f.memAfter.heapObjects))/float64(f.nodes)/1024)
		perNodeGo.Value = fmt.Sprintf("%.1f / %.0f KiB", float64(f.memAfter.goroutines-min(f.memBefore.goroutines, f.memAfter.goroutines))/float64(f.nodes),
			float64(f.memAfter.stacks-min(f.memBefore.stacks, f.memAfter.stacks))/float64(f.nodes)/1024)
		if f.nodes >= targetFleetNodes {
			rss.Result = bench.Verdict(f.peakRSS <= targetFleetRSS)
			row.Result = bench.Verdict(f.allReady <= targetFleetReady)
		}
		if b.opts.heapComponents {
			t.Note("scale: heap per node by component (in-use heap profile, sampled every %d KiB, after less before the fleet): %s",
				memProfileRate>>10, formatComponents(f.heapAfter.perAgent(f.heapBefore, f.nodes)))
		}
		if b.opts.shareServices {
			t.Note("scale: the agents share one informer on the Services (agent.ServiceLister, -share-services); each has its own client certificate, connection, clientsets, Node/pod watches and fake runtime")
		}
		if b.opts.fleetSocketCRI {
			t.Note("scale: each agent dials its fake runtime over a unix socket (cri-client over gRPC, -fleet-socket-cri)")
		} else {
			t.Note("scale: each agent calls its fake runtime in process (fakecri's Server.InProcess: no socket, gRPC or serialization; -fleet-socket-cri for the wire)")
		}
		switch {
		case f.fromBudget:
			t.Note("scale: a memory budget of %s, as a fleet shard's container memory limit (-fleet-memory-max, agent/fleet's Options.MemoryMax): a Go memory limit of %s (the budget less the executable's read-only mappings), set before the first agent started",
				bench.FormatMiB(uint64(b.opts.fleetMemMax*(1<<20))), bench.FormatMiB(uint64(f.memLimit)))
		case f.memLimit != math.MaxInt64 && b.opts.fleetMemMax > 0:
			t.Note("scale: this process ran with a Go memory limit of %s (GOMEMLIMIT, kept: lower than what -fleet-memory-max=%g gives)", bench.FormatMiB(uint64(f.memLimit)), b.opts.fleetMemMax)
		case f.memLimit != math.MaxInt64:
			t.Note("scale: this process ran with a Go memory limit of %s (GOMEMLIMIT)", bench.FormatMiB(uint64(f.memLimit)))
		default:
			t.Note("scale: this process ran without a Go memory limit (-fleet-memory-max=0)")
		}
		t.Note("scale: the process's peak RSS until all were Ready (+%s) %s", b.opts.settle, bench.FormatMiB(f.startPeakRSS))
		if b.opts.fleetStartMem > 0 {
			t.Note("scale: the garbage collector ran during the agents' start only at a memory limit of %g MiB per node above what this process held before (-fleet-start-memory)", b.opts.fleetStartMem)
		}
		if h := f.hold; h != nil {
			held := h.Held.Round(time.Second)
			if len(h.Lost) == 0 {
				hold.Value = fmt.Sprintf("all %d Ready throughout %s", f.nodes, held)
			} else {
				hold.Value = fmt.Sprintf("%d lost Ready in %s (fewest at once %d), e.g. %s", len(h.Lost), held, h.MinReady, h.Lost[0])
			}
			if h.Held >= targetFleetHold || len(h.Lost) > 0 {
				hold.Result = bench.Verdict(len(h.Lost) == 0 && h.Held >= targetFleetHold)
			}
			pct := cpuPercent(f.holdCPU, h.Held)
			perNode := pct / float64(f.nodes)
			idleCPU.Value = fmt.Sprintf("%.4f %% (%.1f %% of a core in all, %s)", perNode, pct, held)
			idleCPU.Result = bench.Verdict(perNode <= targetFleetCPU)
			t.Note("scale: RSS at the end of the %s hold %s; the garbage collector's CPU (the Go runtime's estimate) %s of it, and %s from the first start to all Ready",
				held, bench.FormatMiB(f.holdRSS), cpuSeconds(f.holdGCCPU), cpuSeconds(f.startGCCPU))
		}
		switch {
		case f.pods != nil:
			pods.Value = fmt.Sprintf("%s (%d pods, created in %s; RSS %s)", bench.FormatDuration(f.pods.AllRunning), f.pods.Pods,
				bench.FormatDuration(f.pods.Created), bench.FormatMiB(f.podsRSS))
		case f.podsErr != "":
			pods.Value = "failed: " + f.podsErr
		}
		m := f.memBefore
		t.Note("scale: the process before the fleet (after a forced GC and the freed memory returned to the system): RSS %s, of which file-backed %s (the executable's pages read so far) and anonymous %s; the Go runtime held %s then: heap objects %s, stacks %s, the rest %s (free heap not yet returned, its own metadata and buffers)",
			bench.FormatMiB(f.rssBefore), bench.FormatMiB(f.rssBeforeFile), bench.FormatMiB(f.rssBefore-min(f.rssBeforeFile, f.rssBefore)),
			bench.FormatMiB(m.total-m.heapReleased), bench.FormatMiB(m.heapObjects), bench.FormatMiB(m.stacks),
			bench.FormatMiB(m.total-m.heapReleased-min(m.heapObjects+m.stacks, m.total-m.heapReleased)))
		t.Note("scale: once all were Ready (the process RSS above), file-backed %s and anonymous %s",
			bench.FormatMiB(f.rssAfterFile), bench.FormatMiB(f.rssAfter-min(f.rssAfterFile, f.rssAfter)))
		t.Note("scale: after a forced GC the live Go heap is %s and RSS %s (%.2f MiB per node above the baseline)",
			bench.FormatMiB(f.heapLive), bench.FormatMiB(f.rssAfterGC), float64(f.rssAfterGC-min(f.rssBefore, f.rssAfterGC))/float64(f.nodes)/(1<<20))
		t.Note("scale: %d node certificates and kubeconfigs issued in %s (%s each), %d agents' fx applications started in %s (%d at a time)",
			f.nodes, bench.FormatDuration(f.credentials), bench.FormatDuration(f.credentials/time.Duration(f.nodes)),
			f.nodes, bench.FormatDuration(f.started), b.opts.parallel)
	}
}

// holdRSS is the process RSS at the end of the hold, once measured.
func holdRSS(f *fleetFigures) string {
	if f.hold == nil {
		return "the hold not reached"
	}
	return bench.FormatMiB(f.holdRSS)
}

func scale(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

func cpuSeconds(d time.Duration) string { return fmt.Sprintf("%.3f CPU-s", d.Seconds()) }

func perMinute(n int, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(n) / window.Minutes()
}

func durations(ds []time.Duration) string {
	s := ""
	for i, d := range ds {
		if i > 0 {
			s += ", "
		}
		s += bench.FormatDuration(d)
	}
	return s
}

func orNA(s, na string) string {
	if s == "" {
		return na
	}
	return s
}
