// Package agenttest starts complete node agents in tests: the agent's whole
// fx graph on client-go's fake clientset and, for the default CRI runtime,
// an in-process fake runtime (runtime/fakecri). Embedders test their own
// pieces (a status setter, an admit handler, a pod source, a pod-level
// backend) inside a real agent with it; nodekit's own tests use it too.
//
//	node := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{mySetter}})
//	ctx := agenttest.Context(t)
//	node.WaitReady(ctx)
//	pod := node.CreatePod(ctx, agenttest.Pod("web", "busybox"))
//	node.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)
//
// Nothing touches the host: the agent's directories live under the test's
// temporary directory, cgroups per QoS are off, the volume manager's
// mounter is k8s.io/mount-utils' fake (memory-backed volumes are plain
// directories), the healthz server and the node API listen on loopback
// ports Start binds at port 0 and hands to the agent.
package agenttest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/nodekit/nodekit/agent"
	nkruntime "github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/volume"
)

// DefaultTimeout bounds Context: the longest a test waits for an agent.
const DefaultTimeout = time.Minute

// Options configures Start. The zero value starts node "node-a" on a new
// fakecri and a new fake clientset.
type Options struct {
	// Name is the node's name (default "node-a").
	Name string
	// Args are more kubelet flags, after the harness's own (which they
	// override): --hostname-override, --node-ip=127.0.0.1,
	// --container-runtime-endpoint, --healthz-port, --address=127.0.0.1,
	// --port, --read-only-port=0, --root-dir, --cgroups-per-qos=false.
	Args []string
	// Client is the fake clientset the agent talks to; nil makes a new one.
	// Share one between agents to put several nodes in one fake cluster
	// (starting one while others run on it is safe). Objects created
	// without a UID get one, as from an API server.
	Client *fake.Clientset
	// Standalone starts the agent without an API server (agent.Standalone,
	// as with an empty --kubeconfig): Node.Client is nil, so the helpers
	// that read the API cannot be used; pass --pod-manifest-path in Args
	// for pods to run.
	Standalone bool
	// Runtime replaces the CRI runtime module (agent.CRI on a fakecri), e.g.
	// agent.PodBackend(...) for a pod-level node. With it no fakecri is
	// started.
	Runtime fx.Option
	// CRI configures the fakecri (default: cgroupfs driver, any image
	// pullable).
	CRI *fakecri.Options
	// CRIEndpoint, when set, is an existing CRI runtime to run on instead
	// of a new fakecri.
	CRIEndpoint string
	// InProcessCRI has the agent call its new fakecri in process
	// (Server.InProcess as runtime.Options' RuntimeService and
	// ImageService), as agent/fleet's nodes do, instead of over its
	// socket, which is then not served.
	InProcessCRI bool
	// Extra are the embedder's fx options, applied last.
	Extra []fx.Option
	// Configure, when set, changes the agent's Config after the flags
	// were parsed: for the fields no flag sets (a KubeletConfiguration
	// field the agent reads from its config file only, say).
	Configure func(*agent.Config)
}

// Node is a running agent under test.
type Node struct {
	T      testing.TB
	Name   string
	Config *agent.Config
	Client *fake.Clientset
	// CRI is the fake runtime; nil with Options.Runtime.
	CRI *fakecri.Server
	App *fxtest.App
}

