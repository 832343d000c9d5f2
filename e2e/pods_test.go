package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// podTimeout bounds every wait for a pod to reach a state: generous, it
// bounds a hang and measures nothing.
const podTimeout = 3 * time.Minute

// Labels the agent puts on sandboxes and containers, as the kubelet does
// (crictl reads them for its POD and NAMESPACE columns).
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
)

// podNode is a node agent that runs the pod tests' pods, with a CRI client
// of its runtime (what crictl would show).
type podNode struct {
	*testNode
	// runtimeName is the CRI runtime's name, the scheme of container IDs.
	runtimeName string
	// ns is the namespace the node's test pods live in.
	ns  string
	cri runtimeapi.RuntimeServiceClient
	// containerd is the node's runtime on containerd, nil on fakecri.
	containerd *cluster.Containerd
	// cgroupRoot is the agent's --cgroup-root on containerd.
	cgroupRoot string
}

// podTest is one behaviour checked on a pod node.
type podTest struct {
	name string
	// containerdOnly tests need real containers.
	containerdOnly bool
	run            func(t *testing.T, n *podNode)
}

// podTests are the pod lifecycle tests of issue 4: each runs in parallel
// with the others in a namespace of its node, on containerd and, where the
// behaviour does not depend on the runtime, on fakecri.
var podTests = []podTest{
	{name: "deployment of 3 replicas turns Running and Ready", run: testDeployment},
	{name: "job completes", run: testJob},
	{name: "crash loop backs off", run: testCrashLoopBackOff},
	{name: "delete stops containers within the grace period", run: testDeletePod},
	{name: "labels identify the pod in the runtime", run: testRuntimeLabels},
	{name: "unpullable image backs off", run: testUnpullableImage},
	{name: "pod that does not fit is rejected", run: testRejectedPods},
	{name: "idle pods are not written", run: testIdlePods},
	{name: "limits land in the cgroup files", containerdOnly: true, run: testCgroupLimits},
	{name: "container restart rules", containerdOnly: true, run: testContainerRestartRules},
	{name: "sysctls admitted by the allowlist", run: testSysctls},
	{name: "safe sysctl applied", containerdOnly: true, run: testSafeSysctlApplied},
	{name: "active deadline fails the pod", run: testActiveDeadline},
	{name: "readiness gates set by another writer", run: testReadinessGates},
	{name: "pod spec admission", run: testPodSpecAdmission},
	{name: "hostname override", containerdOnly: true, run: testHostnameOverride},
	{name: "in-place resize", containerdOnly: true, run: testInPlaceResize},
	{name: "in-place resize of pod-level resources", containerdOnly: true, run: testPodLevelResize},
	{name: "container events drive the PLEG", containerdOnly: true, run: testContainerEvents},
}

// TestPodsOnContainerd runs the pod tests and the node status tests that
// need a real runtime on a node agent of its own on a containerd of its own
// (TestNodeOnContainerd stops the shared one, and two agents on one runtime
// would remove each other's pods as orphans), with a cgroup root of its own.
func TestPodsOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	n := newContainerdPodNode(t, "ctr-pods")
	for _, tc := range podTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, n)
		})
	}
	for _, tc := range containerdNodeStatusTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, n)
		})
	}
}

// TestPodsOnFakeCRI runs the runtime-independent pod tests on fakecri: the
// same agent code must behave the same on the fake runtime.
func TestPodsOnFakeCRI(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	n := newFakePodNode(t, "fake-pods", nil)
	for _, tc := range podTests {
		if tc.containerdOnly {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, n)
		})
	}
}

// newContainerdPodNode starts a containerd, a cgroup root and a node agent
// on them (with extraArgs, more agent flags), and waits until the node is
// Ready with a namespace for its pods. Cleanup stops the agent, then

// startNodeContainerd starts a containerd of its own for the test node
// name (under the suite's directory); it is stopped when the test ends.
func startNodeContainerd(t *testing.T, name string) *cluster.Containerd {
	t.Helper()
	return startNodeContainerdSeries(t, name, "")
}

// startNodeContainerdSeries is startNodeContainerd for a containerd
// series (empty: cluster.DefaultContainerdSeries).
func startNodeContainerdSeries(t *testing.T, name string, series cluster.ContainerdSeries) *cluster.Containerd {
	t.Helper()
	src, err := cluster.LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.StartContainerd(t.Context(), cluster.ContainerdOptions{
		Source: src, Series: series, Dir: filepath.Join(env.dir, "containerd-"+name), Log: progress,
	})
	if err != nil {
		t.Fatalf("start containerd for %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("close containerd of %s: %v", name, err)
		}
	})
	return c
}

// dialCRI connects to c's CRI services; the connection is closed when the
// test ends.
func dialCRI(t *testing.T, c *cluster.Containerd) *cluster.CRIClient {
	t.Helper()
	cri, err := c.CRI()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cri.Close() })
	return cri
}

// containerd (removing every sandbox), then removes the cgroup root.
func newContainerdPodNode(t *testing.T, name string, extraArgs ...string) *podNode {
	t.Helper()
	return newContainerdPodNodeWith(t, name, nodeOptions{extraArgs: extraArgs})
}

// newContainerdPodNodeWith is newContainerdPodNode with more agent options
// (opts.runtimeEndpoint is the new containerd's).
func newContainerdPodNodeWith(t *testing.T, name string, opts nodeOptions) *podNode {
	t.Helper()
	ctx := t.Context()
	cgroupRoot := newCgroupRoot(t, name)
	c := startNodeContainerdSeries(t, name, opts.containerdSeries)
	cri := dialCRI(t, c)
	runtimeName, _, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts.runtimeEndpoint = c.Endpoint
	opts.extraArgs = append([]string{"--cgroup-root=" + cgroupRoot}, opts.extraArgs...)
	tn := newNode(t, name, opts)
	n := &podNode{testNode: tn, runtimeName: runtimeName, cri: cri.Runtime, containerd: c, cgroupRoot: cgroupRoot}
	n.ns = newNamespace(t, name)
	waitForNode(t, name, "Ready", readyTimeout, isReady)
	return n
}

