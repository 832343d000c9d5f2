package e2e

import (
	"os"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"context"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// TestNodeOnContainerd runs an agent on containerd: the node registers and
// turns Ready, reports the runtime, OS and kernel (as kubectl get nodes -o
// wide shows them), turns NotReady with the runtime's reason when the pod
// network is unconfigured or containerd is stopped, and Ready again after.
func TestNodeOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	const name = "containerd-node"
	n := newNode(t, name, nodeOptions{
		runtimeEndpoint: env.containerd.Endpoint,
		extraArgs:       []string{"--cgroup-root=" + newCgroupRoot(t, name)},
	})
	node := waitForNode(t, name, "Ready", readyTimeout, isReady)

	_, version, err := env.containerd.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	runtimeVersion := "containerd://" + version
	info := node.Status.NodeInfo
	osImage, kernel := hostOSImage(t), hostKernel(t)
	for _, check := range []struct{ field, got, want string }{
		{"containerRuntimeVersion", info.ContainerRuntimeVersion, runtimeVersion},
		{"osImage", info.OSImage, osImage},
		{"kernelVersion", info.KernelVersion, kernel},
		{"operatingSystem", info.OperatingSystem, "linux"},
		{"architecture", info.Architecture, goruntime.GOARCH},
	} {
		if check.got != check.want {
			t.Errorf("nodeInfo.%s = %q, want %q", check.field, check.got, check.want)
		}
	}
	if info.KubeletVersion == "" {
		t.Error("nodeInfo.kubeletVersion is empty")
	}
	if ip := internalIP(node); ip != n.agent.IP {
		t.Errorf("InternalIP = %q, want %q (--node-ip)", ip, n.agent.IP)
	}

	// kubectl shows the same: NAME STATUS ROLES AGE VERSION INTERNAL-IP
	// EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME.
	out, err := env.cp.Kubectl(ctx, env.cp.AdminKubeconfig, "get", "nodes", name, "-o", "wide", "--no-headers")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{name + " ", " Ready ", " " + n.agent.IP + " ", osImage, " " + kernel + " ", runtimeVersion, info.KubeletVersion} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get nodes -o wide: %q does not show %q", strings.TrimSpace(out), want)
		}
	}
	t.Logf("kubectl get nodes -o wide: %s", strings.TrimSpace(out))

	t.Run("network unconfigured", func(t *testing.T) {
		if err := env.containerd.SetNetworkConfigured(false); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := env.containerd.SetNetworkConfigured(true); err != nil {
				t.Fatal(err)
			}
		}()
		node := waitForNode(t, name, "Ready=False for the runtime's network", readyTimeout, func(n *v1.Node) bool {
			return readyStatus(n) == v1.ConditionFalse
		})
		ready := readyCondition(node)
		if ready.Reason != "KubeletNotReady" || !strings.Contains(ready.Message, "NetworkReady=false") || !strings.Contains(ready.Message, "NetworkPluginNotReady") {
			t.Errorf("Ready condition %s %q: want reason KubeletNotReady and the runtime's NetworkReady=false reason NetworkPluginNotReady in the message", ready.Reason, ready.Message)
		}
		if err := env.containerd.SetNetworkConfigured(true); err != nil {
			t.Fatal(err)
		}
		waitForNode(t, name, "Ready again with the network configured", readyTimeout, isReady)
	})

	t.Run("containerd stopped", func(t *testing.T) {
		waitForNode(t, name, "Ready before containerd stops", readyTimeout, isReady)
		if err := env.containerd.Stop(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := env.containerd.Start(context.WithoutCancel(ctx)); err != nil {
				t.Fatal(err)
			}
		}()
		node := waitForNode(t, name, "Ready=False with containerd down", readyTimeout, func(n *v1.Node) bool {
			return readyStatus(n) == v1.ConditionFalse
		})
		ready := readyCondition(node)
		if ready.Reason != "KubeletNotReady" || !strings.Contains(ready.Message, "container runtime is down") {
			t.Errorf("Ready condition %s %q: want reason KubeletNotReady and \"container runtime is down\" in the message", ready.Reason, ready.Message)
		}
		if err := env.containerd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		node = waitForNode(t, name, "Ready again with containerd up", readyTimeout, isReady)
		if got := node.Status.NodeInfo.ContainerRuntimeVersion; got != runtimeVersion {
			t.Errorf("after the restart containerRuntimeVersion = %q, want %q", got, runtimeVersion)
		}
	})
}