// Start builds and starts an agent for the test and stops it when the test
// ends, failing the test if a component shut the agent down meanwhile.
func Start(t testing.TB, opts Options) *Node {
	t.Helper()
	n := &Node{T: t, Name: opts.Name, Client: opts.Client}
	if n.Name == "" {
		n.Name = "node-a"
	}
	if n.Client == nil && !opts.Standalone {
		n.Client = fake.NewClientset()
	}
	if n.Client != nil {
		if _, done := uidClients.LoadOrStore(n.Client, true); !done {
			n.Client.PrependReactor("create", "*", assignUID)
		}
	}
	runtime, endpoint := opts.Runtime, opts.CRIEndpoint
	switch {
	case runtime != nil:
		endpoint = "unix:///nonexistent/cri.sock"
	case endpoint != "":
		runtime = agent.CRI
	default:
		criOpts := fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, PullAny: true}
		if opts.CRI != nil {
			criOpts = *opts.CRI
		}
		runtime = agent.CRI
		if !opts.InProcessCRI {
			n.CRI, endpoint = StartFakeCRI(t, criOpts)
			break
		}
		n.CRI, endpoint = fakecri.New(criOpts), "unix:///nonexistent/in-process-cri.sock"
		runtime = fx.Options(runtime, fx.Decorate(func(o nkruntime.Options) nkruntime.Options {
			o.RuntimeService, o.ImageService = n.CRI.InProcess()
			return o
		}))
	}
	// The healthz server and the node API listen on loopback ports bound
	// here, at port 0, and handed to the agent: no other test can take
	// them between the choice and the agent's listen.
	healthLn, apiLn := listenLoopback(t), listenLoopback(t)
	healthPort, apiPort := portOf(healthLn), portOf(apiLn)
	args := append([]string{"--healthz-port=" + strconv.Itoa(healthPort), "--port=" + strconv.Itoa(apiPort)}, opts.Args...)
	n.Config = Config(t, n.Name, endpoint, args...)
	if opts.Configure != nil {
		opts.Configure(n.Config)
	}
	if kc := n.Config.Kubelet; kc.HealthzPort != nil && int(*kc.HealthzPort) == healthPort && kc.HealthzBindAddress == "127.0.0.1" {
		n.Config.HealthzListener = healthLn
	} else {
		healthLn.Close()
	}
	if int(n.Config.Kubelet.Port) == apiPort && n.Config.Kubelet.Address == "127.0.0.1" {
		n.Config.NodeAPIListener = apiLn
	} else {
		apiLn.Close()
	}
	all := []fx.Option{fx.Supply(n.Config), agent.Standalone, runtime}
	if !opts.Standalone {
		all = []fx.Option{
			fx.Supply(n.Config),
			agent.Core,
			runtime,
			fx.Replace(&agent.Clients{Client: n.Client, Heartbeat: n.Client}),
		}
	}
	// Volumes are directories: nothing is mounted on the host.
	all = append(all, fx.Decorate(func(o volume.Options) volume.Options {
		if o.Mounter == nil {
			o.Mounter = mount.NewFakeMounter(nil)
		}
		return o
	}))
	// fx's 15 s start and stop timeouts are short for a test binary
	// starved by a loaded machine: an agent whose stop timed out kept
	// running, and its log lines failed later tests of the same process
	// that check the log. A hang still fails the test, a minute later.
	all = append(all, fx.StartTimeout(time.Minute), fx.StopTimeout(time.Minute))
	all = append(all, opts.Extra...)
	n.App = fxtest.New(t, all...)
	n.App.RequireStart()
	t.Cleanup(func() {
		// Stopped whatever happened, even when a component shut it down
		// (which fails the test).
		defer n.App.RequireStop()
		RequireNoShutdown(t, n.App)
	})
	return n
}

// listenLoopback binds a TCP port on 127.0.0.1 chosen by the kernel; it is
// closed when the test ends unless the agent took it (closing twice is
// harmless).
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func portOf(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// assignUID gives an object created without a UID one, as the API server
// does (the fake clientset does not): mirror pods and the Node need theirs.
// uidClients holds the clients assignUID was added to: once per client, as
// a reactor added while other agents use the client races with them.
var uidClients sync.Map

func assignUID(action k8stesting.Action) (bool, runtime.Object, error) {
	if create, ok := action.(k8stesting.CreateAction); ok {
		if obj, err := meta.Accessor(create.GetObject()); err == nil && obj.GetUID() == "" {
			obj.SetUID(uuid.NewUUID())
		}
	}
	return false, nil, nil
}

// Config returns a complete agent Config for node name on the CRI endpoint,
// with its directories under a temporary directory, the healthz server and
// the kubelet API on free loopback ports, --node-ip 127.0.0.1, no cgroups
// per QoS and disk eviction thresholds of 1 %; args are more kubelet flags.
//
// The node's root directory is on the test host's disk, which a shared
// machine can fill past the kubelet's default thresholds (10 % nodefs, 15 %
// imagefs): the node would report DiskPressure and refuse every pod. A test
// that wants other thresholds passes its own --eviction-hard (the later flag
// replaces this one) or sets cfg.Kubelet.EvictionHard; an evictionHard in a
// --config file does not apply, as the kubelet's flags win over its file.
func Config(t testing.TB, name, endpoint string, args ...string) *agent.Config {
	t.Helper()
	dir := TempDir(t)
	cfg, err := agent.ParseFlags(klog.Background(), append([]string{
		"--hostname-override=" + name,
		"--node-ip=127.0.0.1",
		"--container-runtime-endpoint=" + endpoint,
		"--healthz-port=" + FreePort(t),
		// The kubelet API on a free loopback port, its certificate under
		// the root directory.
		"--address=127.0.0.1",
		"--port=" + FreePort(t),
		// The kubelet's command-line default opens the read-only port
		// 10255, which parallel agents cannot share.
		"--read-only-port=0",
		// A root directory that does not exist yet: the agent makes it.
		"--root-dir=" + filepath.Join(dir, "state"),
		// Tests leave the host's cgroups alone.
		"--cgroups-per-qos=false",
		// Tests run on machines with swap too.
		"--fail-swap-on=false",
		// The host's disk is not the test's to judge.
		"--eviction-hard=memory.available<100Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%,imagefs.inodesFree<1%",
	}, args...))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kubelet.PodLogsDir = filepath.Join(dir, "logs")
	cfg.ContainerLogsDir = filepath.Join(dir, "container-logs")
	return cfg
}

// TempDir returns a short temporary directory removed when the test ends
// (unix socket paths must stay under 108 bytes, which t.TempDir's long
// names can exceed).
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// StartFakeCRI starts a fake runtime on a unix socket for the test and
// returns it with its endpoint.
func StartFakeCRI(t testing.TB, opts fakecri.Options) (*fakecri.Server, string) {
	t.Helper()
	srv := fakecri.New(opts)
	endpoint, stop, err := srv.Start(filepath.Join(TempDir(t), "cri.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return srv, endpoint
}

// RequireNoShutdown fails the test when a component shut the app down.
func RequireNoShutdown(t testing.TB, app *fxtest.App) {
	t.Helper()
	select {
	case sig := <-app.Wait():
		t.Fatalf("the agent shut itself down (exit code %d): a component failed; see the log", sig.ExitCode)
	default:
	}
}

// Context returns a context that ends with the test, within DefaultTimeout.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	t.Cleanup(cancel)
	return ctx
}

// WaitForNode polls the node's API object until cond holds and returns it;
// the test fails when ctx ends first.
func (n *Node) WaitForNode(ctx context.Context, cond func(*v1.Node) bool) *v1.Node {
	n.T.Helper()
	var node *v1.Node
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := n.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = got
		return cond(got), nil
	})
	if err != nil {
		n.T.Fatalf("node %s did not reach the expected state: %v; last seen: %+v", n.Name, err, node)
	}
	return node
}

