package agent_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/status"
)

func TestModuleGraphIsValid(t *testing.T) {
	cfg := agenttest.Config(t, "node-a", "unix:///nonexistent.sock")
	if err := fx.ValidateApp(fx.Supply(cfg), agent.Module); err != nil {
		t.Fatal(err)
	}
}

// TestAgentRegistersReadyNodeAndLease runs the whole default graph against a
// fake clientset and fakecri: the node registers with its labels, turns
// Ready from the runtime's health, and its Lease is created.
func TestAgentRegistersReadyNodeAndLease(t *testing.T) {
	var health *agent.HealthServer
	n := agenttest.Start(t, agenttest.Options{Args: []string{"--node-labels=example.com/role=test"}, Extra: []fx.Option{fx.Populate(&health)}})
	client, cri := n.Client, n.CRI
	ctx := agenttest.Context(t)
	node := n.WaitReady(ctx)
	if node.Labels["example.com/role"] != "test" || node.Labels[v1.LabelHostname] != "node-a" {
		t.Errorf("labels = %v", node.Labels)
	}
	if got := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(got, "fakecri://") {
		t.Errorf("containerRuntimeVersion = %q, want fakecri://…", got)
	}
	if node.Status.NodeInfo.KubeletVersion == "" {
		t.Error("kubeletVersion is empty")
	}
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, "node-a", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("lease kube-node-lease/node-a was not created: %v", err)
	}

	// The runtime goes down: Ready turns False with the runtime's reason.
	cri.SetRuntimeReady(false, "ContainerdDown", "containerd is stopping")
	node = n.WaitForNode(ctx, func(n *v1.Node) bool { return agenttest.NodeCondition(n, v1.NodeReady).Status == v1.ConditionFalse })
	if msg := agenttest.NodeCondition(node, v1.NodeReady).Message; !strings.Contains(msg, "ContainerdDown") {
		t.Errorf("Ready message = %q, want the runtime's reason", msg)
	}

	addr, err := health.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": "kubelet_runtime_operations_total"} {
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
}

// TestAgentRunsAndDeletesAPod runs a pod bound to the node through the
// whole default graph on fakecri: it turns Running and Ready, and a graceful
// deletion stops it and removes the API object.
func TestAgentRunsAndDeletesAPod(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	client, ctx := n.Client, agenttest.Context(t)
	n.WaitReady(ctx)

	podsAPI := client.CoreV1().Pods("default")
	grace := int64(5)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: v1.PodSpec{
			NodeName:                      "node-a",
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []v1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent}},
		},
	}
	if _, err := podsAPI.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *v1.Pod
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := podsAPI.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = p
		return agenttest.PodRunningAndReady(p), nil
	})
	if err != nil {
		t.Fatalf("pod default/web did not turn Running and Ready: %v; last status %+v", err, got.Status)
	}
	if cs := got.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil || !strings.HasPrefix(cs[0].ContainerID, "fakecri://") {
		t.Errorf("container statuses = %+v", cs)
	}
	if got.Status.HostIP != "127.0.0.1" || got.Status.PodIP == "" || got.Status.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("hostIP/podIP/qosClass = %q/%q/%q, want 127.0.0.1, an IP, BestEffort", got.Status.HostIP, got.Status.PodIP, got.Status.QOSClass)
	}

	// A graceful deletion, as the API server records it: the agent stops the
	// pod and deletes the object with grace 0.
	now := metav1.Now()
	got.DeletionTimestamp, got.DeletionGracePeriodSeconds = &now, &grace
	if _, err := podsAPI.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := podsAPI.Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the deleted pod's API object was not removed: %v", err)
	}
}

// TestAgentRejectsAPodThatDoesNotFit: admission fails a pod that requests
// more cpu than the node has, with the kubelet's reason, and never starts it.
func TestAgentRejectsAPodThatDoesNotFit(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	cri, client, ctx := n.CRI, n.Client, agenttest.Context(t)
	n.WaitReady(ctx)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: "default", UID: "uid-huge"},
		Spec: v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{
			Name: "app", Image: "busybox",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1000")}},
		}}},
	}
	podsAPI := client.CoreV1().Pods("default")
	if _, err := podsAPI.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *v1.Pod
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := podsAPI.Get(ctx, "huge", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = p
		return p.Status.Phase == v1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("pod default/huge was not failed: %v; status %+v", err, got.Status)
	}
	if got.Status.Reason != pods.ReasonOutOfCPU || !strings.Contains(got.Status.Message, "Node didn't have enough resource: cpu") {
		t.Errorf("status reason/message = %q/%q, want OutOfcpu", got.Status.Reason, got.Status.Message)
	}
	if n := cri.Calls("RunPodSandbox"); n != 0 {
		t.Errorf("a rejected pod got %d sandboxes", n)
	}
}