// newCgroupRoot creates a cgroup of the test's own in every hierarchy, for
// a containerd node's --cgroup-root (the host's /kubepods belongs to no
// test), and returns its cgroupfs name. Cleanup removes it: call it before
// starting the agent and runtime that use it, so it goes after them.
func newCgroupRoot(t *testing.T, node string) string {
	t.Helper()
	name := fmt.Sprintf("nodekit-e2e-%d-%s", os.Getpid(), node)
	remove, err := cluster.CreateCgroup(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := remove(); err != nil {
			t.Errorf("remove cgroup root %s: %v", name, err)
		}
	})
	return "/" + name
}

// newFakePodNode starts a node agent on its own fakecri, which holds
// BusyboxImage, and waits until the node is Ready with a namespace for its
// pods.
func newFakePodNode(t *testing.T, name string, extraArgs []string) *podNode {
	t.Helper()
	tn := newNode(t, name, nodeOptions{extraArgs: extraArgs})
	img, err := fakecri.NewImage(cluster.BusyboxImage, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	tn.fake.AddImage(img)
	conn, err := grpc.NewClient(tn.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n := &podNode{testNode: tn, runtimeName: fakecri.DefaultRuntimeName, cri: runtimeapi.NewRuntimeServiceClient(conn)}
	n.ns = newNamespace(t, name)
	waitForNode(t, name, "Ready", readyTimeout, isReady)
	return n
}

// newNamespace creates a namespace and waits for its default service
// account, without which the apiserver admits no pod.
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	ctx := t.Context()
	client := env.cp.Client().CoreV1()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client.Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: no default service account: %v", name, err)
	}
	return name
}

// podSpec runs command in BusyboxImage (never pulled: no registry is
// reachable) on the node, placed there by the scheduler. There is no
// service account token volume: the agent does not project one.
func (n *podNode) podSpec(command ...string) v1.PodSpec {
	return v1.PodSpec{
		NodeSelector:                  map[string]string{v1.LabelHostname: n.name},
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		Containers: []v1.Container{{
			Name:            "main",
			Image:           cluster.BusyboxImage,
			ImagePullPolicy: v1.PullIfNotPresent,
			Command:         command,
		}},
	}
}

// pod is a pod named name running command (see podSpec).
func (n *podNode) pod(name string, command ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
		Spec:       n.podSpec(command...),
	}
}

func (n *podNode) createPod(t *testing.T, pod *v1.Pod) *v1.Pod {
	t.Helper()
	created, err := env.cp.Client().CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return created
}

// waitForPod polls a pod until cond holds and returns it; on timeout it
// fails the test with the pod's last status and events.
func waitForPod(t *testing.T, ns, name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		pod, err := env.cp.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = pod
		return cond(pod), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %s: not within %s: %v\n%s", ns, name, what, podTimeout, err, describePod(t, last))
	}
	return last
}

// describePod renders what a failing test needs to know of a pod.
func describePod(t *testing.T, pod *v1.Pod) string {
	if pod == nil {
		return "(pod never read)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s uid=%s node=%q phase=%s reason=%q message=%q podIP=%s", pod.Namespace, pod.Name, pod.UID, pod.Spec.NodeName, pod.Status.Phase, pod.Status.Reason, pod.Status.Message, pod.Status.PodIP)
	for _, c := range pod.Status.Conditions {
		fmt.Fprintf(&b, "\n  condition %s=%s %s", c.Type, c.Status, c.Reason)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		fmt.Fprintf(&b, "\n  container %s ready=%t restarts=%d state=%s last=%s id=%s", cs.Name, cs.Ready, cs.RestartCount, stateString(cs.State), stateString(cs.LastTerminationState), cs.ContainerID)
	}
	for _, ev := range podEvents(t, pod.Namespace, pod.Name) {
		fmt.Fprintf(&b, "\n  event %s %s x%d: %s", ev.Type, ev.Reason, ev.Count, ev.Message)
	}
	return b.String()
}

func stateString(s v1.ContainerState) string {
	switch {
	case s.Waiting != nil:
		return fmt.Sprintf("waiting(%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	case s.Running != nil:
		return "running(since " + s.Running.StartedAt.Format(time.RFC3339) + ")"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%s, exit %d)", s.Terminated.Reason, s.Terminated.ExitCode)
	}
	return "none"
}

// podEvents lists the events recorded about a pod (nil if they cannot be
// read: it is used to explain failures).
func podEvents(t *testing.T, ns, name string) []v1.Event {
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": name}.AsSelector().String()
	list, err := env.cp.Client().CoreV1().Events(ns).List(context.WithoutCancel(t.Context()), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil
	}
	return list.Items
}

// waitForPodEvent waits for an event with reason about a pod and returns it.
func waitForPodEvent(t *testing.T, ns, name, reason string) v1.Event {
	t.Helper()
	var found v1.Event
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		for _, ev := range podEvents(t, ns, name) {
			if ev.Reason == reason {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no %s event: %v", ns, name, reason, err)
	}
	return found
}

func podCondition(pod *v1.Pod, typ v1.PodConditionType) v1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func isPodReady(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodRunning && podCondition(pod, v1.PodReady) == v1.ConditionTrue
}

func mainStatus(pod *v1.Pod) (v1.ContainerStatus, bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "main" {
			return cs, true
		}
	}
	return v1.ContainerStatus{}, false
}

