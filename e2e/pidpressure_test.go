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
	pidPressure := func(status v1.ConditionStatus) func(*v1.Node) bool {
		return func(node *v1.Node) bool {
			c, _ := nodeCondition(node, v1.NodePIDPressure)
			return c.Status == status
		}
	}
	node := waitForNode(t, n.name, "PIDPressure=False", readyTimeout, pidPressure(v1.ConditionFalse))
	if c, _ := nodeCondition(node, v1.NodePIDPressure); c.Reason != "KubeletHasSufficientPID" {
		t.Errorf("PIDPressure=False reason %q, want KubeletHasSufficientPID", c.Reason)
	}

	few := n.createPod(t, n.pod("few", "sleep", "3600"))
	waitForPod(t, few.Namespace, few.Name, "Running and Ready", isPodReady)
	many := n.createPod(t, n.pod("many", "sh", "-c",
		fmt.Sprintf(`i=0; while [ $i -lt %d ]; do sleep 3600 & i=$((i+1)); done; wait`, fill)))
	node = waitForNode(t, n.name, "PIDPressure=True", podTimeout, pidPressure(v1.ConditionTrue))
	pressureAt := time.Now()
	if c, _ := nodeCondition(node, v1.NodePIDPressure); c.Reason != "KubeletHasInsufficientPID" || c.Message != "kubelet has insufficient PID available" {
		t.Errorf("PIDPressure=True: reason %q message %q, want KubeletHasInsufficientPID, kubelet has insufficient PID available", c.Reason, c.Message)
	}
	waitForNode(t, n.name, "pid-pressure taint", podTimeout, func(node *v1.Node) bool {
		return hasTaint(node, v1.TaintNodePIDPressure, v1.TaintEffectNoSchedule)
	})

	got := waitForPod(t, many.Namespace, many.Name, "evicted", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if got.Status.Reason != "Evicted" || !strings.HasPrefix(got.Status.Message, "The node was low on resource: pids. ") {
		t.Errorf("pod many: reason %q message %q, want Evicted, The node was low on resource: pids. …\n%s", got.Status.Reason, got.Status.Message, describePod(t, got))
	}
	t.Logf("pod many evicted: %s", got.Status.Message)

	// Its processes gone, the pressure lifts: the condition clears after
	// the transition period, the taint goes, and the other pod never
	// stopped.
	node = waitForNode(t, n.name, "PIDPressure=False after the eviction", podTimeout, func(node *v1.Node) bool {
		c, _ := nodeCondition(node, v1.NodePIDPressure)
		return c.Status == v1.ConditionFalse && !hasTaint(node, v1.TaintNodePIDPressure, v1.TaintEffectNoSchedule)
	})
	t.Logf("PIDPressure=False and untainted %s after the pressure was seen (transition period %s)",
		time.Since(pressureAt).Round(100*time.Millisecond), pidPressureTransitionPeriod)
	if c, _ := nodeCondition(node, v1.NodePIDPressure); c.Reason != "KubeletHasSufficientPID" {
		t.Errorf("PIDPressure=False reason %q, want KubeletHasSufficientPID", c.Reason)
	}
	got = waitForPod(t, few.Namespace, few.Name, "Running and Ready", isPodReady)
	if cs, _ := mainStatus(got); cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("pod few: container %s, %d restarts; want running, never restarted (it was not the pod to evict)", stateString(cs.State), cs.RestartCount)
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
