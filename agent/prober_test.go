package agent_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/prober"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/status/podstatus"
)

func execProbe(cmd string) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{cmd}}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
}

// waitForEvent waits for an event with reason about the pod whose message
// contains text, and returns it.
func waitForEvent(ctx context.Context, t *testing.T, n *agenttest.Node, pod *v1.Pod, reason, text string) v1.Event {
	t.Helper()
	var found v1.Event
	var seen []string
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := n.Client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range list.Items {
			if ev.InvolvedObject.Name != pod.Name {
				continue
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Reason == reason && strings.Contains(ev.Message, text) {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: no %s event containing %q: %v; events: %q", pod.Name, reason, text, err, seen)
	}
	return found
}

// watchReady records, from every version of the pod the API sees, whether
// anything reported the container or the pod ready while ok() was false.
func watchReady(ctx context.Context, t *testing.T, n *agenttest.Node, name string, ok func() bool) (violations func() []string) {
	t.Helper()
	w, err := n.Client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, isPod := ev.Object.(*v1.Pod)
			if !isPod || p.Name != name || ev.Type == watch.Deleted {
				continue
			}
			// ok is read after the status was written: a status written
			// after the first success was seen is never counted.
			ready := agenttest.PodCondition(p, v1.PodReady).Status == v1.ConditionTrue ||
				agenttest.PodCondition(p, v1.ContainersReady).Status == v1.ConditionTrue
			for _, cs := range p.Status.ContainerStatuses {
				ready = ready || cs.Ready
			}
			if ready && !ok() {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("resourceVersion %s: %+v", p.ResourceVersion, p.Status))
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

func containerReady(p *v1.Pod) bool {
	return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
}

func notReady(p *v1.Pod) bool {
	return p != nil && p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
		p.Status.ContainerStatuses[0].State.Running != nil && !containerReady(p) &&
		agenttest.PodCondition(p, v1.PodReady).Status == v1.ConditionFalse &&
		agenttest.PodCondition(p, v1.ContainersReady).Status == v1.ConditionFalse
}

func readyAndContainersReady(p *v1.Pod) bool {
	return agenttest.PodRunningAndReady(p) && containerReady(p) &&
		agenttest.PodCondition(p, v1.ContainersReady).Status == v1.ConditionTrue
}

// TestAgentReadinessFollowsExecProbe: a container with a readiness probe is
// not ready, nor is its pod, until the probe passes (nothing reports it
// ready before); a failure is an Unhealthy event with the command's output;
// once the probe passes the container, ContainersReady and Ready turn true,
// and false again when it fails.
func TestAgentReadinessFollowsExecProbe(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	var passing, passed atomic.Bool
	n.CRI.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		if passing.Load() {
			passed.Store(true)
			return fakecri.ExecResult{Stdout: []byte("ok")}
		}
		return fakecri.ExecResult{ExitCode: 1, Stdout: []byte("not ready yet")}
	})
	violations := watchReady(ctx, t, n, "web", passed.Load)

	pod := agenttest.Pod("web", "busybox")
	pod.Spec.Containers[0].ReadinessProbe = execProbe("check-ready")
	pod = n.CreatePod(ctx, pod)
	waitForEvent(ctx, t, n, pod, "Unhealthy", "Readiness probe failed: not ready yet")
	n.WaitForPod(ctx, pod, notReady)

	passing.Store(true)
	n.WaitForPod(ctx, pod, readyAndContainersReady)
	passing.Store(false)
	n.WaitForPod(ctx, pod, notReady)

	if v := violations(); len(v) != 0 {
		t.Errorf("the pod was reported ready before its readiness probe ever passed:\n%s", strings.Join(v, "\n"))
	}
}

// TestAgentRestartsContainerOnLivenessFailure: a failed liveness probe kills
// the container with the probe's terminationGracePeriodSeconds (the pod's
// hour would outlast the test: the container ignores SIGTERM) and the
// restart policy starts a new one; Unhealthy and Killing events say why.
func TestAgentRestartsContainerOnLivenessFailure(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	// The first container instance fails its liveness probe, later ones pass.
	var first atomic.Value
	n.CRI.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		first.CompareAndSwap(nil, r.ContainerID)
		if first.Load() == r.ContainerID {
			return fakecri.ExecResult{ExitCode: 2, Stderr: []byte("deadlock detected")}
		}
		return fakecri.ExecResult{}
	})
	pod := agenttest.Pod("stuck", "busybox")
	pod.Annotations = map[string]string{fakecri.BehaviorAnnotation: "ignore-sigterm"}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3600)
	live := execProbe("check-alive")
	live.TerminationGracePeriodSeconds = ptr.To[int64](1)
	pod.Spec.Containers[0].LivenessProbe = live
	pod = n.CreatePod(ctx, pod)

	got := n.WaitForPod(ctx, pod, func(p *v1.Pod) bool {
		return p != nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1 &&
			p.Status.ContainerStatuses[0].State.Running != nil
	})
	cs := got.Status.ContainerStatuses[0]
	if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 137 || "fakecri://"+fmt.Sprint(first.Load()) != last.ContainerID {
		t.Errorf("last termination = %+v, want the first instance killed (exit 137)", cs.LastTerminationState)
	}
	waitForEvent(ctx, t, n, pod, "Unhealthy", "Liveness probe failed: deadlock detected")
	waitForEvent(ctx, t, n, pod, "Killing", "Container app failed liveness probe, will be restarted")
	// The new instance passes: it keeps running.
	if n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady).Status.ContainerStatuses[0].RestartCount != cs.RestartCount {
		t.Error("the restarted container was restarted again")
	}
}