// checkRunningPod checks the status of a running pod of the node as the
// kubelet reports it: conditions, container status, IPs and QoS class.
func (n *podNode) checkRunningPod(t *testing.T, pod *v1.Pod) {
	t.Helper()
	id := pod.Namespace + "/" + pod.Name
	if pod.Spec.NodeName != n.name {
		t.Errorf("pod %s runs on %q, want %q", id, pod.Spec.NodeName, n.name)
	}
	if pod.Status.Phase != v1.PodRunning {
		t.Errorf("pod %s phase %s, want Running", id, pod.Status.Phase)
	}
	for _, typ := range []v1.PodConditionType{v1.PodScheduled, v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady} {
		if got := podCondition(pod, typ); got != v1.ConditionTrue {
			t.Errorf("pod %s condition %s=%q, want True", id, typ, got)
		}
	}
	cs, ok := mainStatus(pod)
	switch {
	case !ok:
		t.Errorf("pod %s has no status of container main", id)
	case cs.State.Running == nil || !cs.Ready || !ptr.Deref(cs.Started, false) || cs.RestartCount != 0:
		t.Errorf("pod %s container main: state %s ready %t started %v restarts %d, want running, ready, started, 0 restarts", id, stateString(cs.State), cs.Ready, cs.Started, cs.RestartCount)
	case !strings.HasPrefix(cs.ContainerID, n.runtimeName+"://") || cs.ImageID == "" || cs.Image == "":
		t.Errorf("pod %s container main: containerID %q image %q imageID %q, want a %s:// ID and the image", id, cs.ContainerID, cs.Image, cs.ImageID, n.runtimeName)
	}
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil {
		t.Errorf("pod %s has no pod IP (%q)", id, pod.Status.PodIP)
	} else if n.containerd != nil {
		if _, subnet, err := net.ParseCIDR(n.containerd.PodSubnet); err != nil || !subnet.Contains(ip) {
			t.Errorf("pod %s IP %s is not in the pod network %s", id, ip, n.containerd.PodSubnet)
		}
	}
	if pod.Status.HostIP != n.agent.IP {
		t.Errorf("pod %s hostIP %q, want the node's %s", id, pod.Status.HostIP, n.agent.IP)
	}
	if pod.Status.StartTime == nil {
		t.Errorf("pod %s has no startTime", id)
	}
	if want := qosOf(pod); pod.Status.QOSClass != want {
		t.Errorf("pod %s qosClass %q, want %q", id, pod.Status.QOSClass, want)
	}
}

