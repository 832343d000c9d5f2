package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/bench"
	"github.com/nodekit/nodekit/e2e/cluster"
)

// TestAPIServerOutage cuts one node off the apiserver for two minutes
// (through an API proxy of its own, so that every other test keeps the
// apiserver): first refused (an apiserver that is down), then hanging (an
// apiserver or network that answers nothing). Meanwhile one of its 10 pods'
// containers is stopped behind the agent's back. No container may restart;
// the exited container's status reaches the apiserver once it is back, the
// Lease is renewed within one renew interval (10 s) of the recovery, the
// node reports Ready again within one status period (10 s), the pods the node lifecycle controller marked
// not ready are Ready again, and the agent's memory does not grow while it
// retries. It prints the recovery delays and the anonymous RSS samples.
func TestAPIServerOutage(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	const (
		outage        = 2 * time.Minute
		renewInterval = 10 * time.Second // 40 s lease × 0.25
		statusPeriod  = 10 * time.Second // nodeStatusUpdateFrequency
	)
	n := newRelNode(t, "api-outage", relOptions{proxy: true})
	names := createPods(t, 10, "outage", func(name string) *v1.Pod { return withGrace(n.pod(name, sleeper...), 2) })
	exits := neverRestart(withGrace(n.pod("outage-exits", sleeper...), 2))
	n.createPod(t, exits)
	before := waitPods(t, n.ns, append(slices.Clone(names), exits.Name), "Running and Ready", podTimeout, isPodReady)
	snap := snapshotContainers(before)
	delete(snap, exits.Name+"/main")

	// Anonymous memory (heap, stacks, the runtime's): what retries would
	// leak. The file-backed rest is the executable's pages, which the
	// agent gives back after its start and the outage's code paths (TLS
	// handshakes, error handling) fault in again.
	rss := func() int64 {
		st, err := bench.ReadProcStats(n.agent.Pid())
		if err != nil {
			t.Fatal(err)
		}
		return int64(st.RSSAnon)
	}
	// The baseline after the agent settled with its pods.
	time.Sleep(5 * time.Second)
	samples := []int64{rss()}

	if err := n.proxy.Set(cluster.ProxyRefuse); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	restored := false
	defer func() {
		if !restored {
			_ = n.proxy.Set(cluster.ProxyForward)
		}
	}()
	// The container exits while nobody can hear of it.
	time.Sleep(10 * time.Second)
	cs, _ := mainStatus(before[exits.Name])
	exitedID := strings.TrimPrefix(cs.ContainerID, n.runtimeName+"://")
	exitedAt := time.Now()
	if _, err := n.cri.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: exitedID, Timeout: 0}); err != nil {
		t.Fatalf("stop container %s during the outage: %v", exitedID, err)
	}
	hung := false
	for time.Since(cut) < outage {
		time.Sleep(10 * time.Second)
		samples = append(samples, rss())
		if !hung && time.Since(cut) >= outage/2 {
			if err := n.proxy.Set(cluster.ProxyHang); err != nil {
				t.Fatal(err)
			}
			hung = true
		}
	}
	if err := n.proxy.Set(cluster.ProxyForward); err != nil {
		t.Fatal(err)
	}
	restored = true
	back := time.Now()
	down := back.Sub(cut)

	// The Lease: renewed after the recovery within one renew interval.
	var renewed time.Duration
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := env.cp.Client().CoordinationV1().Leases("kube-node-lease").Get(ctx, n.name, metav1.GetOptions{})
		if err != nil || lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(back) {
			return false, nil
		}
		renewed = time.Since(back)
		return true, nil
	})
	if err != nil {
		t.Fatalf("the Lease was not renewed after the apiserver came back: %v", err)
	}
	// One renew interval, plus the 4 % jitter and a second of slack for
	// this shared machine.
	if limit := renewInterval + renewInterval/25 + time.Second; renewed > limit {
		t.Errorf("Lease renewed %s after the apiserver came back, want within one renew interval (%s)", renewed, limit)
	}
	nodeBack := time.Now()
	waitForNode(t, n.name, "Ready after the outage", readyTimeout, func(node *v1.Node) bool {
		c := readyCondition(node)
		// Heartbeats have whole seconds.
		return c.Status == v1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(back.Truncate(time.Second))
	})
	nodeReady := time.Since(nodeBack) + nodeBack.Sub(back)
	// The node lifecycle controller marked the node Unknown during the
	// outage; the agent must see that once the apiserver answers (not
	// trust its watch from before the outage) and report Ready within one
	// status period, plus 3 s for the PATCH and the watch under CI load.
	if limit := statusPeriod + 3*time.Second; nodeReady > limit {
		t.Errorf("node Ready %s after the apiserver came back, want within one status period (%s)", nodeReady.Round(100*time.Millisecond), limit)
	}

	// The exited container's status, written once the apiserver is back.
	failed := waitPods(t, n.ns, []string{exits.Name}, "Failed", podTimeout, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	exitWritten := time.Since(back)
	if cs, _ := mainStatus(failed[exits.Name]); cs.State.Terminated == nil || strings.TrimPrefix(cs.ContainerID, n.runtimeName+"://") != exitedID {
		t.Errorf("the container stopped during the outage: state %s id %s, want terminated %s", stateString(cs.State), cs.ContainerID, exitedID)
	} else if fin := cs.State.Terminated.FinishedAt.Time; fin.Before(exitedAt.Truncate(time.Second)) || fin.After(back) {
		t.Errorf("the exited container reports finishedAt %s, want about %s (during the outage)", fin, exitedAt)
	}

	// The other pods: Ready again (the node lifecycle controller marked
	// them not ready while the node was unreachable), same containers.
	start := time.Now()
	after := waitPods(t, n.ns, names, "Running and Ready after the outage", podTimeout, isPodReady)
	podsReady := time.Since(start) + start.Sub(back)
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("%d containers restarted or replaced during the outage:\n  %s", len(changed), strings.Join(changed, "\n  "))
	}
	for _, name := range names {
		if sbs := n.criSandboxes(t, after[name].UID); len(sbs) != 1 {
			t.Errorf("pod %s has %d sandboxes after the outage, want 1", name, len(sbs))
		}
	}

	// Memory while retrying: the second half of the outage holds no more
	// than the first sample plus a few MiB of heap growth and GC slack.
	base, peak := samples[0], slices.Max(samples)
	if growth := peak - base; growth > 16<<20 {
		t.Errorf("the agent's anonymous RSS grew by %s during the outage (from %s to a peak of %s)", mibytes(float64(growth)), mibytes(float64(base)), mibytes(float64(peak)))
	}
	var rssMiB []string
	for _, s := range samples {
		rssMiB = append(rssMiB, strings.TrimSuffix(mibytes(float64(s)), " MiB"))
	}
	t.Logf("apiserver cut off %s (half refused, half hanging), %d pods: 0 containers restarted; Lease renewed %s after it was back (renew interval %s); node Ready %s after; the exited container's status written within %s; pods Ready again within %s; anonymous RSS every 10 s (MiB): %s",
		down.Round(time.Second), len(names)+1, renewed.Round(10*time.Millisecond), renewInterval, nodeReady.Round(100*time.Millisecond),
		exitWritten.Round(100*time.Millisecond), podsReady.Round(100*time.Millisecond), strings.Join(rssMiB, " "))
}