// TestAgentStopsPodsNoSourceKnows: a pod left running in the runtime while
// the agent was down, and deleted from the API meanwhile, is stopped and
// removed once the agent's sources have reported.
func TestAgentStopsPodsNoSourceKnows(t *testing.T) {
	_, endpoint := agenttest.StartFakeCRI(t, fakecri.Options{PullAny: true})
	ctx := agenttest.Context(t)

	// Run a pod on the runtime directly, as a previous agent would have.
	rc, err := runtime.New(runtime.Options{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	pm, err := runtime.NewPodManager(runtime.PodManagerOptions{
		Runtime: rc.RuntimeService(), Images: rc.ImageService(), NodeName: "node-a",
		PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir(), PodsDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	orphan := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "default", UID: "uid-gone"},
		Spec:       v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}
	if res := pm.SyncPod(ctx, orphan, nil, runtime.SyncInput{}); res.Err != nil {
		t.Fatalf("start the orphan: %v", res.Err)
	}
	running := func() int {
		pods, err := pm.ListPods(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		return len(pods)
	}
	if running() != 1 {
		t.Fatal("the orphan is not running")
	}

	agenttest.Start(t, agenttest.Options{CRIEndpoint: endpoint})
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return running() == 0, nil
	})
	if err != nil {
		t.Fatalf("the pod no source knows is still running: %v", err)
	}
}

// TestNoCgroupManagerWithoutCgroupsPerQOS: with cgroupsPerQOS false no cgroup
// manager exists (nothing creates cgroups or checks the runtime's cgroup
// driver), with it true one does.
func TestNoCgroupManagerWithoutCgroupsPerQOS(t *testing.T) {
	for _, perQOS := range []bool{false, true} {
		cfg := agenttest.Config(t, "node-a", "unix:///nonexistent.sock", "--cgroups-per-qos="+strconv.FormatBool(perQOS))
		client := fake.NewClientset()
		var m *cgroupdriver.Manager
		app := fx.New(fx.NopLogger, fx.Supply(cfg), agent.Module,
			fx.Replace(&agent.Clients{Client: client, Heartbeat: client}), fx.Populate(&m))
		if err := app.Err(); err != nil {
			t.Fatal(err)
		}
		if (m != nil) != perQOS {
			t.Errorf("cgroupsPerQOS=%t: cgroup manager built: %t", perQOS, m != nil)
		}
	}
}

// TestAgentReplacesAKubeletsDeclaredFeatures: a node taken over from a
// kubelet carries the kubelet's status.declaredFeatures; the agent writes
// its own, so that the scheduler places no pod needing what it does not do
// (RestartAllContainers, pod-level resize, WebSockets to the node).
func TestAgentReplacesAKubeletsDeclaredFeatures(t *testing.T) {
	kubelets := []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling",
		"InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "kubelets-node"},
		Status: v1.NodeStatus{DeclaredFeatures: kubelets}})
	n := agenttest.Start(t, agenttest.Options{Client: client})
	ctx := agenttest.Context(t)
	want := []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}
	node := n.WaitForNode(ctx, func(n *v1.Node) bool { return slices.Equal(n.Status.DeclaredFeatures, want) })
	if node.UID != "kubelets-node" {
		t.Errorf("node UID = %s: the agent re-created the node instead of taking it over", node.UID)
	}
}

// TestNodeRegistersWithTheMainClient: as the kubelet, the agent registers
// its Node with the main client (no request timeout, so that a busy API
// server queues the CREATE instead of answering 429 after a quarter of the
// heartbeat's timeout) and reports its status with the heartbeat client.
func TestNodeRegistersWithTheMainClient(t *testing.T) {
	cfg := agenttest.Config(t, "node-a", "unix:///nonexistent.sock")
	main, heartbeat := fake.NewClientset(), fake.NewClientset()
	var opts status.Options
	app := fx.New(fx.NopLogger, fx.Supply(cfg), agent.Module,
		fx.Replace(&agent.Clients{Client: main, Heartbeat: heartbeat}), fx.Populate(&opts))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if opts.RegisterClient != main || opts.Client != heartbeat {
		t.Errorf("status: registers with %p and reports with %p, want the main client %p and the heartbeat client %p",
			opts.RegisterClient, opts.Client, main, heartbeat)
	}
}