// qosOf classifies the single-container pods of these tests.
func qosOf(pod *v1.Pod) v1.PodQOSClass {
	r := pod.Spec.Containers[0].Resources
	switch {
	case len(r.Requests) == 0 && len(r.Limits) == 0:
		return v1.PodQOSBestEffort
	case len(r.Limits) == 2 && r.Limits.Cpu().Equal(*r.Requests.Cpu()) && r.Limits.Memory().Equal(*r.Requests.Memory()):
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

// testDeployment: kube-scheduler places a Deployment's three replicas on
// the node, they turn Running and Ready, and `kubectl rollout status` sees
// the rollout finish.
func testDeployment(t *testing.T, n *podNode) {
	ctx := t.Context()
	const name = "web"
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       n.podSpec("sleep", "3600"),
			},
		},
	}
	if _, err := env.cp.Client().AppsV1().Deployments(n.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := env.cp.Kubectl(ctx, env.cp.AdminKubeconfig, "rollout", "status", "--namespace", n.ns, "deployment/"+name, "--timeout="+podTimeout.String())
	pods, listErr := env.cp.Client().CoreV1().Pods(n.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if listErr != nil {
		t.Fatal(listErr)
	}
	if err != nil {
		var b strings.Builder
		for i := range pods.Items {
			b.WriteString("\n" + describePod(t, &pods.Items[i]))
		}
		t.Fatalf("kubectl rollout status: %v%s", err, b.String())
	}
	t.Logf("kubectl rollout status: %s", strings.TrimSpace(out))

	got, err := env.cp.Client().AppsV1().Deployments(n.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Status; s.ReadyReplicas != 3 || s.AvailableReplicas != 3 || s.UpdatedReplicas != 3 {
		t.Errorf("deployment status: ready %d available %d updated %d, want 3 each", s.ReadyReplicas, s.AvailableReplicas, s.UpdatedReplicas)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("%d pods of the deployment, want 3", len(pods.Items))
	}
	ips := map[string]bool{}
	for i := range pods.Items {
		n.checkRunningPod(t, &pods.Items[i])
		ips[pods.Items[i].Status.PodIP] = true
	}
	if len(ips) != 3 {
		t.Errorf("the 3 replicas have pod IPs %v, want 3 distinct", ips)
	}
	for _, reason := range []string{"Scheduled", "Pulled", "Created", "Started"} {
		waitForPodEvent(t, n.ns, pods.Items[0].Name, reason)
	}
	// The runtime calls behind them, counted as the kubelet counts them.
	for _, op := range []string{"run_podsandbox", "create_container", "start_container"} {
		n.requireRuntimeOperations(t, "kubelet_runtime_operations_total", op, 3)
	}
}

// requireRuntimeOperations checks that the agent's metric (by
// operation_type) counted at least min operations op.
func (n *podNode) requireRuntimeOperations(t *testing.T, metric, op string, min float64) {
	t.Helper()
	m, err := n.agent.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum(metric, map[string]string{"operation_type": op}); got < min {
		t.Errorf("%s{operation_type=%q} = %v, want at least %v", metric, op, got, min)
	}
}

// testJob: a Job's pod runs to completion, exit 0: the pod Succeeded and the
// Job Complete.
func testJob(t *testing.T, n *podNode) {
	ctx := t.Context()
	const name = "once"
	spec := n.podSpec("sh", "-c", "echo done; exit 0")
	spec.RestartPolicy = v1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template:     v1.PodTemplateSpec{Spec: spec},
		},
	}
	if _, err := env.cp.Client().BatchV1().Jobs(n.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *batchv1.Job
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		j, err := env.cp.Client().BatchV1().Jobs(n.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = j
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == v1.ConditionTrue {
				return false, fmt.Errorf("job failed: %s: %s", c.Reason, c.Message)
			}
			if c.Type == batchv1.JobComplete && c.Status == v1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	pods, listErr := env.cp.Client().CoreV1().Pods(n.ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + name})
	if listErr != nil {
		t.Fatal(listErr)
	}
	if err != nil {
		var b strings.Builder
		for i := range pods.Items {
			b.WriteString("\n" + describePod(t, &pods.Items[i]))
		}
		t.Fatalf("job %s/%s not Complete: %v; status %+v%s", n.ns, name, err, last.Status, b.String())
	}
	if last.Status.Succeeded != 1 || last.Status.Failed != 0 {
		t.Errorf("job status: succeeded %d failed %d, want 1 and 0", last.Status.Succeeded, last.Status.Failed)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d pods of the job, want 1", len(pods.Items))
	}
	pod := &pods.Items[0]
	if pod.Status.Phase != v1.PodSucceeded {
		t.Errorf("job pod phase %s, want Succeeded\n%s", pod.Status.Phase, describePod(t, pod))
	}
	cs, ok := mainStatus(pod)
	if !ok || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || cs.State.Terminated.Reason != "Completed" {
		t.Errorf("job container: %s, want terminated Completed with exit code 0", stateString(cs.State))
	}
	if pod.Spec.NodeName != n.name {
		t.Errorf("job pod ran on %q, want %q", pod.Spec.NodeName, n.name)
	}
}

// testCrashLoopBackOff: a container that exits 1 under restartPolicy Always
// is restarted at once, then after 10 s, then after 20 s, waiting in
// CrashLoopBackOff in between with its last exit in lastState.
func testCrashLoopBackOff(t *testing.T, n *podNode) {
	pod := n.createPod(t, n.pod("crash", "sh", "-c", "exit 1"))
	// finished[i] and started[i] are the times of container instance i, as
	// lastState reports them.
	started, finished := map[int32]time.Time{}, map[int32]time.Time{}
	var messages []string
	last := waitForPod(t, pod.Namespace, pod.Name, "restartCount 3 in CrashLoopBackOff", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		if !ok {
			return false
		}
		if term := cs.LastTerminationState.Terminated; term != nil && cs.RestartCount > 0 {
			started[cs.RestartCount-1], finished[cs.RestartCount-1] = term.StartedAt.Time, term.FinishedAt.Time
		}
		w := cs.State.Waiting
		if w != nil && w.Reason == "CrashLoopBackOff" && (len(messages) == 0 || messages[len(messages)-1] != w.Message) {
			messages = append(messages, w.Message)
		}
		return cs.RestartCount >= 3 && w != nil && w.Reason == "CrashLoopBackOff"
	})
	cs, _ := mainStatus(last)
	if term := cs.LastTerminationState.Terminated; term == nil || term.ExitCode != 1 || term.Reason != "Error" {
		t.Errorf("lastState %s, want terminated with reason Error and exit code 1", stateString(cs.LastTerminationState))
	}
	if last.Status.Phase != v1.PodRunning {
		// The kubelet keeps a restarting pod Running.
		t.Errorf("phase %s, want Running while the container restarts", last.Status.Phase)
	}
	if podCondition(last, v1.PodReady) != v1.ConditionFalse {
		t.Errorf("Ready=%s, want False while the container crash-loops", podCondition(last, v1.PodReady))
	}
	// The back-off doubles from 10 s: the waiting messages say so, in order.
	want := []string{"back-off 10s restarting failed container=main", "back-off 20s restarting failed container=main"}
	i := 0
	for _, m := range messages {
		if i < len(want) && strings.HasPrefix(m, want[i]) {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("CrashLoopBackOff messages %q, want %q in order", messages, want)
	}
	// Instance 2 started no earlier than 20 s (second granularity) after
	// instance 1 finished.
	if f, s := finished[1], started[2]; !f.IsZero() && !s.IsZero() {
		if gap := s.Sub(f); gap < 19*time.Second {
			t.Errorf("the third start came %s after the second exit, want at least the 20s back-off", gap)
		}
	} else {
		t.Errorf("never saw instances 1 and 2 in lastState (finished %v, started %v)", finished, started)
	}
	// kubectl get pods shows the same: STATUS CrashLoopBackOff, RESTARTS.
	out, err := env.cp.Kubectl(t.Context(), env.cp.AdminKubeconfig, "get", "pod", "--namespace", pod.Namespace, pod.Name, "--no-headers")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(out); len(f) < 4 || f[1] != "0/1" || f[2] != "CrashLoopBackOff" {
		t.Errorf("kubectl get pod: %q, want READY 0/1 and STATUS CrashLoopBackOff", strings.TrimSpace(out))
	} else if restarts, err := strconv.Atoi(f[3]); err != nil || restarts < 3 {
		t.Errorf("kubectl get pod: %q, want at least 3 RESTARTS", strings.TrimSpace(out))
	}
	ev := waitForPodEvent(t, pod.Namespace, pod.Name, "BackOff")
	if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, "Back-off restarting failed container main") {
		t.Errorf("BackOff event %s %q, want a warning about restarting container main", ev.Type, ev.Message)
	}
}

