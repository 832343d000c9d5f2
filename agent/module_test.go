package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// testConfig returns a complete Config for node "node-a" on the fakecri
// listening at endpoint, with the healthz server on a free loopback port.
func testConfig(t *testing.T, endpoint string) *Config {
	t.Helper()
	cfg, err := ParseFlags(klog.Background(), []string{
		"--hostname-override=node-a",
		"--node-ip=127.0.0.1",
		"--container-runtime-endpoint=" + endpoint,
		"--healthz-port=" + freePort(t),
		// A root directory that does not exist yet: the agent makes it.
		"--root-dir=" + filepath.Join(t.TempDir(), "state"),
		"--node-labels=example.com/role=test",
		// Unit tests leave the host's cgroups alone.
		"--cgroups-per-qos=false",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kubelet.PodLogsDir = filepath.Join(t.TempDir(), "logs")
	return cfg
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func startFakeCRI(t *testing.T) (*fakecri.Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "nk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, PullAny: true})
	endpoint, stop, err := srv.Start(filepath.Join(dir, "cri.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return srv, endpoint
}

func TestModuleGraphIsValid(t *testing.T) {
	_, endpoint := startFakeCRI(t)
	cfg := testConfig(t, endpoint)
	if err := fx.ValidateApp(fx.Supply(cfg), Module); err != nil {
		t.Fatal(err)
	}
}

// TestAgentRegistersReadyNodeAndLease runs the whole default graph against a
// fake clientset and fakecri: the node registers with its labels, turns
// Ready from the runtime's health, and its Lease is created.
func TestAgentRegistersReadyNodeAndLease(t *testing.T) {
	cri, endpoint := startFakeCRI(t)
	cfg := testConfig(t, endpoint)
	client := fake.NewClientset()
	var health *HealthServer
	app := fxtest.New(t,
		fx.Supply(cfg),
		Module,
		fx.Replace(&Clients{Client: client, Heartbeat: client}),
		fx.Populate(&health),
	)
	app.RequireStart()
	defer app.RequireStop()
	defer requireNoShutdown(t, app)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node := waitForNode(ctx, t, client, func(n *v1.Node) bool { return readyStatus(n) == v1.ConditionTrue })
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
	node = waitForNode(ctx, t, client, func(n *v1.Node) bool { return readyStatus(n) == v1.ConditionFalse })
	if msg := readyMessage(node); !strings.Contains(msg, "ContainerdDown") {
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

// startAgent runs the whole default graph for node-a on the fakecri at
// endpoint and client until the test ends, then checks that no component
// shut the agent down.
func startAgent(t *testing.T, endpoint string, client *fake.Clientset) *fxtest.App {
	t.Helper()
	app := fxtest.New(t, fx.Supply(testConfig(t, endpoint)), Module, fx.Replace(&Clients{Client: client, Heartbeat: client}))
	app.RequireStart()
	t.Cleanup(func() {
		requireNoShutdown(t, app)
		app.RequireStop()
	})
	return app
}

// startReadyAgent starts an agent on a new fakecri and fake clientset and
// waits for its node to be Ready. The context ends with the test, within a
// minute.
func startReadyAgent(t *testing.T) (*fakecri.Server, *fake.Clientset, context.Context) {
	t.Helper()
	cri, endpoint := startFakeCRI(t)
	client := fake.NewClientset()
	startAgent(t, endpoint, client)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	waitForNode(ctx, t, client, func(n *v1.Node) bool { return readyStatus(n) == v1.ConditionTrue })
	return cri, client, ctx
}

// requireNoShutdown fails the test when a component shut the agent down.
func requireNoShutdown(t *testing.T, app *fxtest.App) {
	t.Helper()
	select {
	case sig := <-app.Wait():
		t.Fatalf("the agent shut itself down (exit code %d): a component failed; see the log", sig.ExitCode)
	default:
	}
}

// TestAgentRunsAndDeletesAPod runs a pod bound to the node through the
// whole default graph on fakecri: it turns Running and Ready, and a graceful
// deletion stops it and removes the API object.
func TestAgentRunsAndDeletesAPod(t *testing.T) {
	_, client, ctx := startReadyAgent(t)

	pods := client.CoreV1().Pods("default")
	grace := int64(5)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: v1.PodSpec{
			NodeName:                      "node-a",
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []v1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent}},
		},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *v1.Pod
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = p
		return p.Status.Phase == v1.PodRunning && podReady(p), nil
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
	if _, err := pods.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the deleted pod's API object was not removed: %v", err)
	}
}

// TestAgentRejectsAPodThatDoesNotFit: admission fails a pod that requests
// more cpu than the node has, with the kubelet's reason, and never starts it.
func TestAgentRejectsAPodThatDoesNotFit(t *testing.T) {
	cri, client, ctx := startReadyAgent(t)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: "default", UID: "uid-huge"},
		Spec: v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{
			Name: "app", Image: "busybox",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1000")}},
		}}},
	}
	pods := client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *v1.Pod
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "huge", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = p
		return p.Status.Phase == v1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("pod default/huge was not failed: %v; status %+v", err, got.Status)
	}
	if got.Status.Reason != ReasonOutOfCPU || !strings.Contains(got.Status.Message, "Node didn't have enough resource: cpu") {
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
	_, endpoint := startFakeCRI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Run a pod on the runtime directly, as a previous agent would have.
	rc, err := runtime.New(runtime.Options{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	pm, err := runtime.NewPodManager(runtime.PodManagerOptions{
		Runtime: rc.RuntimeService(), Images: rc.ImageService(), NodeName: "node-a",
		PodLogsDir: t.TempDir(), PodsDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	orphan := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "default", UID: "uid-gone"},
		Spec:       v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}
	if res := pm.SyncPod(ctx, orphan, nil, nil, nil); res.Err != nil {
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

	startAgent(t, endpoint, fake.NewClientset())
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return running() == 0, nil
	})
	if err != nil {
		t.Fatalf("the pod no source knows is still running: %v", err)
	}
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func waitForNode(ctx context.Context, t *testing.T, client *fake.Clientset, cond func(*v1.Node) bool) *v1.Node {
	t.Helper()
	var node *v1.Node
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return cond(n), nil
	})
	if err != nil {
		t.Fatalf("node node-a did not reach the expected state: %v; last seen: %+v", err, node)
	}
	return node
}

func readyCondition(n *v1.Node) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func readyStatus(n *v1.Node) v1.ConditionStatus {
	if c := readyCondition(n); c != nil {
		return c.Status
	}
	return ""
}

func readyMessage(n *v1.Node) string {
	if c := readyCondition(n); c != nil {
		return c.Message
	}
	return ""
}
