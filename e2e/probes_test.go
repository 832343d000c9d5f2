package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// grpcHealthImage is e2e/images/grpchealth: a grpc.health.v1 server.
const grpcHealthImage = "nodekit.local/e2e/grpchealth:1.0"

// probeTests are the probe scenarios of issue 9 on containerd.
var probeTests = []podTest{
	{name: "liveness exec failing after a while restarts the container", run: testLivenessRestarts},
	{name: "readiness httpGet on a host-network pod follows a health file", run: testReadinessHTTP},
	{name: "EndpointSlice of a Service follows a pod's readiness", run: testEndpointSliceFollowsReadiness},
	{name: "startup probe holds liveness off until it passes", run: testStartupHoldsLiveness},
	{name: "grpc probe against a grpc health server", run: testGRPCProbe},
}

// TestProbesOnContainerd runs the probe scenarios on a node agent of its own
// on a containerd of its own, with the grpc health image imported.
func TestProbesOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	n := newContainerdPodNode(t, "ctr-probes")
	src, err := cluster.LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := cluster.BuildProgramImage(t.Context(), src, "./images/grpchealth", grpcHealthImage, t.TempDir(), progress)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.containerd.ImportImage(t.Context(), tarball); err != nil {
		t.Fatal(err)
	}
	for _, tc := range probeTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, n)
		})
	}
}

func execAction(cmd ...string) v1.ProbeHandler {
	return v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}
}

// runtimeContainerID is the runtime's ID of a container status.
func runtimeContainerID(cs v1.ContainerStatus) string {
	_, id, _ := strings.Cut(cs.ContainerID, "://")
	return id
}

// firstEvent returns the first event with reason whose message contains
// text, from the pod's events, and whether there is one.
func firstEvent(t *testing.T, pod *v1.Pod, reason, text string) (v1.Event, bool) {
	for _, ev := range podEvents(t, pod.Namespace, pod.Name) {
		if ev.Reason == reason && strings.Contains(ev.Message, text) {
			return ev, true
		}
	}
	return v1.Event{}, false
}

// waitForEventText waits for an event with reason whose message contains
// text.
func waitForEventText(t *testing.T, pod *v1.Pod, reason, text string) v1.Event {
	t.Helper()
	var found v1.Event
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		ev, ok := firstEvent(t, pod, reason, text)
		found = ev
		return ok, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no %s event containing %q: %v\n%s", pod.Namespace, pod.Name, reason, text, err, describePod(t, pod))
	}
	return found
}

// testLivenessRestarts: a container whose liveness exec probe starts
// failing after a while is killed with the probe's
// terminationGracePeriodSeconds (the shell ignores SIGTERM, and the pod's
// grace period would outlast the test) and restarted, again and again:
// restartCount grows, with Unhealthy and Killing events saying why.
func testLivenessRestarts(t *testing.T, n *podNode) {
	pod := n.pod("liveness", "sh", "-c", "touch /tmp/healthy; sleep 5; rm /tmp/healthy; sleep 3600")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](600)
	pod.Spec.Containers[0].LivenessProbe = &v1.Probe{
		ProbeHandler:  execAction("cat", "/tmp/healthy"),
		PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 2,
		TerminationGracePeriodSeconds: ptr.To[int64](2),
	}
	pod = n.createPod(t, pod)
	start := time.Now()
	last := waitForPod(t, pod.Namespace, pod.Name, "restartCount 2 after liveness failures", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return ok && cs.RestartCount >= 2 && cs.State.Running != nil
	})
	took := time.Since(start)
	cs, _ := mainStatus(last)
	term := cs.LastTerminationState.Terminated
	if term == nil || term.ExitCode != 137 {
		t.Errorf("lastState %s, want terminated by SIGKILL (exit 137) after the probe's 2 s grace", stateString(cs.LastTerminationState))
	}
	unhealthy := waitForEventText(t, pod, "Unhealthy", "Liveness probe failed: cat: can't open '/tmp/healthy'")
	killing := waitForEventText(t, pod, "Killing", "Container main failed liveness probe, will be restarted")
	if unhealthy.Type != v1.EventTypeWarning || killing.Type != v1.EventTypeNormal {
		t.Errorf("event types Unhealthy=%s Killing=%s, want Warning and Normal", unhealthy.Type, killing.Type)
	}
	var killedIn time.Duration
	if term != nil {
		killedIn = term.FinishedAt.Sub(term.StartedAt.Time)
	}
	t.Logf("restartCount %d after %s; last instance ran %s (5 s healthy, 2 failed runs at 1 s, 2 s grace); Unhealthy x%d %q; Killing x%d",
		cs.RestartCount, took.Round(time.Second), killedIn, unhealthy.Count, unhealthy.Message, killing.Count)
}