// testDeletePod: `kubectl delete pod` waits for the object to go. A
// container that handles SIGTERM stops well within its 30 s grace period; one
// that ignores it is killed once its 3 s grace period is over. Either way no
// container runs once the object is gone, and the runtime then forgets the
// pod.
func testDeletePod(t *testing.T, n *podNode) {
	cases := []struct {
		name    string
		grace   int64
		command []string
		// behavior scripts the container on fakecri (containerd runs the
		// command).
		behavior string
		// wantExit is the exit code the final status reports.
		wantExit int32
	}{
		// sh as PID 1 runs the trap; on fakecri a container exits 143 on
		// SIGTERM.
		{name: "graceful", grace: 30, command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}, wantExit: 0},
		// PID 1 without a SIGTERM handler never sees the signal.
		{name: "stubborn", grace: 3, command: []string{"sleep", "3600"}, behavior: "ignore-sigterm", wantExit: 137},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pod := n.pod("delete-"+tc.name, tc.command...)
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(tc.grace)
			if tc.behavior != "" {
				pod.Annotations = map[string]string{fakecri.BehaviorAnnotation: tc.behavior}
			}
			wantExit := tc.wantExit
			if n.containerd == nil && tc.behavior == "" {
				wantExit = 143
			}
			pod = n.createPod(t, pod)
			pod = waitForPod(t, pod.Namespace, pod.Name, "Running and Ready", isPodReady)
			if cs, _ := mainStatus(pod); cs.State.Running == nil {
				t.Fatalf("container main is %s, want running", stateString(cs.State))
			}
			w, err := env.cp.Client().CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
				FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
				ResourceVersion: pod.ResourceVersion,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()

			start := time.Now()
			out, err := env.cp.Kubectl(ctx, env.cp.AdminKubeconfig, "delete", "pod", "--namespace", pod.Namespace, pod.Name, "--wait=true", "--timeout="+podTimeout.String())
			elapsed := time.Since(start)
			if err != nil {
				t.Fatalf("kubectl delete pod: %v\n%s", err, describePod(t, pod))
			}
			t.Logf("kubectl delete pod %s (grace %ds) returned after %s: %s", pod.Name, tc.grace, elapsed.Round(100*time.Millisecond), strings.TrimSpace(out))
			if running := n.criContainers(t, pod.UID, true); len(running) > 0 {
				t.Errorf("containers still running after the pod object is gone: %v", running)
			}

			// The object's last state: every container terminated, with
			// the exit code of a graceful stop or a kill.
			var final *v1.Pod
			timeout := time.After(time.Minute)
			for final == nil {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Fatal("the pod watch closed before the pod was deleted")
					}
					if p, isPod := ev.Object.(*v1.Pod); isPod && ev.Type == watch.Deleted {
						final = p
					}
				case <-timeout:
					t.Fatal("the pod watch delivered no deletion")
				}
			}
			cs, ok := mainStatus(final)
			if !ok || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != wantExit {
				t.Errorf("final container state %s, want terminated with exit code %d", stateString(cs.State), wantExit)
			}
			if ev := waitForPodEvent(t, pod.Namespace, pod.Name, "Killing"); !strings.Contains(ev.Message, "Stopping container main") {
				t.Errorf("Killing event %q, want it to name container main", ev.Message)
			}
			grace := time.Duration(tc.grace) * time.Second
			if tc.wantExit == 137 && elapsed < grace-time.Second {
				t.Errorf("the pod was gone %s after the delete: killed before its %s grace period ended", elapsed, grace)
			}
			if tc.wantExit != 137 && elapsed >= grace {
				t.Errorf("the pod was gone only %s after the delete: not stopped within its %s grace period", elapsed, grace)
			}

			n.requireRuntimeOperations(t, "kubelet_runtime_operations_total", "stop_container", 1)

			// Then the runtime forgets it: no container, no sandbox.
			err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				return len(n.criContainers(t, pod.UID, false)) == 0 && len(n.criSandboxes(t, pod.UID)) == 0, nil
			})
			if err != nil {
				t.Errorf("the runtime still holds the deleted pod: containers %v, sandboxes %v", n.criContainers(t, pod.UID, false), n.criSandboxes(t, pod.UID))
			}
		})
	}
}

// criContainers lists the runtime's containers of pod uid (only running
// ones if running), as `crictl ps [-a] --label io.kubernetes.pod.uid=<uid>`.
func (n *podNode) criContainers(t *testing.T, uid types.UID, running bool) []*runtimeapi.Container {
	t.Helper()
	filter := &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelPodUID: string(uid)}}
	if running {
		filter.State = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	resp, err := n.cri.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		t.Fatalf("CRI ListContainers of %s: %v", n.name, err)
	}
	return resp.Containers
}

// criSandboxes lists the runtime's sandboxes of pod uid, as `crictl pods
// --label io.kubernetes.pod.uid=<uid>`.
func (n *podNode) criSandboxes(t *testing.T, uid types.UID) []*runtimeapi.PodSandbox {
	t.Helper()
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: string(uid)}}
	resp, err := n.cri.ListPodSandbox(t.Context(), &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		t.Fatalf("CRI ListPodSandbox of %s: %v", n.name, err)
	}
	return resp.Items
}