// TestAgentStartupProbeHoldsOffLiveness: until the startup probe passes,
// the container is not started nor ready and its liveness probe does not
// run; then liveness runs and the container turns started and ready.
func TestAgentStartupProbeHoldsOffLiveness(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	var (
		startupRuns   atomic.Int32
		startedAt     atomic.Int32 // startup run that first passed
		livenessEarly atomic.Bool
		livenessRuns  atomic.Int32
	)
	n.CRI.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		switch r.Cmd[0] {
		case "check-started":
			run := startupRuns.Add(1)
			if run < 4 {
				return fakecri.ExecResult{ExitCode: 1, Stdout: []byte("warming up")}
			}
			startedAt.CompareAndSwap(0, run)
			return fakecri.ExecResult{}
		case "check-alive":
			livenessRuns.Add(1)
			if startedAt.Load() == 0 {
				livenessEarly.Store(true)
			}
		}
		return fakecri.ExecResult{}
	})
	pod := agenttest.Pod("slow", "busybox")
	startup := execProbe("check-started")
	startup.FailureThreshold = 30
	pod.Spec.Containers[0].StartupProbe = startup
	pod.Spec.Containers[0].LivenessProbe = execProbe("check-alive")
	pod = n.CreatePod(ctx, pod)

	notStarted := n.WaitForPod(ctx, pod, func(p *v1.Pod) bool {
		return p != nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil && startupRuns.Load() >= 2
	})
	if startedAt.Load() == 0 {
		if cs := notStarted.Status.ContainerStatuses[0]; ptr.Deref(cs.Started, false) || cs.Ready {
			t.Errorf("before its startup probe passed the container is started=%v ready=%t", cs.Started, cs.Ready)
		}
	}
	got := n.WaitForPod(ctx, pod, func(p *v1.Pod) bool {
		return readyAndContainersReady(p) && ptr.Deref(p.Status.ContainerStatuses[0].Started, false) && livenessRuns.Load() >= 1
	})
	if livenessEarly.Load() {
		t.Error("the liveness probe ran before the startup probe passed")
	}
	if rc := got.Status.ContainerStatuses[0].RestartCount; rc != 0 {
		t.Errorf("restartCount = %d: failed startup runs below the threshold must not restart the container", rc)
	}
	t.Logf("startup passed on run %d; liveness ran %d times after", startedAt.Load(), livenessRuns.Load())
}