// TestLeaseRenewedEveryTenSeconds watches the node's Lease: held by the node,
// 40 s long, owned by the Node, and renewed about every 10 s
// (leaseDurationSeconds × 0.25).
func TestLeaseRenewedEveryTenSeconds(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	const name = "lease-node"
	n := newNode(t, name, nodeOptions{})
	node := waitForNode(t, name, "Ready", readyTimeout, isReady)

	leases := env.cp.Client().CoordinationV1().Leases("kube-node-lease")
	var renewals []time.Time
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil || lease.Spec.RenewTime == nil {
			return false, nil
		}
		if t := lease.Spec.RenewTime.Time; len(renewals) == 0 || !t.Equal(renewals[len(renewals)-1]) {
			renewals = append(renewals, t)
		}
		return len(renewals) >= 4, nil
	})
	if err != nil {
		t.Fatalf("saw %d distinct renewTimes of lease %s, want 4 (3 renewals): %v", len(renewals), name, err)
	}
	for i := 1; i < len(renewals); i++ {
		if d := renewals[i].Sub(renewals[i-1]); d < 8*time.Second || d > 20*time.Second {
			t.Errorf("renewal %d came %s after the one before; want about 10s", i, d)
		}
	}

	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ptrValue(lease.Spec.HolderIdentity); got != name {
		t.Errorf("holderIdentity = %q, want %q", got, name)
	}
	if got := ptrValue(lease.Spec.LeaseDurationSeconds); got != 40 {
		t.Errorf("leaseDurationSeconds = %d, want 40", got)
	}
	owners := lease.OwnerReferences
	if len(owners) != 1 || owners[0].Kind != "Node" || owners[0].Name != name || owners[0].UID != node.UID {
		t.Errorf("owner references %+v, want the Node %s (uid %s)", owners, name, node.UID)
	}
	metrics, err := n.agent.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := metrics.Sum("nodekit_node_lease_renewals_total", nil); got < 3 {
		t.Errorf("nodekit_node_lease_renewals_total = %v, want at least the 3 renewals seen", got)
	}
}