// testRuntimeLabels: what `crictl ps` and `crictl pods` show of a pod: the
// container and its sandbox carry the pod's name, namespace and UID and the
// container's name, the container its restart count and spec hash, and its
// log is where the kubelet puts it, linked where log shippers read it.
func testRuntimeLabels(t *testing.T, n *podNode) {
	ctx := t.Context()
	const greeting = "hello from nodekit"
	pod := n.pod("labelled", "sh", "-c", "echo "+greeting+"; sleep 3600")
	pod.Labels = map[string]string{"app": "labelled"}
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Running and Ready", isPodReady)
	n.checkRunningPod(t, pod)

	containers := n.criContainers(t, pod.UID, true)
	if len(containers) != 1 {
		t.Fatalf("%d running containers labelled with the pod's UID, want 1: %v", len(containers), containers)
	}
	c := containers[0]
	wantLabels := map[string]string{labelPodName: pod.Name, labelPodNamespace: pod.Namespace, labelPodUID: string(pod.UID), labelContainerName: "main"}
	for k, v := range wantLabels {
		if c.Labels[k] != v {
			t.Errorf("container label %s=%q, want %q", k, c.Labels[k], v)
		}
	}
	if c.Metadata.GetName() != "main" || c.Metadata.GetAttempt() != 0 {
		t.Errorf("container metadata %v, want name main, attempt 0", c.Metadata)
	}
	if cs, _ := mainStatus(pod); cs.ContainerID != n.runtimeName+"://"+c.Id {
		t.Errorf("the pod reports container %q, the runtime runs %q", cs.ContainerID, c.Id)
	}
	if c.Annotations["io.kubernetes.container.restartCount"] != "0" || c.Annotations["io.kubernetes.container.hash"] == "" {
		t.Errorf("container annotations %v, want restartCount 0 and a hash", c.Annotations)
	}

	sandboxes := n.criSandboxes(t, pod.UID)
	if len(sandboxes) != 1 {
		t.Fatalf("%d sandboxes labelled with the pod's UID, want 1", len(sandboxes))
	}
	sb := sandboxes[0]
	if md := sb.Metadata; md.GetName() != pod.Name || md.GetNamespace() != pod.Namespace || md.GetUid() != string(pod.UID) {
		t.Errorf("sandbox metadata %v, want the pod's name, namespace and UID", md)
	}
	for k, v := range map[string]string{labelPodName: pod.Name, labelPodNamespace: pod.Namespace, labelPodUID: string(pod.UID), "app": "labelled"} {
		if sb.Labels[k] != v {
			t.Errorf("sandbox label %s=%q, want %q", k, sb.Labels[k], v)
		}
	}
	if sb.Id != c.PodSandboxId {
		t.Errorf("the container is in sandbox %s, the pod's sandbox is %s", c.PodSandboxId, sb.Id)
	}
	if n.containerd != nil {
		// What an operator sees: crictl finds the pod by its UID label.
		out, err := n.containerd.Crictl(ctx, "pods", "--label", labelPodUID+"="+string(pod.UID), "-q")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(string(out)); len(got) != 1 || got[0] != sb.Id {
			t.Errorf("crictl pods --label %s=%s -q lists %q, want the pod's sandbox %s", labelPodUID, pod.UID, got, sb.Id)
		}
	}

	// The log: <podLogsDir>/<ns>_<name>_<uid>/<container>/<restart>.log.
	status, err := n.cri.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
	if err != nil {
		t.Fatal(err)
	}
	wantLog := filepath.Join(n.agent.Dir, "pod-logs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), "main", "0.log")
	if got := status.Status.GetLogPath(); got != wantLog {
		t.Errorf("container log path %q, want %q", got, wantLog)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(wantLog)
		return err == nil && strings.Contains(string(data), greeting), nil
	})
	if err != nil {
		data, readErr := os.ReadFile(wantLog)
		t.Errorf("container log %s does not hold %q: %q %v", wantLog, greeting, data, readErr)
	}
	// The link log shippers read, the kubelet's
	// /var/log/containers/<pod>_<ns>_<container>-<id>.log (made once the
	// container started: the pod is Ready).
	link := filepath.Join(n.agent.Dir, "container-logs", fmt.Sprintf("%s_%s_main-%s.log", pod.Name, pod.Namespace, c.Id))
	if target, err := os.Readlink(link); err != nil || target != wantLog {
		t.Errorf("container log link %s points to %q (%v), want %q", link, target, err, wantLog)
	}
	if data, err := os.ReadFile(link); err != nil || !strings.Contains(string(data), greeting) {
		t.Errorf("container log link %s does not read the container's output %q: %q %v", link, greeting, data, err)
	}
}

// testUnpullableImage: an image no registry serves fails to pull
// (ErrImagePull, a Failed event), then the agent backs off
// (ImagePullBackOff, a BackOff event).
func testUnpullableImage(t *testing.T, n *podNode) {
	// Port 1 of loopback refuses connections at once: the pull fails fast,
	// and nothing leaves the machine.
	pod := n.pod("unpullable", "sleep", "3600")
	pod.Spec.Containers[0].Image = "127.0.0.1:1/nodekit-e2e/missing:1.0"
	pod = n.createPod(t, pod)
	var reasons []string
	waitForPod(t, pod.Namespace, pod.Name, "ErrImagePull then ImagePullBackOff", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		if !ok || cs.State.Waiting == nil {
			return false
		}
		if r := cs.State.Waiting.Reason; len(reasons) == 0 || reasons[len(reasons)-1] != r {
			reasons = append(reasons, r)
		}
		i := slices.Index(reasons, "ErrImagePull")
		return i >= 0 && slices.Contains(reasons[i:], "ImagePullBackOff")
	})
	for _, r := range reasons {
		if r != "ErrImagePull" && r != "ImagePullBackOff" && r != "ContainerCreating" {
			t.Errorf("waiting reasons %q: unexpected %q", reasons, r)
		}
	}
	if ev := waitForPodEvent(t, pod.Namespace, pod.Name, "Failed"); ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, "Failed to pull image") {
		t.Errorf("Failed event %s %q, want a warning that the image failed to pull", ev.Type, ev.Message)
	}
	if ev := waitForPodEvent(t, pod.Namespace, pod.Name, "BackOff"); !strings.Contains(ev.Message, "Back-off pulling image") {
		t.Errorf("BackOff event %q, want back-off pulling image", ev.Message)
	}
	if got := n.criContainers(t, pod.UID, false); len(got) != 0 {
		t.Errorf("containers created without their image: %v", got)
	}
	n.requireRuntimeOperations(t, "kubelet_runtime_operations_errors_total", "pull_image", 1)
}

// testRejectedPods: pods bound to the node (no scheduler) that ask for more
// CPU or memory than it has are rejected by the agent's admission: phase
// Failed with reason OutOfcpu or OutOfmemory and a warning event, and never
// started.
func testRejectedPods(t *testing.T, n *podNode) {
	for _, tc := range []struct {
		resource v1.ResourceName
		request  string
	}{
		{v1.ResourceCPU, "1000"},
		{v1.ResourceMemory, "100Ti"},
	} {
		t.Run(string(tc.resource), func(t *testing.T) {
			t.Parallel()
			pod := n.pod("too-much-"+string(tc.resource), "sleep", "3600")
			pod.Spec.NodeSelector = nil
			pod.Spec.NodeName = n.name
			pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{tc.resource: resource.MustParse(tc.request)}
			pod = n.createPod(t, pod)
			reason := "OutOf" + string(tc.resource)
			pod = waitForPod(t, pod.Namespace, pod.Name, "Failed by admission", func(p *v1.Pod) bool {
				return p.Status.Phase == v1.PodFailed
			})
			if pod.Status.Reason != reason || !strings.HasPrefix(pod.Status.Message, "Pod was rejected: ") || !strings.Contains(pod.Status.Message, string(tc.resource)) {
				t.Errorf("status reason %q message %q, want %s and a rejection naming %s", pod.Status.Reason, pod.Status.Message, reason, tc.resource)
			}
			if ev := waitForPodEvent(t, pod.Namespace, pod.Name, reason); ev.Type != v1.EventTypeWarning {
				t.Errorf("%s event of type %s, want Warning", reason, ev.Type)
			}
			if got := n.criSandboxes(t, pod.UID); len(got) != 0 {
				t.Errorf("a rejected pod got sandboxes: %v", got)
			}
		})
	}
}