// TestAgentHTTPProbeWarningAndMetrics: an httpGet readiness probe on a
// host-network pod probes the pod IP (the node's IP); a redirect to another
// host passes with a ProbeWarning event; the runs are counted in the
// registry named probe_metrics.
func TestAgentHTTPProbeWarningAndMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	var agents atomic.Value
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents.Store(r.UserAgent())
		http.Redirect(w, r, "http://localhost:"+strconv.Itoa(port)+"/elsewhere", http.StatusFound)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	var probeMetrics prometheus.Gatherer
	n := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{
		fx.Invoke(fx.Annotate(func(g prometheus.Gatherer) { probeMetrics = g }, fx.ParamTags(`name:"`+prober.MetricsRegistererName+`"`))),
	}})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	pod := agenttest.Pod("redirected", "busybox")
	pod.Spec.HostNetwork = true
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(port)}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
	}
	pod = n.CreatePod(ctx, pod)
	got := n.WaitForPod(ctx, pod, readyAndContainersReady)
	if got.Status.PodIP != "127.0.0.1" {
		t.Errorf("podIP = %q, want the node's 127.0.0.1", got.Status.PodIP)
	}
	waitForEvent(ctx, t, n, pod, "ProbeWarning", "Readiness probe warning: Probe terminated redirects")
	if ua, _ := agents.Load().(string); !strings.HasPrefix(ua, "kube-probe/") {
		t.Errorf("User-Agent = %q, want kube-probe/<major>.<minor>", ua)
	}

	families, err := probeMetrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "prober_probe_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pod"] == "redirected" && labels["probe_type"] == "Readiness" && labels["result"] == "successful" {
				total += m.GetCounter().GetValue()
			}
		}
	}
	if total < 1 {
		t.Errorf("prober_probe_total{pod=redirected,probe_type=Readiness,result=successful} = %v in the probe_metrics registry, want ≥ 1; families: %d", total, len(families))
	}
}

// inProcessRuntime is a pod-level backend for the test: each pod's
// containers "run" from when the runtime was made, with IDs of their own
// and no way to run commands in them.
type inProcessRuntime struct {
	events  chan *podstate.PodLifecycleEvent
	started time.Time
}

func (r inProcessRuntime) PodStatus(_ context.Context, pod *v1.Pod, opts podstatus.GenerateOptions) (v1.PodStatus, error) {
	rs := &podstate.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace, IPs: []string{"10.0.0.9"},
		Sandboxes: []*podstate.SandboxStatus{{ID: "sb-" + string(pod.UID), Ready: true, IP: "10.0.0.9", NetworkReported: true}}}
	started := r.started
	for _, c := range pod.Spec.Containers {
		rs.Containers = append(rs.Containers, &podstate.ContainerStatus{ID: string(pod.UID) + "-" + c.Name, Type: "inproc",
			Name: c.Name, State: podstate.ContainerStateRunning, CreatedAt: started, StartedAt: started, Image: c.Image})
	}
	return podstatus.Generate(pod, rs, nil, opts), nil
}
func (inProcessRuntime) SyncPod(context.Context, *v1.Pod) pods.SyncResult { return pods.SyncResult{} }
func (inProcessRuntime) KillPod(context.Context, *v1.Pod, *int64) error   { return nil }
func (inProcessRuntime) RemovePod(context.Context, types.UID) error       { return nil }
func (inProcessRuntime) RuntimePods(context.Context) ([]*v1.Pod, error)   { return nil, nil }
func (r inProcessRuntime) Events() <-chan *podstate.PodLifecycleEvent     { return r.events }
func newInProcessRuntime() pods.Runtime {
	return inProcessRuntime{events: make(chan *podstate.PodLifecycleEvent), started: time.Now()}
}

// TestAgentWithoutCRIFailsExecProbes: on a node whose runtime runs no
// commands in containers (no CRI), an exec probe errors as the kubelet's
// does, with an Unhealthy event, and nothing crashes; the readiness-probed
// container is never ready.
func TestAgentWithoutCRIFailsExecProbes(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{Runtime: fx.Provide(
		newInProcessRuntime,
		func() status.RuntimeVersionFunc {
			return func(context.Context) (string, string, error) { return "inproc", "1.0", nil }
		},
		func() status.RuntimeHealthFunc {
			return func(context.Context) (error, error) { return nil, nil }
		},
	)})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	pod := agenttest.Pod("inproc", "busybox")
	pod.Spec.Containers[0].ReadinessProbe = execProbe("check-ready")
	pod = n.CreatePod(ctx, pod)
	n.WaitForPod(ctx, pod, notReady)
	waitForEvent(ctx, t, n, pod, "Unhealthy", "Readiness probe errored and resulted in unknown state")
	if got := n.WaitForPod(ctx, pod, notReady); containerReady(got) {
		t.Error("a container whose readiness probe cannot run is ready")
	}
}