// WaitReady waits for the node's Ready condition to be True.
func (n *Node) WaitReady(ctx context.Context) *v1.Node {
	n.T.Helper()
	return n.WaitForNode(ctx, func(node *v1.Node) bool { return NodeCondition(node, v1.NodeReady).Status == v1.ConditionTrue })
}

// NodeCondition returns the node's condition of type t, or a zero one.
func NodeCondition(node *v1.Node, t v1.NodeConditionType) v1.NodeCondition {
	for _, c := range node.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.NodeCondition{}
}

// Pod returns a pod named name in namespace "default" with one container
// "app" running image, with a UID and dnsPolicy ClusterFirst (the API
// server's default, which the fake clientset does not apply: without it the
// agent logs the pod's invalid DNS policy as an error); CreatePod binds it
// to the node.
func Pod(name, image string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "app", Image: image, ImagePullPolicy: v1.PullIfNotPresent}},
			DNSPolicy:  v1.DNSClusterFirst,
		},
	}
}

// CreatePod binds pod to the node and creates it.
func (n *Node) CreatePod(ctx context.Context, pod *v1.Pod) *v1.Pod {
	n.T.Helper()
	pod = pod.DeepCopy()
	pod.Spec.NodeName = n.Name
	created, err := n.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		n.T.Fatal(err)
	}
	return created
}

// WaitForPod polls the pod's API object until cond holds and returns it; a
// nil pod passed to cond means the object is gone. The test fails when ctx
// ends first.
func (n *Node) WaitForPod(ctx context.Context, pod *v1.Pod, cond func(*v1.Pod) bool) *v1.Pod {
	n.T.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := n.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			got = nil
		}
		last = got
		return cond(got), nil
	})
	if err != nil {
		n.T.Fatalf("pod %s/%s did not reach the expected state: %v; last seen: %+v", pod.Namespace, pod.Name, err, last)
	}
	return last
}

// PodRunningAndReady holds for a Running pod whose Ready condition is True.
func PodRunningAndReady(p *v1.Pod) bool {
	return p != nil && p.Status.Phase == v1.PodRunning && PodCondition(p, v1.PodReady).Status == v1.ConditionTrue
}

// PodPhase returns a condition that holds when the pod is in phase.
func PodPhase(phase v1.PodPhase) func(*v1.Pod) bool {
	return func(p *v1.Pod) bool { return p != nil && p.Status.Phase == phase }
}

// PodGone holds once the pod's API object is deleted.
func PodGone(p *v1.Pod) bool { return p == nil }

// PodCondition returns the pod's condition of type t, or a zero one.
func PodCondition(p *v1.Pod, t v1.PodConditionType) v1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.PodCondition{}
}