// TestStatusPatchedOnlyOnChangeOrReport counts node status PATCHes while
// nothing changes: with the status computed every 2 s and a forced report
// every 30 s, the agent patches only for the reports, as the agent's metrics
// and the apiserver's watch of the Node both show.
func TestStatusPatchedOnlyOnChangeOrReport(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	const name = "quiet-node"
	const update, report = 2 * time.Second, 30 * time.Second
	n := newNode(t, name, nodeOptions{updateFrequency: update, reportFrequency: report})
	waitForNode(t, name, "Ready", readyTimeout, isReady)

	const metricPatches, metricCycles = "nodekit_node_status_patches_total", "nodekit_node_status_cycles_total"
	scrape := func() map[string]float64 {
		t.Helper()
		m, err := n.agent.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]float64{
			"patches":   m.Sum(metricPatches, nil),
			"changed":   m.Sum(metricPatches, map[string]string{"reason": "changed"}),
			"report":    m.Sum(metricPatches, map[string]string{"reason": "report"}),
			"cycles":    m.Sum(metricCycles, nil),
			"unchanged": m.Sum(metricCycles, map[string]string{"result": "unchanged"}),
			// PATCHes the API server did not answer 200 (client-go's
			// code "<error>" for a timeout): the reporter retries them.
			"failedPatches": m.Sum("rest_client_requests_total", map[string]string{"method": "PATCH"}) -
				m.Sum("rest_client_requests_total", map[string]string{"method": "PATCH", "code": "200"}),
		}
	}
	// Steady state: two cycles in a row found nothing to send.
	settle := scrape()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return scrape()["unchanged"] >= settle["unchanged"]+2, nil
	})
	if err != nil {
		t.Fatalf("the status never settled (no unchanged cycles): %v", err)
	}

	current, err := env.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := env.cp.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: current.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	began := time.Now()
	before := scrape()
	// 30 cycles of 2 s: a minute of the agent's own time (longer when its
	// cycles wait on a loaded API server).
	const cycles = 30
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		return scrape()["cycles"] >= before["cycles"]+cycles, nil
	})
	if err != nil {
		t.Fatalf("the agent ran fewer than %d status cycles: %v", cycles, err)
	}
	after := scrape()
	elapsed := time.Since(began)
	// Count the Node's modifications the watch delivers, up to the
	// resourceVersion the Node has now.
	final, err := env.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	modified := 0
	for seen := current.ResourceVersion; seen != final.ResourceVersion; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of node %s closed early", name)
			}
			if node, isNode := ev.Object.(*v1.Node); isNode && ev.Type == watch.Modified {
				modified++
				seen = node.ResourceVersion
			}
		case <-time.After(time.Minute):
			t.Fatalf("the watch of node %s did not deliver resourceVersion %s", name, final.ResourceVersion)
		}
	}

	delta := func(k string) float64 { return after[k] - before[k] }
	// Forced reports are at least nodeStatusReportFrequency apart: at
	// most 3 fit in 60 s, one more per 30 s the cycles took beyond that
	// (under CI load 30 cycles have spanned more than 90 s).
	// A report whose PATCH failed (the API server slow to answer) is sent
	// again: each failed PATCH allows one more.
	maxReports := int(elapsed/report) + 1
	if delta("changed") != 0 {
		t.Errorf("%v PATCHes for a change while nothing changed", delta("changed"))
	}
	if delta("report") < 1 || delta("report") > float64(maxReports)+delta("failedPatches") {
		t.Errorf("%v forced-report PATCHes in %d cycles of %s (%s) with nodeStatusReportFrequency %s, want 1..%d (+%v failed PATCHes retried)",
			delta("report"), cycles, update, elapsed.Round(time.Second), report, maxReports, delta("failedPatches"))
	}
	if delta("patches") != delta("report") {
		t.Errorf("%v PATCHes in all, %v of them forced reports: want only reports", delta("patches"), delta("report"))
	}
	if modified < 1 || float64(modified) > float64(maxReports)+delta("failedPatches") {
		t.Errorf("a watch saw the Node modified %d times in the window, want 1..%d (the forced reports)", modified, maxReports)
	}
	t.Logf("in %v cycles (%s): %v status PATCHes (%v forced reports, %v PATCHes failed), %d Node modifications seen by a watch", delta("cycles"), elapsed.Round(time.Second), delta("patches"), delta("report"), delta("failedPatches"), modified)
}