// freeHostPort returns a TCP port free on every host address a moment ago.
func freeHostPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// execInContainer runs cmd in the container through the CRI, as `crictl
// exec` would (the node API's exec is not the point here).
func (n *podNode) execInContainer(t *testing.T, cs v1.ContainerStatus, cmd ...string) {
	t.Helper()
	resp, err := n.cri.ExecSync(t.Context(), &runtimeapi.ExecSyncRequest{ContainerId: runtimeContainerID(cs), Cmd: cmd, Timeout: 30})
	if err != nil || resp.ExitCode != 0 {
		t.Fatalf("exec %q in %s: %v (exit %d, %s%s)", cmd, cs.ContainerID, err, resp.GetExitCode(), resp.GetStdout(), resp.GetStderr())
	}
}

// endpointReady returns the ready condition of addr's endpoint in the
// service's EndpointSlices, and whether it is listed.
func endpointReady(ctx context.Context, ns, service, addr string) (ready, found bool, err error) {
	slices, err := env.cp.Client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return false, false, err
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if a == addr {
					return ptr.Deref(ep.Conditions.Ready, false), true, nil
				}
			}
		}
	}
	return false, false, nil
}

// waitForEndpoint waits until addr's endpoint in the service's
// EndpointSlices has ready condition want.
func waitForEndpoint(t *testing.T, ns, service, addr string, want bool) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		ready, found, err := endpointReady(ctx, ns, service, addr)
		last = fmt.Sprintf("found=%t ready=%t err=%v", found, ready, err)
		return err == nil && found && ready == want, nil
	})
	if err != nil {
		t.Fatalf("service %s/%s: endpoint %s ready=%t: not within %s (last: %s)", ns, service, addr, want, podTimeout, last)
	}
}

// testReadinessHTTP: a host-network pod (its IP is the node's loopback
// InternalIP, so the probe stays on loopback) serves a directory with
// busybox httpd; its readiness httpGet probe passes while the health file
// exists. Ready, ContainersReady and the container's ready flag follow the
// file.
func testReadinessHTTP(t *testing.T, n *podNode) {
	followHealthFile(t, n, "readiness-http", true)
}

// testEndpointSliceFollowsReadiness: the same on the pod network, with a
// Service selecting the pod: its endpoint in the Service's EndpointSlice
// turns ready and not ready with the pod (the API refuses loopback
// endpoint addresses, so a host-network pod of these loopback nodes cannot
// be one).
func testEndpointSliceFollowsReadiness(t *testing.T, n *podNode) {
	followHealthFile(t, n, "readiness-endpoint", false)
}

