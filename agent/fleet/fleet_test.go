package fleet_test

import (
	"context"
	"math"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/agent/fleet"
	"github.com/nodekit/nodekit/internal/memtrim"
	"github.com/nodekit/nodekit/internal/testenv"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

func TestStartRefusesIncompleteOptions(t *testing.T) {
	kubeconfig := func(int) string { return "/nonexistent" }
	for name, o := range map[string]fleet.Options{
		"no names":         {Dir: t.TempDir(), Kubeconfig: kubeconfig},
		"no directory":     {Names: []string{"a"}, Kubeconfig: kubeconfig},
		"no credentials":   {Names: []string{"a"}, Dir: t.TempDir()},
		"both credentials": {Names: []string{"a"}, Dir: t.TempDir(), Kubeconfig: kubeconfig, BootstrapKubeconfig: "/b"},
	} {
		if f, err := fleet.Start(context.Background(), o); err == nil {
			f.Stop() //nolint:errcheck // the test fails anyway
			t.Errorf("%s: Start succeeded", name)
		}
	}
}

// TestStartSetsTheMemoryLimit: MemoryMax sets the process's Go memory
// limit, before the agents start (here they fail: no kubeconfig), to the
// budget less the executable's read-only mappings, unless the process's
// limit is lower already.
func TestStartSetsTheMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	exe, err := memtrim.ExecutableSize()
	if err != nil {
		testenv.Unavailable(t, "no executable size: %v", err)
	}
	const budget = 4 << 30
	for _, tc := range []struct {
		name         string
		before, want int64
	}{
		{name: "no limit before", before: math.MaxInt64, want: budget - int64(exe)},
		{name: "a lower limit before", before: 1 << 30, want: 1 << 30},
	} {
		debug.SetMemoryLimit(tc.before)
		_, err := fleet.Start(context.Background(), fleet.Options{
			Names: []string{"a", "b"}, Dir: t.TempDir(), Kubeconfig: func(int) string { return "/nonexistent" },
			MemoryMax: budget,
		})
		if err == nil {
			t.Fatalf("%s: Start without a kubeconfig succeeded", tc.name)
		}
		if got := debug.SetMemoryLimit(-1); got != tc.want {
			t.Errorf("%s: memory limit after Start: %d, want %d (the executable: %d bytes)", tc.name, got, tc.want, exe)
		}
	}
}

// TestStartHoldsTheCollectorUntilStarted: with StartMemoryPerNode the
// collector is off below a memory limit while the agents start (read
// while Start asks for a node's kubeconfig), and Start restores the
// process's GOGC and memory limit when it returns, here with MemoryMax's
// lower limit during the start and after it.
func TestStartHoldsTheCollectorUntilStarted(t *testing.T) {
	prevLimit := debug.SetMemoryLimit(-1)
	prevGC := debug.SetGCPercent(150)
	t.Cleanup(func() {
		debug.SetMemoryLimit(prevLimit)
		debug.SetGCPercent(prevGC)
	})
	// read returns GOGC (-1: off) and the memory limit, leaving both.
	read := func() (gogc int, limit int64) {
		gogc = debug.SetGCPercent(-1)
		debug.SetGCPercent(gogc)
		return gogc, debug.SetMemoryLimit(-1)
	}
	for _, tc := range []struct {
		name         string
		memoryMax    int64
		wantAfter    func(limit int64) bool
		startPerNode int64
	}{
		{name: "alone", wantAfter: func(l int64) bool { return l == math.MaxInt64 }, startPerNode: 2 << 30},
		{name: "with MemoryMax", memoryMax: 5 << 29, wantAfter: func(l int64) bool { return l >= 2<<30 && l < 3<<30 }, startPerNode: 1 << 30},
	} {
		debug.SetMemoryLimit(math.MaxInt64)
		var (
			duringGC    int
			duringLimit int64
		)
		_, err := fleet.Start(context.Background(), fleet.Options{
			Names: []string{"a", "b"}, Dir: t.TempDir(), Parallel: 1,
			Kubeconfig: func(i int) string {
				if i == 0 {
					duringGC, duringLimit = read()
				}
				return "/nonexistent"
			},
			MemoryMax: tc.memoryMax, StartMemoryPerNode: 2 << 30,
		})
		if err == nil {
			t.Fatalf("%s: Start without a kubeconfig succeeded", tc.name)
		}
		// The limit counts what the runtime held before the start too.
		if duringGC != -1 || duringLimit < 2*tc.startPerNode || duringLimit > 2*tc.startPerNode+1<<30 {
			t.Errorf("%s: while starting, GOGC %d and memory limit %d, want off (-1) and 2 × %d plus what the runtime held", tc.name, duringGC, duringLimit, tc.startPerNode)
		}
		if gogc, limit := read(); gogc != 150 || !tc.wantAfter(limit) {
			t.Errorf("%s: after Start, GOGC %d and memory limit %d, want 150 and the limit before the start or MemoryMax's", tc.name, gogc, limit)
		}
	}
}

// TestAgentRunsPodsOnAnInProcessRuntime: an agent calling its fake runtime
// in process, as a fleet's nodes do, turns Ready and runs a pod's life
// through it: a readiness probe by exec (ExecSync's exit code), a
// container that exits (the event stream), the pod's deletion (stop and
// removal), all without a socket.
func TestAgentRunsPodsOnAnInProcessRuntime(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{InProcessCRI: true})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	var ready atomic.Bool
	n.CRI.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		if r.Cmd[0] == "ready" && ready.Load() {
			return fakecri.ExecResult{}
		}
		return fakecri.ExecResult{ExitCode: 1, Stderr: []byte("not yet")}
	})
	web := agenttest.Pod("web", "busybox")
	web.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"ready"}}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
	}
	web = n.CreatePod(ctx, web)
	n.WaitForPod(ctx, web, func(p *v1.Pod) bool {
		return agenttest.PodPhase(v1.PodRunning)(p) && agenttest.PodCondition(p, v1.PodReady).Status == v1.ConditionFalse
	})
	ready.Store(true)
	n.WaitForPod(ctx, web, agenttest.PodRunningAndReady)

	job := agenttest.Pod("job", "busybox")
	job.Spec.RestartPolicy = v1.RestartPolicyNever
	job.Annotations = map[string]string{fakecri.BehaviorAnnotation: "exit 3 after 100ms"}
	job = n.CreatePod(ctx, job)
	done := n.WaitForPod(ctx, job, agenttest.PodPhase(v1.PodFailed))
	if st := done.Status.ContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 3 {
		t.Fatalf("job's container statuses %+v, want one terminated with exit code 3", st)
	}

	if err := n.Client.CoreV1().Pods(web.Namespace).Delete(ctx, web.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return n.CRI.Calls("RemovePodSandbox") > 0, nil
	}); err != nil {
		t.Fatalf("the deleted pod's sandbox was not removed: %v", err)
	}
	if n.CRI.EventStreams() != 1 {
		t.Errorf("%d container event streams open, want the PLEG's one", n.CRI.EventStreams())
	}
}