// TestAgentWritesOnlyAsItsNode checks the agent's identity: it is
// system:node:<name>, NodeRestriction admits all it does (the apiserver's
// audit log shows no request of it denied, and its Node status and Lease
// written by nobody else), while its credentials cannot touch another node.
func TestAgentWritesOnlyAsItsNode(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	const name = "identity-node"
	n := newNode(t, name, nodeOptions{})
	waitForNode(t, name, "Ready", readyTimeout, isReady)
	kubectl := func(args ...string) (string, error) {
		return env.cp.Kubectl(ctx, n.agent.Kubeconfig, args...)
	}
	// kubectl with the node's credentials asks who it is and tries another
	// node's objects on purpose: the suite's least-privilege check is told.
	endExcuse := excuseDenials(name, "TestAgentWritesOnlyAsItsNode: kubectl with the node's credentials")

	out, err := kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "system:node:"+name+" ") || !strings.Contains(out, "system:nodes") {
		t.Errorf("the node's credentials are %q, want system:node:%s in system:nodes", out, name)
	}
	other := env.sentinel.name
	for _, args := range [][]string{
		{"label", "node", other, "e2e.nodekit.io/intruder=true"},
		{"annotate", "lease", "-n", "kube-node-lease", other, "e2e.nodekit.io/intruder=true"},
	} {
		out, err := kubectl(args...)
		if err == nil || !strings.Contains(strings.ToLower(out), "forbidden") {
			t.Errorf("kubectl %s as %s: want Forbidden, got %v: %s", strings.Join(args, " "), name, err, out)
		}
	}
	if out, err := kubectl("label", "node", name, "e2e.nodekit.io/checked=true"); err != nil {
		t.Errorf("the node labelling itself: %v: %s", err, out)
	}
	endExcuse()

	// What the agent did, from the apiserver's audit log.
	user := "system:node:" + name
	var registered, statusPatched, leaseWritten bool
	for _, ev := range readAuditRecords(t) {
		ref := ev.ObjectRef
		own := ref != nil && ((ref.Resource == "nodes" || ref.Resource == "leases") && ref.Name == name)
		write := ev.Verb == "create" || ev.Verb == "update" || ev.Verb == "patch"
		if own && write && ev.Code < 300 && ev.User.Username != user &&
			(ref.Subresource == "status" || ref.Resource == "leases") {
			t.Errorf("%s %s/%s %s was written by %s, not by the node", ev.Verb, ref.Resource, ref.Name, ref.Subresource, ev.User.Username)
		}
		if ev.User.Username != user || strings.HasPrefix(ev.UserAgent, "kubectl") {
			continue
		}
		if ev.Code == 401 || ev.Code == 403 || ev.Code >= 500 {
			t.Errorf("agent request %s %s answered %d", ev.Verb, ev.RequestURI, ev.Code)
		}
		if write && ref != nil && (ref.Resource == "nodes" || ref.Resource == "leases") && ref.Name != name {
			t.Errorf("agent wrote another node's object: %s %s", ev.Verb, ev.RequestURI)
		}
		if own && ev.Code < 300 {
			registered = registered || (ref.Resource == "nodes" && ev.Verb == "create")
			statusPatched = statusPatched || (ref.Resource == "nodes" && ref.Subresource == "status" && ev.Verb == "patch")
			leaseWritten = leaseWritten || (ref.Resource == "leases" && write)
		}
	}
	if !registered || !statusPatched || !leaseWritten {
		t.Errorf("audit log lacks the agent's own writes: node created %t, status patched %t, lease written %t", registered, statusPatched, leaseWritten)
	}
}

// TestStoppedAgentMakesNodeUnreachable stops an agent: it exits 0 on
// SIGTERM, and kube-controller-manager marks the node Ready=Unknown and
// taints it node.kubernetes.io/unreachable (NoExecute too: the sentinel
// node stays Ready, so the controller is not in disruption mode). Started
// again, the node turns Ready and the taints go.
func TestStoppedAgentMakesNodeUnreachable(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	const name = "stopped-node"
	const unreachable = v1.TaintNodeUnreachable
	n := newNode(t, name, nodeOptions{})
	waitForNode(t, name, "Ready", readyTimeout, isReady)

	if err := n.agent.Stop(); err != nil {
		t.Fatalf("stop the agent with SIGTERM: %v", err)
	}
	node := waitForNode(t, name, "Ready=Unknown and tainted unreachable", lifecycleTimeout, func(n *v1.Node) bool {
		return readyStatus(n) == v1.ConditionUnknown && hasTaint(n, unreachable, v1.TaintEffectNoExecute) && hasTaint(n, unreachable, v1.TaintEffectNoSchedule)
	})
	if ready := readyCondition(node); ready.Reason != "NodeStatusUnknown" {
		t.Errorf("Ready condition reason %q, want NodeStatusUnknown (set by the node lifecycle controller)", ready.Reason)
	}

	if err := n.agent.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitForNode(t, name, "Ready with the unreachable taints gone", lifecycleTimeout, func(n *v1.Node) bool {
		return isReady(n) && !hasTaint(n, unreachable, v1.TaintEffectNoExecute) && !hasTaint(n, unreachable, v1.TaintEffectNoSchedule)
	})
}

func internalIP(n *v1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// hostOSImage is what the kubelet reports as osImage: PRETTY_NAME from
// /etc/os-release.
func hostOSImage(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/etc/os-release")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	t.Fatal("no PRETTY_NAME in /etc/os-release")
	return ""
}

// hostKernel is the kernel release, as uname -r prints it.
func hostKernel(t *testing.T) string {
	t.Helper()
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