// followHealthFile runs a busybox httpd pod named name whose readiness
// httpGet probe asks for /healthz, and creates and removes that file twice,
// checking the pod's readiness (and, on the pod network, its endpoint in a
// Service's EndpointSlice) follows.
func followHealthFile(t *testing.T, n *podNode, name string, hostNetwork bool) {
	port := 8080
	if hostNetwork {
		port = freeHostPort(t)
	}
	pod := n.pod(name, "sh", "-c", "mkdir -p /www && exec httpd -f -p "+strconv.Itoa(port)+" -h /www")
	pod.Labels = map[string]string{"app": name}
	pod.Spec.HostNetwork = hostNetwork
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(port)}},
		PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1,
	}
	var svc *v1.Service
	if !hostNetwork {
		svc = &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
			Spec:       v1.ServiceSpec{Selector: pod.Labels, Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(port)}}},
		}
		if _, err := env.cp.Client().CoreV1().Services(n.ns).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod = n.createPod(t, pod)

	notReady := func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return ok && cs.State.Running != nil && !cs.Ready && p.Status.Phase == v1.PodRunning &&
			podCondition(p, v1.PodReady) == v1.ConditionFalse && podCondition(p, v1.ContainersReady) == v1.ConditionFalse
	}
	ready := func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return ok && cs.Ready && isPodReady(p) && podCondition(p, v1.ContainersReady) == v1.ConditionTrue
	}
	running := waitForPod(t, pod.Namespace, pod.Name, "running, not ready without the health file", notReady)
	ip := running.Status.PodIP
	if hostNetwork && ip != n.agent.IP {
		t.Errorf("podIP %s, want the node's InternalIP %s (host network)", ip, n.agent.IP)
	}
	if !hostNetwork && (net.ParseIP(ip) == nil || net.ParseIP(ip).IsLoopback()) {
		t.Errorf("podIP %q, want an address on the pod network", ip)
	}
	ev := waitForEventText(t, pod, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 404")
	if svc != nil {
		waitForEndpoint(t, n.ns, svc.Name, ip, false)
	}
	cs, _ := mainStatus(running)

	for round := 1; round <= 2; round++ {
		created := time.Now()
		n.execInContainer(t, cs, "touch", "/www/healthz")
		waitForPod(t, pod.Namespace, pod.Name, "Ready once the health file exists", ready)
		toReady := time.Since(created)
		var toEndpoint time.Duration
		if svc != nil {
			waitForEndpoint(t, n.ns, svc.Name, ip, true)
			toEndpoint = time.Since(created)
		}

		removed := time.Now()
		n.execInContainer(t, cs, "rm", "/www/healthz")
		waitForPod(t, pod.Namespace, pod.Name, "not Ready once the health file is gone", notReady)
		toNotReady := time.Since(removed)
		msg := fmt.Sprintf("%s round %d (podIP %s, period 1 s): file created → pod Ready after %s", name, round, ip, toReady.Round(10*time.Millisecond))
		if svc != nil {
			msg += fmt.Sprintf(", its endpoint ready after %s", toEndpoint.Round(10*time.Millisecond))
		}
		msg += fmt.Sprintf("; file removed → pod not Ready after %s", toNotReady.Round(10*time.Millisecond))
		if svc != nil {
			waitForEndpoint(t, n.ns, svc.Name, ip, false)
			msg += fmt.Sprintf(", its endpoint not ready after %s", time.Since(removed).Round(10*time.Millisecond))
		}
		t.Log(msg)
	}
	last := waitForPod(t, pod.Namespace, pod.Name, "read", func(*v1.Pod) bool { return true })
	if c, _ := mainStatus(last); c.RestartCount != 0 || c.ContainerID != cs.ContainerID {
		t.Errorf("container restarted (%d, %s → %s): readiness must never restart it", c.RestartCount, cs.ContainerID, c.ContainerID)
	}
	t.Logf("%s: Unhealthy event %q x%d", name, ev.Message, ev.Count)
}

