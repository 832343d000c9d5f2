package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
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

// relOptions vary a reliability test's node.
type relOptions struct {
	// fake runs the node on a fakecri of its own instead of a containerd
	// of its own.
	fake bool
	// proxy puts an APIProxy between the agent and the apiserver.
	proxy bool
	// extraArgs are more command-line flags of the agent.
	extraArgs []string
	// kubeletConfig are more KubeletConfiguration fields of the agent.
	kubeletConfig map[string]any
}

// relNode is a pod node whose faults a test controls: its agent, its
// runtime (a containerd or a fakecri of its own) and, with relOptions.proxy,
// its connection to the apiserver.
type relNode struct {
	*podNode
	proxy *cluster.APIProxy
}

// newRelNode starts a node for one reliability test and waits until it is
// Ready with a namespace for its pods. Cleanup stops the agent (a killed
// one is fine), deletes the Node, then closes the runtime and removes the
// cgroup root.
func newRelNode(t *testing.T, name string, o relOptions) *relNode {
	t.Helper()
	ctx := t.Context()
	tn := &testNode{name: name}
	n := &relNode{podNode: &podNode{testNode: tn}}
	args := slices.Clone(o.extraArgs)
	if o.fake {
		tn.fake = fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
		var err error
		tn.endpoint, tn.stopFake, err = tn.fake.Start(filepath.Join(env.dir, "cri-"+name+".sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tn.stopFake)
		tn.stopFake = nil
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
		n.cri = runtimeapi.NewRuntimeServiceClient(conn)
		n.runtimeName = fakecri.DefaultRuntimeName
		args = append([]string{"--cgroups-per-qos=false"}, args...)
	} else {
		n.cgroupRoot = newCgroupRoot(t, name)
		c := startNodeContainerd(t, name)
		cri := dialCRI(t, c)
		var err error
		if n.runtimeName, _, err = c.Version(ctx); err != nil {
			t.Fatal(err)
		}
		n.cri, n.containerd, tn.endpoint = cri.Runtime, c, c.Endpoint
		args = append([]string{"--cgroup-root=" + n.cgroupRoot}, args...)
	}
	agent, err := env.cp.NewAgent(cluster.AgentOptions{
		Binary: env.agent, NodeName: name, RuntimeEndpoint: tn.endpoint,
		CgroupDriver: "cgroupfs", ExtraArgs: args, KubeletConfig: o.kubeletConfig,
	})
	if err != nil {
		t.Fatal(err)
	}
	tn.agent = agent
	if o.proxy {
		if n.proxy, err = env.cp.NewAPIProxy(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.proxy.Close)
		if err := agent.SetAPIServer(n.proxy.URL); err != nil {
			t.Fatal(err)
		}
	}
	startAgentNode(t, agent, killedByTest)
	n.ns = newNamespace(t, name)
	waitForNode(t, name, "Ready", readyTimeout, isReady)
	return n
}

// boundPod is a pod bound to the node by spec.nodeName (no scheduler: it
// lands on the node even while the node is not Ready).
func (n *podNode) boundPod(name string, command ...string) *v1.Pod {
	pod := n.pod(name, command...)
	pod.Spec.NodeSelector = nil
	pod.Spec.NodeName = n.name
	return pod
}

// sleeper runs until killed.
var sleeper = []string{"sleep", "36000"}

// createPods creates count pods named prefix-<i> from mk, concurrently.
func createPods(t *testing.T, count int, prefix string, mk func(name string) *v1.Pod) []string {
	t.Helper()
	names := make([]string, count)
	errs := make(chan error, count)
	sem := make(chan struct{}, 10)
	for i := range count {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		pod := mk(names[i])
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := env.cp.Client().CoreV1().Pods(pod.Namespace).Create(context.WithoutCancel(t.Context()), pod, metav1.CreateOptions{})
			if err != nil {
				err = fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			errs <- err
		}()
	}
	var all []error
	for range count {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		t.Fatal(err)
	}
	return names
}

// waitPods polls the namespace's pods until cond holds for every pod named
// in names, and returns them by name; it fails the test with the pods that
// do not satisfy cond on timeout.
func waitPods(t *testing.T, ns string, names []string, what string, timeout time.Duration, cond func(*v1.Pod) bool) map[string]*v1.Pod {
	t.Helper()
	var pods map[string]*v1.Pod
	var missing []string
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := env.cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods = map[string]*v1.Pod{}
		for i := range list.Items {
			pods[list.Items[i].Name] = &list.Items[i]
		}
		missing = missing[:0]
		for _, name := range names {
			if p, ok := pods[name]; !ok || !cond(p) {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		var b strings.Builder
		for i, name := range missing {
			if i == 5 {
				fmt.Fprintf(&b, "\n… and %d more", len(missing)-5)
				break
			}
			b.WriteString("\n" + describePod(t, pods[name]))
		}
		t.Fatalf("%d of %d pods in %s not %s within %s: %v%s", len(missing), len(names), ns, what, timeout, err, b.String())
	}
	// Only the named pods: other tests may run pods in the namespace at
	// the same time, and a caller comparing snapshots must not see them.
	named := make(map[string]*v1.Pod, len(names))
	for _, name := range names {
		named[name] = pods[name]
	}
	return named
}

// waitPodsGone waits until none of the named pods exists.
func waitPodsGone(t *testing.T, ns string, names []string, timeout time.Duration) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := env.cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = left[:0]
		for _, p := range list.Items {
			if slices.Contains(names, p.Name) {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("pods %v in %s still exist after %s: %v", left, ns, timeout, err)
	}
}

// containerSnapshot is what must not change about a running container
// while the agent crashes or loses the apiserver.
type containerSnapshot struct {
	id       string
	restarts int32
}

func snapshotContainers(pods map[string]*v1.Pod) map[string]containerSnapshot {
	out := map[string]containerSnapshot{}
	for name, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			out[name+"/"+cs.Name] = containerSnapshot{id: cs.ContainerID, restarts: cs.RestartCount}
		}
	}
	return out
}

// compareContainers lists the containers of before that the pods in after
// report with another ID or restart count.
func compareContainers(before map[string]containerSnapshot, after map[string]*v1.Pod) []string {
	now := snapshotContainers(after)
	var changed []string
	for key, b := range before {
		a, ok := now[key]
		if !ok {
			continue
		}
		if a != b {
			changed = append(changed, fmt.Sprintf("%s: %s (restarts %d) → %s (restarts %d)", key, b.id, b.restarts, a.id, a.restarts))
		}
	}
	slices.Sort(changed)
	return changed
}

// runtimeLeftovers lists what the node still holds of pod uid: containers
// and sandboxes in the runtime, the pod's cgroup (containerd nodes), its
// directory under the agent's root and its log directory.
func (n *podNode) runtimeLeftovers(t *testing.T, uid types.UID) []string {
	t.Helper()
	var left []string
	for _, c := range n.criContainers(t, uid, false) {
		left = append(left, "container "+c.Id)
	}
	for _, sb := range n.criSandboxes(t, uid) {
		left = append(left, "sandbox "+sb.Id)
	}
	if n.cgroupRoot != "" {
		for _, controller := range []string{"memory", "cpu", "pids"} {
			base := filepath.Join("/sys/fs/cgroup", controller, n.cgroupRoot, "kubepods")
			for _, pattern := range []string{"pod" + string(uid), "*/pod" + string(uid)} {
				matches, _ := filepath.Glob(filepath.Join(base, pattern))
				for _, m := range matches {
					left = append(left, "cgroup "+m)
				}
			}
		}
	}
	podDir := filepath.Join(n.agent.Dir, "root", "pods", string(uid))
	if _, err := os.Stat(podDir); err == nil {
		left = append(left, "pod directory "+podDir)
	}
	logDirs, _ := filepath.Glob(filepath.Join(n.agent.Dir, "pod-logs", "*_"+string(uid)))
	for _, d := range logDirs {
		left = append(left, "log directory "+d)
	}
	return left
}

// waitNoLeftovers waits until the node holds nothing of any of uids.
func (n *podNode) waitNoLeftovers(t *testing.T, uids []types.UID, timeout time.Duration) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, timeout, true, func(context.Context) (bool, error) {
		left = left[:0]
		for _, uid := range uids {
			for _, l := range n.runtimeLeftovers(t, uid) {
				left = append(left, fmt.Sprintf("pod %s: %s", uid, l))
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("the node still holds deleted pods' leftovers after %s:\n  %s", timeout, strings.Join(left, "\n  "))
	}
}

// nodeEvent is a watch event of a Node with the time it arrived.
type nodeEvent struct {
	at   time.Time
	typ  watch.EventType
	node *v1.Node
}

// watchNode records every change of the Node from now on until the test
// ends. The returned function returns the events so far.
func watchNode(t *testing.T, name string) func() []nodeEvent {
	t.Helper()
	ctx := t.Context()
	client := env.cp.Client().CoreV1().Nodes()
	node, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan nodeEvent, 1000)
	var collected []nodeEvent
	go func() {
		rv := node.ResourceVersion
		for ctx.Err() == nil {
			w, err := client.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: rv})
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				if n, ok := ev.Object.(*v1.Node); ok {
					rv = n.ResourceVersion
					events <- nodeEvent{at: time.Now(), typ: ev.Type, node: n}
				}
			}
			w.Stop()
		}
	}()
	return func() []nodeEvent {
		for {
			select {
			case ev := <-events:
				collected = append(collected, ev)
			default:
				return slices.Clone(collected)
			}
		}
	}
}

// metricValue scrapes one metric of the agent (summed over its labels).
func metricValue(t *testing.T, a *cluster.Agent, name string, match map[string]string) float64 {
	t.Helper()
	m, err := a.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m[name]; !ok {
		t.Fatalf("the agent exports no %s", name)
	}
	return m.Sum(name, match)
}

// mibytes formats a byte count as MiB.
func mibytes(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// neverRestart makes a pod's containers run once.
func neverRestart(p *v1.Pod) *v1.Pod {
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	return p
}

// withGrace sets a pod's termination grace period.
func withGrace(p *v1.Pod, seconds int64) *v1.Pod {
	p.Spec.TerminationGracePeriodSeconds = ptr.To(seconds)
	return p
}