// testCgroupLimits: on containerd the pods sit in the kubelet's QoS
// hierarchy under the node's cgroup root: Guaranteed pods in
// kubepods/pod<uid>, Burstable in kubepods/burstable/pod<uid>, BestEffort in
// kubepods/besteffort/pod<uid>, and each container's cgroup below its pod's
// holds its process and the CPU and memory limits of its spec (cgroup v1:
// cpu.shares, cpu.cfs_quota_us, memory.limit_in_bytes, and with the swap
// controller memory.memsw.limit_in_bytes, NoSwap). A deleted pod's
// cgroup goes with it.
func testCgroupLimits(t *testing.T, n *podNode) {
	type limits struct{ cpuReq, cpuLim, memReq, memLim string }
	for _, tc := range []struct {
		name   string
		qos    v1.PodQOSClass
		parent string // below <cgroupRoot>/kubepods
		res    limits
		// Values in the pod's and the container's cgroups ("" not checked).
		shares, quota, memory string
	}{
		{name: "guaranteed", qos: v1.PodQOSGuaranteed, res: limits{"250m", "250m", "48Mi", "48Mi"}, shares: "256", quota: "25000", memory: "50331648"},
		{name: "burstable", qos: v1.PodQOSBurstable, parent: "burstable", res: limits{"100m", "500m", "32Mi", "64Mi"}, shares: "102", quota: "50000", memory: "67108864"},
		{name: "besteffort", qos: v1.PodQOSBestEffort, parent: "besteffort", shares: "2", quota: "-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pod := n.pod("cgroup-"+tc.name, "sleep", "3600")
			rl := func(cpu, mem string) v1.ResourceList {
				if cpu == "" {
					return nil
				}
				return v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
			}
			pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: rl(tc.res.cpuReq, tc.res.memReq), Limits: rl(tc.res.cpuLim, tc.res.memLim)}
			pod = n.createPod(t, pod)
			pod = waitForPod(t, pod.Namespace, pod.Name, "Running and Ready", isPodReady)
			if pod.Status.QOSClass != tc.qos {
				t.Errorf("qosClass %s, want %s", pod.Status.QOSClass, tc.qos)
			}
			podCgroup := filepath.Join(n.cgroupRoot, "kubepods", tc.parent, "pod"+string(pod.UID))

			// The container's cgroup, from the OCI spec containerd ran it
			// with (crictl inspect shows the same).
			cs, _ := mainStatus(pod)
			id := strings.TrimPrefix(cs.ContainerID, n.runtimeName+"://")
			status, err := n.cri.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
			if err != nil {
				t.Fatal(err)
			}
			cgroupsPath, err := ociCgroupsPath(status.Info["info"])
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Dir(cgroupsPath) != podCgroup {
				t.Fatalf("container cgroup %s, want one below %s", cgroupsPath, podCgroup)
			}
			if procs := readCgroupFile(t, "pids", cgroupsPath, "cgroup.procs"); procs == "" {
				t.Errorf("no process in the container's cgroup %s", cgroupsPath)
			}
			for _, cg := range []string{podCgroup, cgroupsPath} {
				checkCgroupFile(t, "cpu", cg, "cpu.shares", tc.shares)
				checkCgroupFile(t, "cpu", cg, "cpu.cfs_quota_us", tc.quota)
				if tc.memory != "" {
					checkCgroupFile(t, "memory", cg, "memory.limit_in_bytes", tc.memory)
				}
			}
			// NoSwap, the default, on cgroup v1 with the swap controller
			// (the memsw files): memory+swap no more than memory.
			if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil && tc.memory != "" {
				checkCgroupFile(t, "memory", cgroupsPath, "memory.memsw.limit_in_bytes", tc.memory)
			}
			if tc.quota != "-1" {
				checkCgroupFile(t, "cpu", podCgroup, "cpu.cfs_period_us", "100000")
			}

			if err := env.cp.Client().CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("/sys/fs/cgroup/memory", podCgroup)
			err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
				_, err := os.Stat(dir)
				return errors.Is(err, os.ErrNotExist), nil
			})
			if err != nil {
				t.Errorf("the deleted pod's cgroup %s is still there", dir)
			}
		})
	}
	// The QoS cgroups themselves: BestEffort gets the minimum shares.
	checkCgroupFile(t, "cpu", filepath.Join(n.cgroupRoot, "kubepods", "besteffort"), "cpu.shares", "2")
}

// readCgroupFile reads a cgroup v1 control file of controller.
func readCgroupFile(t *testing.T, controller, cgroup, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, cgroup, file))
	if err != nil {
		t.Fatalf("read cgroup file: %v", err)
	}
	return strings.TrimSpace(string(data))
}

func checkCgroupFile(t *testing.T, controller, cgroup, file, want string) {
	t.Helper()
	if got := readCgroupFile(t, controller, cgroup, file); got != want {
		t.Errorf("%s of %s = %s, want %s", file, cgroup, got, want)
	}
}

// Idle pods: how many, how long they are watched, and the resync period
// of the node TestPodStatusPatchedOnlyOnChange runs them on.
const (
	idlePods   = 3
	idleWindow = 20 * time.Second
	idleResync = 4 * time.Second
)

