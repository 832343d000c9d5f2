package e2e

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// pidPressureTransitionPeriod is the PID pressure node's
// evictionPressureTransitionPeriod: short, so the test sees the condition
// clear.
const pidPressureTransitionPeriod = 20 * time.Second

// TestPIDPressureOnContainerd: the eviction manager's pid.available signal
// as the kubelet's, on a containerd node. The host's free PIDs are what
// they are, so evictionHard pid.available sits half a fill below what is
// free now (as the agent computes it: the lower of kernel.pid_max and
// kernel.threads-max, less the tasks /proc/loadavg counts); a pod that
// starts the fill's processes crosses it by the other half, so the noise of
// the rest of the machine (up to half a fill) does not flip the outcome.
// Under that pressure the node turns PIDPressure=True with the kubelet's
// reason and the pid-pressure taint, and the pod with the most processes is
// evicted (Failed, Evicted, the kubelet's message) — not the BestEffort pod
// beside it that runs one. Its eviction lifts the pressure: the condition
// clears once the transition period has passed, and the taint goes.
func TestPIDPressureOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	const fill = 4000
	free, err := hostPIDsAvailable()
	if err != nil {
		t.Fatal(err)
	}
	if free < 4*fill {
		t.Fatalf("the host has %d PIDs free: too few to put it under PID pressure safely", free)
	}
	threshold := free - fill/2
	t.Logf("host PIDs: %d free as the agent computes them; evictionHard pid.available<%d, fill %d processes", free, threshold, fill)
	n := newContainerdPodNodeWith(t, "ctr-pids", nodeOptions{
		updateFrequency: 2 * time.Second,
		kubeletConfig: map[string]any{
			"evictionHard":                     map[string]string{"pid.available": strconv.FormatInt(threshold, 10)},
			"evictionPressureTransitionPeriod": pidPressureTransitionPeriod.String(),
		},
	})
	pidPressure.wait(t, n.name, false, "", readyTimeout)

	few := n.createPod(t, n.pod("few", "sleep", "3600"))
	waitForPod(t, few.Namespace, few.Name, "Running and Ready", isPodReady)
	many := n.createPod(t, n.pod("many", "sh", "-c",
		fmt.Sprintf(`i=0; while [ $i -lt %d ]; do sleep 3600 & i=$((i+1)); done; wait`, fill)))
	pidPressure.wait(t, n.name, true, "", podTimeout)
	pressureAt := time.Now()

	got := waitForPod(t, many.Namespace, many.Name, "evicted", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if got.Status.Reason != "Evicted" || !strings.HasPrefix(got.Status.Message, "The node was low on resource: pids. ") {
		t.Errorf("pod many: reason %q message %q, want Evicted, The node was low on resource: pids. …\n%s", got.Status.Reason, got.Status.Message, describePod(t, got))
	}
	t.Logf("pod many evicted: %s", got.Status.Message)

	// Its processes gone, the pressure lifts: the condition clears after
	// the transition period, the taint goes, and the other pod never
	// stopped.
	pidPressure.wait(t, n.name, false, "after the eviction", podTimeout)
	t.Logf("PIDPressure=False and untainted %s after the pressure was seen (transition period %s)",
		time.Since(pressureAt).Round(100*time.Millisecond), pidPressureTransitionPeriod)
	checkNotEvicted(t, few)
}

// nodePressure is a node pressure condition as the kubelet reports it:
// its type, the taint the node lifecycle controller gives it, and the
// kubelet's reasons and message.
type nodePressure struct {
	condition                    v1.NodeConditionType
	taint                        string
	clearReason, reason, message string
}

var (
	pidPressure = nodePressure{
		condition: v1.NodePIDPressure, taint: v1.TaintNodePIDPressure,
		clearReason: "KubeletHasSufficientPID", reason: "KubeletHasInsufficientPID", message: "kubelet has insufficient PID available",
	}
	diskPressure = nodePressure{
		condition: v1.NodeDiskPressure, taint: v1.TaintNodeDiskPressure,
		clearReason: "KubeletHasNoDiskPressure", reason: "KubeletHasDiskPressure", message: "kubelet has disk pressure",
	}
)

// wait waits until node has the condition True and its NoSchedule taint
// (on), or the condition False and no taint, and checks the kubelet's
// reason (and message) for it; what qualifies the wait in a failure.
func (p nodePressure) wait(t *testing.T, node string, on bool, what string, timeout time.Duration) {
	t.Helper()
	status := v1.ConditionFalse
	if on {
		status = v1.ConditionTrue
	}
	desc := strings.TrimSpace(fmt.Sprintf("%s=%s, tainted %t %s", p.condition, status, on, what))
	got := waitForNode(t, node, desc, timeout, func(n *v1.Node) bool {
		c, _ := nodeCondition(n, p.condition)
		return c.Status == status && hasTaint(n, p.taint, v1.TaintEffectNoSchedule) == on
	})
	c, _ := nodeCondition(got, p.condition)
	switch {
	case on && (c.Reason != p.reason || c.Message != p.message):
		t.Errorf("%s=True: reason %q message %q, want %s, %s", p.condition, c.Reason, c.Message, p.reason, p.message)
	case !on && c.Reason != p.clearReason:
		t.Errorf("%s=False reason %q, want %s", p.condition, c.Reason, p.clearReason)
	}
}

// checkNotEvicted checks that pod, on a node that was under pressure, is
// still Running and Ready and never restarted: it was not the pod to evict.
func checkNotEvicted(t *testing.T, pod *v1.Pod) {
	t.Helper()
	got := waitForPod(t, pod.Namespace, pod.Name, "Running and Ready", isPodReady)
	if cs, _ := mainStatus(got); cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("pod %s: container %s, %d restarts; want running, never restarted (it was not the pod to evict)", pod.Name, stateString(cs.State), cs.RestartCount)
	}
}

// hostPIDsAvailable is pid.available as the agent computes it: the lower of
// kernel.pid_max and kernel.threads-max, less the tasks /proc/loadavg
// counts.
func hostPIDsAvailable() (int64, error) {
	var limit int64 = -1
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		if limit < 0 || v < limit {
			limit = v
		}
	}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	fields := bytes.Fields(b)
	if len(fields) < 4 {
		return 0, fmt.Errorf("/proc/loadavg: %q", b)
	}
	_, total, ok := bytes.Cut(fields[3], []byte("/"))
	if !ok {
		return 0, fmt.Errorf("/proc/loadavg: %q", b)
	}
	tasks, err := strconv.ParseInt(string(total), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg: %w", err)
	}
	return limit - tasks, nil
}