// testStartupHoldsLiveness: the container creates its marker file only
// after 8 s; its startup probe (failureThreshold 60) checks the file, and so
// does its liveness probe (failureThreshold 1), which would restart it at
// once if it ran before startup passed. The container is not started and
// not ready until then — the pod's ContainersReady turns True no sooner
// than 8 s after the container started (whole seconds: 7 s) and within a
// few probe periods after — is never restarted, and no liveness failure
// is recorded.
func testStartupHoldsLiveness(t *testing.T, n *podNode) {
	pod := n.pod("startup", "sh", "-c", "sleep 8; touch /tmp/started; sleep 3600")
	pod.Spec.Containers[0].StartupProbe = &v1.Probe{
		ProbeHandler:  execAction("cat", "/tmp/started"),
		PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 60,
	}
	pod.Spec.Containers[0].LivenessProbe = &v1.Probe{
		ProbeHandler:  execAction("cat", "/tmp/started"),
		PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1,
	}
	pod = n.createPod(t, pod)
	var sawNotStarted bool
	var containerStart time.Time
	last := waitForPod(t, pod.Namespace, pod.Name, "started and Ready", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		if !ok || cs.State.Running == nil {
			return false
		}
		containerStart = cs.State.Running.StartedAt.Time
		if !ptr.Deref(cs.Started, false) {
			sawNotStarted = true
			if cs.Ready || isPodReady(p) {
				t.Errorf("container ready before its startup probe passed: %s", describePod(t, p))
			}
		}
		return ptr.Deref(cs.Started, false) && cs.Ready && isPodReady(p)
	})
	startedAfter := time.Since(containerStart)
	// When the agent judged the container ready, from the condition it
	// wrote; both times have whole seconds.
	if c := findPodCondition(last, v1.ContainersReady); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("ContainersReady %+v on a ready pod", c)
	} else {
		readyAfter := c.LastTransitionTime.Sub(containerStart)
		if readyAfter < 7*time.Second || readyAfter > 8*time.Second+10*time.Second {
			t.Errorf("ContainersReady turned True %s after the container started, want between 7 s (the marker at 8 s, whole seconds) and 18 s (the marker, a probe period, slack)", readyAfter)
		}
	}
	startupFailed := waitForEventText(t, pod, "Unhealthy", "Startup probe failed: cat: can't open '/tmp/started'")
	// Liveness now runs: a few periods more, and still no restart.
	time.Sleep(5 * time.Second)
	final := waitForPod(t, pod.Namespace, pod.Name, "read", func(*v1.Pod) bool { return true })
	cs, _ := mainStatus(final)
	if cs.RestartCount != 0 {
		t.Errorf("restartCount %d, want 0: liveness ran before startup passed\n%s", cs.RestartCount, describePod(t, final))
	}
	if ev, ok := firstEvent(t, pod, "Unhealthy", "Liveness probe failed"); ok {
		t.Errorf("liveness failed while startup held it off: %q", ev.Message)
	}
	if !sawNotStarted {
		t.Log("never saw the container running but not started (the status was written after the startup probe passed)")
	}
	c, _ := mainStatus(last)
	t.Logf("started=%v ready=%t about %s after the container started (marker at 8 s); Startup probe failed x%d before; restartCount %d",
		ptr.Deref(c.Started, false), c.Ready, startedAfter.Round(time.Second), startupFailed.Count, cs.RestartCount)
}

// testGRPCProbe: pods of the grpc health server on the pod network: a
// readiness grpc probe of a service it serves makes the pod Ready; one of a
// service it does not know keeps it not Ready with the probe's error in an
// Unhealthy event.
func testGRPCProbe(t *testing.T, n *podNode) {
	const port = 8090
	mk := func(name, service string) *v1.Pod {
		pod := n.pod(name)
		c := &pod.Spec.Containers[0]
		c.Image, c.ImagePullPolicy = grpcHealthImage, v1.PullNever
		c.Args = []string{"-port", strconv.Itoa(port), "-serving", "nodekit"}
		c.ReadinessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: port, Service: ptr.To(service)}},
			PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1,
		}
		return n.createPod(t, pod)
	}
	serving, missing := mk("grpc-serving", "nodekit"), mk("grpc-missing", "missing")

	start := time.Now()
	got := waitForPod(t, serving.Namespace, serving.Name, "Ready by its grpc probe", isPodReady)
	took := time.Since(start)
	if ip := net.ParseIP(got.Status.PodIP); ip == nil || ip.IsLoopback() {
		t.Errorf("podIP %q, want an address on the pod network", got.Status.PodIP)
	}
	// The first failures may be timeouts (the server starting, or slow on a
	// loaded machine): wait for the one that carries the server's answer.
	ev := waitForEventText(t, missing, "Unhealthy", "Readiness probe failed: error: health rpc probe failed: rpc error: code = NotFound")
	m := waitForPod(t, missing.Namespace, missing.Name, "running", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return ok && cs.State.Running != nil
	})
	if isPodReady(m) {
		t.Errorf("pod probing a service the server does not serve is Ready\n%s", describePod(t, m))
	}
	t.Logf("grpc-serving Ready %s after creation (podIP %s); grpc-missing: %q", took.Round(100*time.Millisecond), got.Status.PodIP, ev.Message)
}