// startIdlePods runs idlePods pods that do nothing, labelled with a label
// of their own, and waits until they are Ready and their objects stop
// changing (the last status patch landed). It returns the label selector.
func startIdlePods(t *testing.T, n *podNode, prefix string) string {
	t.Helper()
	ctx := t.Context()
	selector := "e2e.nodekit.io/idle=" + prefix
	for i := range idlePods {
		pod := n.pod(fmt.Sprintf("%s-%d", prefix, i), "sleep", "3600")
		pod.Labels = map[string]string{"e2e.nodekit.io/idle": prefix}
		n.createPod(t, pod)
	}
	for i := range idlePods {
		waitForPod(t, n.ns, fmt.Sprintf("%s-%d", prefix, i), "Running and Ready", isPodReady)
	}
	// Settled: the list's resourceVersions did not move for 3 s.
	var last string
	err := wait.PollUntilContextTimeout(ctx, 3*time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := env.cp.Client().CoreV1().Pods(n.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		var versions []string
		for _, p := range pods.Items {
			versions = append(versions, p.Name+"="+p.ResourceVersion)
		}
		slices.Sort(versions)
		cur := strings.Join(versions, ",")
		done := cur == last
		last = cur
		return done, nil
	})
	if err != nil {
		t.Fatalf("the idle pods' objects kept changing: %v", err)
	}
	return selector
}

// watchIdlePods watches the pods matching selector for idleWindow and
// fails the test for every modification it sees.
func watchIdlePods(t *testing.T, ns, selector string) {
	t.Helper()
	ctx := t.Context()
	pods, err := env.cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	w, err := env.cp.Client().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: pods.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	window := time.After(idleWindow)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the pod watch closed early")
			}
			if p, isPod := ev.Object.(*v1.Pod); isPod {
				t.Errorf("idle pod %s/%s %s during the idle window:\n%s", p.Namespace, p.Name, ev.Type, describePod(t, p))
			}
		case <-window:
			return
		}
	}
}

// testIdlePods: pods that run and do nothing are not written: a watch of
// them sees no modification for idleWindow while the agent's PLEG keeps
// the runtime's state fresh every second (a relist, or with the runtime's
// event stream a fresh mark: kubelet_pleg_last_seen_seconds moves either
// way).
func testIdlePods(t *testing.T, n *podNode) {
	selector := startIdlePods(t, n, "idle")
	before := plegLastSeen(t, n)
	watchIdlePods(t, n.ns, selector)
	if after := plegLastSeen(t, n); after <= before {
		t.Errorf("the PLEG was not active during the window (last seen %v then %v): the window proves nothing", before, after)
	}
}

// TestPodStatusPatchedOnlyOnChange runs idle pods on a node of their own
// with a short resync period (--sync-frequency) and counts the agent's pod
// status PATCHes over an idle window: none, by its metrics and by a watch
// of the pods, although the agent keeps resyncing them.
func TestPodStatusPatchedOnlyOnChange(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	n := newFakePodNode(t, "idle-pods", []string{"--sync-frequency=" + idleResync.String()})
	selector := startIdlePods(t, n, "idle")
	const metric = "nodekit_pod_status_patches_total"
	scrape := func() (patched, syncs float64) {
		t.Helper()
		m, err := n.agent.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum(metric, map[string]string{"result": "patched"}), histogramCount(m, "kubelet_pod_worker_duration_seconds")
	}
	beforePatched, beforeSyncs := scrape()
	if beforePatched == 0 {
		t.Fatalf("%s{result=\"patched\"} is 0 with %d pods running", metric, idlePods)
	}
	watchIdlePods(t, n.ns, selector)
	afterPatched, afterSyncs := scrape()
	if afterPatched != beforePatched {
		t.Errorf("%v pod status PATCHes while %d pods idled for %s", afterPatched-beforePatched, idlePods, idleWindow)
	}
	// The agent was not idle: it resynced every pod (one pod worker sync
	// each, kubelet_pod_worker_duration_seconds). Resyncs are jittered by
	// up to half the period, as the kubelet's.
	if min := float64(idlePods) * float64(idleWindow/(idleResync*3/2)-1); afterSyncs-beforeSyncs < min {
		t.Errorf("%v pod worker syncs in the window, want at least %v (a resync of %d pods every %s to %s)", afterSyncs-beforeSyncs, min, idlePods, idleResync, idleResync*3/2)
	}
	t.Logf("idle window %s: %v pod status PATCHes, %v pod worker syncs", idleWindow, afterPatched-beforePatched, afterSyncs-beforeSyncs)
}

// plegLastSeen returns when the node's PLEG last refreshed its view of the
// runtime (kubelet_pleg_last_seen_seconds, Unix seconds).
func plegLastSeen(t *testing.T, n *podNode) float64 {
	t.Helper()
	m, err := n.agent.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f, ok := m["kubelet_pleg_last_seen_seconds"]
	if !ok || len(f.GetMetric()) != 1 {
		t.Fatal("the agent exports no kubelet_pleg_last_seen_seconds")
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

func histogramCount(m cluster.Metrics, name string) float64 {
	var n float64
	for _, metric := range m[name].GetMetric() {
		n += float64(metric.GetHistogram().GetSampleCount())
	}
	return n
}

// ociCgroupsPath returns linux.cgroupsPath of the OCI runtime spec in a
// containerd container's verbose CRI status ("info").
func ociCgroupsPath(info string) (string, error) {
	var v struct {
		RuntimeSpec specs.Spec `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(info), &v); err != nil {
		return "", fmt.Errorf("decode the container's verbose status: %w", err)
	}
	if v.RuntimeSpec.Linux == nil || v.RuntimeSpec.Linux.CgroupsPath == "" {
		return "", fmt.Errorf("no runtimeSpec.linux.cgroupsPath in the container's verbose status: %.500s", info)
	}
	return v.RuntimeSpec.Linux.CgroupsPath, nil
}