// startAgent starts an agent on the CRI endpoint and the client, to be
// stopped by the caller.
func startAgent(t *testing.T, endpoint string, client *fake.Clientset) *fxtest.App {
	t.Helper()
	app := fxtest.New(t, fx.Supply(agenttest.Config(t, "node-a", endpoint)), agent.Core, agent.CRI,
		fx.Replace(&agent.Clients{Client: client, Heartbeat: client}))
	app.RequireStart()
	return app
}

// TestAgentRestartKeepsReadinessUntilProbed: after the agent restarts, a
// container that was ready in a Ready pod stays ready until its probe
// fails failureThreshold times (it does not flap to not ready), and one
// that was not ready is not reported ready before its probe passes.
func TestAgentRestartKeepsReadinessUntilProbed(t *testing.T) {
	srv, endpoint := agenttest.StartFakeCRI(t, fakecri.Options{PullAny: true})
	client := fake.NewClientset()
	ctx := agenttest.Context(t)
	n := &agenttest.Node{T: t, Name: "node-a", Client: client}

	var restarted atomic.Bool
	var failsAfterRestart, passesAfterRestart atomic.Int32
	srv.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		switch {
		case r.PodName == "unready":
			if restarted.Load() {
				passesAfterRestart.Add(1)
				return fakecri.ExecResult{}
			}
			return fakecri.ExecResult{ExitCode: 1}
		case restarted.Load():
			failsAfterRestart.Add(1)
			return fakecri.ExecResult{ExitCode: 1, Stdout: []byte("gone bad")}
		}
		return fakecri.ExecResult{}
	})
	first := startAgent(t, endpoint, client)
	n.WaitReady(ctx)
	ready, unready := agenttest.Pod("ready", "busybox"), agenttest.Pod("unready", "busybox")
	for _, p := range []*v1.Pod{ready, unready} {
		probe := execProbe("check")
		probe.FailureThreshold = 3
		p.Spec.Containers[0].ReadinessProbe = probe
		n.CreatePod(ctx, p)
	}
	got := n.WaitForPod(ctx, ready, readyAndContainersReady)
	n.WaitForPod(ctx, unready, notReady)

	// A container that started less than 10 s before the agent counts as
	// new (its readiness starts failed), as the kubelet's.
	if wait := time.Until(got.Status.ContainerStatuses[0].State.Running.StartedAt.Add(11 * time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	first.RequireStop()

	restarted.Store(true)
	flapped := watchReady(ctx, t, n, "unready", func() bool { return passesAfterRestart.Load() > 0 })
	var mu sync.Mutex
	var dropped []string
	w, err := client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*v1.Pod); ok && p.Name == "ready" && !containerReady(p) && failsAfterRestart.Load() < 3 {
				mu.Lock()
				dropped = append(dropped, fmt.Sprintf("%+v", p.Status))
				mu.Unlock()
			}
		}
	}()
	second := startAgent(t, endpoint, client)
	defer second.RequireStop()

	n.WaitForPod(ctx, unready, readyAndContainersReady)
	waitForEvent(ctx, t, n, ready, "Unhealthy", "Readiness probe failed: gone bad")
	n.WaitForPod(ctx, ready, notReady)
	w.Stop()
	<-watched
	if v := flapped(); len(v) != 0 {
		t.Errorf("the unready pod was reported ready after the restart before its probe passed:\n%s", strings.Join(v, "\n"))
	}
	if len(dropped) != 0 {
		t.Errorf("the ready container turned not ready after the restart before its probe failed 3 times:\n%s", strings.Join(dropped, "\n"))
	}
}
