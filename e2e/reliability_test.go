package e2e

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// TestAgentCrashRestart runs 30 pods on containerd, SIGKILLs the agent and
// changes the node's pods while it is down: two are deleted gracefully,
// two force-deleted (their objects are gone before the agent can see
// them), three new ones bound to the node, and the container of a pod that
// must not restart is stopped behind the agent's back. The restarted agent
// must restart none of the running containers (same IDs, same restart
// counts), rewrite none of their statuses, correct the stopped pod's,
// clean up every deleted pod (containers, sandbox, cgroup, pod and log
// directories) and start the new ones. The node must report Ready again
// within 2 s of the restart (README's promise; the kubelet on this machine:
// 0.6–0.7 s). It prints how long that took and what the restart cost.
func TestAgentCrashRestart(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	const running = 30
	n := newRelNode(t, "crash", relOptions{})
	client := env.cp.Client().CoreV1().Pods(n.ns)

	names := createPods(t, running, "crash", func(name string) *v1.Pod { return withGrace(n.pod(name, sleeper...), 2) })
	exits := neverRestart(withGrace(n.pod("crash-exits", sleeper...), 2))
	n.createPod(t, exits)
	all := append(slices.Clone(names), exits.Name)
	start := time.Now()
	before := waitPods(t, n.ns, all, "Running and Ready", podTimeout, isPodReady)
	t.Logf("%d pods Running and Ready in %s", len(all), time.Since(start).Round(100*time.Millisecond))
	snap := snapshotContainers(before)
	nodeEvents := watchNode(t, n.name)
	var lastHeartbeat time.Time
	if node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err == nil {
		lastHeartbeat = readyCondition(node).LastHeartbeatTime.Time
	}

	n.agent.Kill()
	killed := time.Now()

	// While the agent is down.
	graceful, forced := names[:2], names[2:4]
	var deleted []types.UID
	for _, name := range append(slices.Clone(graceful), forced...) {
		deleted = append(deleted, before[name].UID)
		opts := metav1.DeleteOptions{}
		if slices.Contains(forced, name) {
			opts.GracePeriodSeconds = ptr.To[int64](0)
		}
		if err := client.Delete(ctx, name, opts); err != nil {
			t.Fatal(err)
		}
	}
	cs, _ := mainStatus(before[exits.Name])
	exitedID := strings.TrimPrefix(cs.ContainerID, n.runtimeName+"://")
	if _, err := n.cri.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: exitedID, Timeout: 0}); err != nil {
		t.Fatalf("stop container %s behind the agent's back: %v", exitedID, err)
	}
	created := createPods(t, 3, "crash-new", func(name string) *v1.Pod { return withGrace(n.boundPod(name, sleeper...), 2) })

	downFor := time.Since(killed)
	restart := time.Now()
	if err := n.agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	healthy := time.Since(restart)

	// Ready: the first change of the Node after the restart, a status
	// patch with Ready=True and a new heartbeat.
	var ready time.Duration
	seen := 0
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, readyTimeout, true, func(context.Context) (bool, error) {
		events := nodeEvents()
		defer func() { seen = len(events) }()
		for _, ev := range events[seen:] {
			if ev.at.Before(restart) {
				continue
			}
			c := readyCondition(ev.node)
			if c.Status != v1.ConditionTrue {
				t.Errorf("after the restart the agent reported Ready=%s (%s: %s) before Ready=True", c.Status, c.Reason, c.Message)
				continue
			}
			if c.LastHeartbeatTime.After(lastHeartbeat) {
				ready = ev.at.Sub(restart)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no Ready status from the restarted agent: %v", err)
	}
	if limit := 2 * time.Second; ready > limit {
		t.Errorf("the restarted agent reported the node Ready %s after its restart, want within %s", ready.Round(time.Millisecond), limit)
	}

	// The new pods start, the deleted ones go, the stopped one fails.
	start = time.Now()
	waitPods(t, n.ns, created, "Running and Ready", podTimeout, isPodReady)
	newReady := time.Since(start)
	waitPodsGone(t, n.ns, graceful, podTimeout)
	n.waitNoLeftovers(t, deleted, 2*time.Minute)
	failed := waitPods(t, n.ns, []string{exits.Name}, "Failed", podTimeout, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if cs, _ := mainStatus(failed[exits.Name]); cs.State.Terminated == nil || cs.ContainerID != "" && strings.TrimPrefix(cs.ContainerID, n.runtimeName+"://") != exitedID {
		t.Errorf("the container stopped while the agent was down: state %s id %s, want terminated %s", stateString(cs.State), cs.ContainerID, exitedID)
	}

	// The untouched pods: same containers, one sandbox each, statuses not
	// rewritten.
	untouched := names[4:]
	after := waitPods(t, n.ns, untouched, "Running and Ready", podTimeout, isPodReady)
	for name := range snap {
		if !slices.Contains(untouched, strings.Split(name, "/")[0]) {
			delete(snap, name)
		}
	}
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("%d containers restarted or replaced by the agent's restart:\n  %s", len(changed), strings.Join(changed, "\n  "))
	}
	for _, name := range untouched {
		uid := after[name].UID
		if sbs := n.criSandboxes(t, uid); len(sbs) != 1 {
			t.Errorf("pod %s has %d sandboxes after the restart, want 1", name, len(sbs))
		}
		if cs := n.criContainers(t, uid, false); len(cs) != 1 || cs[0].Metadata.GetAttempt() != 0 {
			t.Errorf("pod %s has containers %v after the restart, want its first one only", name, cs)
		}
	}
	// Give the agent one resync period's worth of time to rewrite what it
	// would, then count the status writes it made of untouched pods.
	time.Sleep(5 * time.Second)
	rewritten := map[string]int{}
	user := "system:node:" + n.name
	for _, ev := range readAuditRecords(t) {
		if ev.User.Username != user || ev.ObjectRef == nil || ev.ObjectRef.Resource != "pods" || ev.ObjectRef.Subresource != "status" ||
			ev.ObjectRef.Namespace != n.ns || ev.RequestReceived.Before(restart) || !slices.Contains(untouched, ev.ObjectRef.Name) {
			continue
		}
		rewritten[ev.ObjectRef.Name]++
	}
	if len(rewritten) > 0 {
		t.Errorf("the restarted agent rewrote the status of %d untouched pods: %v", len(rewritten), rewritten)
	}
	t.Logf("agent down %s; after the restart: healthz in %s, node Ready in %s (kubelet here: 0.6–0.7 s); %d containers kept, 0 restarted; %d untouched pod statuses rewritten; 3 new pods Running in %s; %d deleted pods cleaned up",
		downFor.Round(10*time.Millisecond), healthy.Round(time.Millisecond), ready.Round(time.Millisecond), len(snap), len(rewritten), newReady.Round(100*time.Millisecond), len(deleted))
}

// TestRuntimeOutageAndHang runs pods on a containerd of their own, then
// takes the runtime away twice. Stopped (as `systemctl stop containerd`,
// the containers keep running) for at least 30 s: the node turns
// Ready=False with the kubelet's reason and message ("container runtime is
// down"), and Ready again once containerd is back, without a second
// sandbox or a restarted container for any pod whose shim survived intact
// (NotReady within the 30 s threshold plus 10 s, Ready within
// runtimeBackLimit of containerd's return, as when frozen);
// every shim must survive the stop. (containerd 1.6 itself loses the
// sandbox of a pod whose container it started in a second shim, on a
// starved machine: it reports that sandbox NOTREADY after the restart, and
// such a pod must have been replaced as the kubelet replaces it, into one
// ready sandbox.) Frozen (SIGSTOP: the
// socket accepts and nothing answers, as a hung runtime): the node turns
// NotReady within the kubelet's 30 s threshold (plus one status poll and
// one status update) while the Lease and the status cycles keep flowing,
// and Ready again after SIGCONT. It prints each transition's delay.
// The runtime outage bounds: the kubelet's maxWaitForContainerRuntime
// (runtime.DefaultDownThreshold), and how soon the node is Ready once the
// runtime answers again: the agent's runtime status period (5 s), the CRI
// client's reconnect back-off (at most 3 s) and 10 s for the PATCH and the
// watch under CI load.
const (
	runtimeDownThreshold = 30 * time.Second
	runtimeBackLimit     = 5*time.Second + 3*time.Second + 10*time.Second
)

func TestRuntimeOutageAndHang(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	n := newRelNode(t, "runtime-outage", relOptions{})
	names := createPods(t, 3, "outage", func(name string) *v1.Pod { return withGrace(n.pod(name, sleeper...), 2) })
	before := waitPods(t, n.ns, names, "Running and Ready", podTimeout, isPodReady)
	snap := snapshotContainers(before)
	runtimeDown := func(node *v1.Node) bool {
		c := readyCondition(node)
		return c.Status == v1.ConditionFalse && c.Reason == "KubeletNotReady" && strings.Contains(c.Message, "container runtime is down")
	}
	// checkPods compares the pods' containers and sandboxes with snap,
	// except the pods in replaced: those containerd lost (see below), which
	// must be Running and Ready again in exactly one ready sandbox.
	checkPods := func(t *testing.T, phase string, replaced map[string]bool) map[string]*v1.Pod {
		t.Helper()
		after := waitPods(t, n.ns, names, "Running and Ready "+phase, podTimeout, isPodReady)
		kept := maps.Clone(snap)
		for key := range kept {
			if pod, _, _ := strings.Cut(key, "/"); replaced[pod] {
				delete(kept, key)
			}
		}
		if changed := compareContainers(kept, after); len(changed) > 0 {
			t.Errorf("containers restarted or replaced %s:\n  %s", phase, strings.Join(changed, "\n  "))
		}
		for _, name := range names {
			sbs := n.criSandboxes(t, after[name].UID)
			if !replaced[name] {
				if len(sbs) != 1 {
					t.Errorf("pod %s has %d sandboxes %s, want 1", name, len(sbs), phase)
				}
				continue
			}
			ready := 0
			for _, sb := range sbs {
				if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
					ready++
				}
			}
			if ready != 1 {
				t.Errorf("pod %s, whose sandbox containerd lost, has %d ready sandboxes %s, want 1", name, ready, phase)
			}
		}
		return after
	}

	// Stopped. Which shims serve which pods first: containerd 1.6 groups a
	// pod's containers in its sandbox's shim, but on a starved machine it
	// can fail to reach that shim and start a second one in its place on
	// the same socket (see cluster.Containerd.Shims). Such a pod's sandbox
	// cannot survive a restart: containerd reconnects to the second shim,
	// finds no sandbox task there and reports it NOTREADY, and the agent
	// (as the kubelet, whose PodSandboxChanged has the same rule) replaces
	// it. Every other pod must come through untouched.
	shims, err := n.containerd.Shims()
	if err != nil {
		t.Fatal(err)
	}
	split := map[string]string{} // pod → container that got a shim of its own
	sandboxIDs := map[string]string{}
	for _, name := range names {
		for _, c := range n.criContainers(t, before[name].UID, false) {
			if _, ok := shims[c.Id]; ok {
				split[name] = c.Id
			}
		}
		sbs := n.criSandboxes(t, before[name].UID)
		if len(sbs) != 1 {
			t.Fatalf("pod %s has %d sandboxes before containerd was stopped, want 1", name, len(sbs))
		}
		sandboxIDs[name] = sbs[0].Id
	}
	if err := n.containerd.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	restarted := false
	defer func() {
		if !restarted {
			_ = n.containerd.Start(context.WithoutCancel(ctx))
		}
	}()
	// The stop left every shim (and so every container) running, as
	// `systemctl stop containerd` does.
	if left, err := n.containerd.Shims(); err != nil {
		t.Fatal(err)
	} else if !maps.Equal(left, shims) {
		t.Errorf("shims before containerd was stopped %v, after %v: the stop must leave them running", shims, left)
	}
	node := waitForNode(t, n.name, "Ready=False: container runtime is down", readyTimeout, runtimeDown)
	notReadyAfter := time.Since(stopped)
	// As frozen (below): the kubelet's 30 s threshold from the last answer,
	// then the PATCH and the watch under CI load.
	if limit := runtimeDownThreshold + 10*time.Second; notReadyAfter > limit {
		t.Errorf("NotReady %s after containerd stopped, want within %s", notReadyAfter, limit)
	}
	t.Logf("containerd stopped: Ready=False after %s: %s %q", notReadyAfter.Round(100*time.Millisecond), readyCondition(node).Reason, readyCondition(node).Message)
	if d := 30*time.Second - time.Since(stopped); d > 0 {
		time.Sleep(d)
	}
	down := time.Since(stopped)
	if err := n.containerd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	started := time.Now()
	// What containerd itself says of each sandbox once it is back, before
	// the agent can have acted on it: a pod whose shim was intact must still
	// be READY (else the stop or containerd lost it, not the agent); a split
	// pod's is NOTREADY in containerd 1.6, which is what the agent and the
	// kubelet replace.
	lost := map[string]bool{}
	for _, name := range names {
		resp, err := n.cri.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxIDs[name]})
		if err != nil {
			t.Fatalf("CRI PodSandboxStatus of pod %s's sandbox %s after the restart: %v", name, sandboxIDs[name], err)
		}
		if state := resp.GetStatus().GetState(); state != runtimeapi.PodSandboxState_SANDBOX_READY {
			lost[name] = true
			if split[name] == "" {
				t.Errorf("containerd reports pod %s's sandbox %s %s right after its restart, although the pod's containers shared the sandbox's shim: the stop or containerd lost it, or the agent stopped it at once", name, sandboxIDs[name], state)
			}
		}
	}
	waitForNode(t, n.name, "Ready with containerd back", readyTimeout, isReady)
	if back := time.Since(started); back > runtimeBackLimit {
		t.Errorf("Ready %s after containerd was back, want within %s", back, runtimeBackLimit)
	}
	t.Logf("containerd down %s; Ready again %s after it was back; %d shims, all running through the stop; %d of %d pods had a container in a second shim (containerd 1.6), %d sandboxes reported NOTREADY by containerd after the restart and replaced as the kubelet does",
		down.Round(100*time.Millisecond), time.Since(started).Round(100*time.Millisecond), len(shims), len(split), len(names), len(lost))
	time.Sleep(5 * time.Second)
	checkPods(t, "after containerd was stopped", lost)
	snap = snapshotContainers(waitPods(t, n.ns, names, "Running and Ready before the freeze", podTimeout, isPodReady))

	// Frozen.
	leases := env.cp.Client().CoordinationV1().Leases("kube-node-lease")
	cycles := func() float64 { return metricValue(t, n.agent, "nodekit_node_status_cycles_total", nil) }
	cyclesBefore := cycles()
	if err := n.containerd.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	thawed := false
	defer func() {
		if !thawed {
			_ = n.containerd.Thaw()
		}
	}()
	node = waitForNode(t, n.name, "NotReady with containerd frozen", readyTimeout, runtimeDown)
	notReadyAfter = time.Since(frozen)
	// The kubelet's threshold: 30 s without an answer, counted from the
	// last answer (at or before the freeze). The agent reports it at once
	// (runtime.StatusPoller.Changes), not at the next status period as the
	// kubelet: allow 10 s for the PATCH and the watch under CI load.
	if limit := runtimeDownThreshold + 10*time.Second; notReadyAfter > limit {
		t.Errorf("NotReady %s after containerd froze, want within %s", notReadyAfter, limit)
	}
	// The Lease keeps flowing while the runtime hangs: two renewals in a
	// row, each after the freeze. (The status cycles are counted after
	// SIGCONT: a scrape of /metrics now would wait on the runtime for the
	// volume stats, up to a minute, as the kubelet's waits on its
	// ListPodStats.)
	var renewals []time.Time
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := leases.Get(ctx, n.name, metav1.GetOptions{})
		if err != nil || lease.Spec.RenewTime == nil {
			return false, nil
		}
		if at := lease.Spec.RenewTime.Time; at.After(frozen) && !slices.ContainsFunc(renewals, at.Equal) {
			renewals = append(renewals, at)
		}
		return len(renewals) >= 2, nil
	})
	if err != nil {
		t.Errorf("the Lease was renewed %d times in the minute after containerd froze, want 2: renewals stopped with the runtime", len(renewals))
	}
	var renewedAt []string
	for _, at := range renewals {
		renewedAt = append(renewedAt, "+"+at.Sub(frozen).Round(time.Second).String())
	}
	if !isPodReady(waitPods(t, n.ns, names[:1], "still bound", podTimeout, func(*v1.Pod) bool { return true })[names[0]]) {
		t.Logf("pod %s is not Ready while the runtime hangs (the node lifecycle controller marks pods of a NotReady node)", names[0])
	}
	frozenFor := time.Since(frozen)
	if err := n.containerd.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	thawedAt := time.Now()
	waitForNode(t, n.name, "Ready after SIGCONT", readyTimeout, isReady)
	readyAgain := time.Since(thawedAt)
	if readyAgain > runtimeBackLimit {
		t.Errorf("Ready %s after SIGCONT, want within %s", readyAgain, runtimeBackLimit)
	}
	statusCycles := cycles() - cyclesBefore
	if min := float64(frozenFor/(10*time.Second)) - 1; statusCycles < min {
		t.Errorf("%v status cycles in the %s containerd was frozen and the %s after, want at least %v", statusCycles, frozenFor.Round(time.Second), readyAgain.Round(time.Second), min)
	}
	checkPods(t, "after containerd was frozen", nil)
	t.Logf("containerd frozen %s: NotReady after %s (%q), Lease renewals seen at %s after the freeze, %v status cycles meanwhile; Ready %s after SIGCONT",
		frozenFor.Round(time.Second), notReadyAfter.Round(100*time.Millisecond), readyCondition(node).Message, strings.Join(renewedAt, " "), statusCycles, readyAgain.Round(100*time.Millisecond))
}
