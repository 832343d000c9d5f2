package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// Generous limits: they bound a hang, they do not measure speed.
const (
	readyTimeout     = 2 * time.Minute
	lifecycleTimeout = 3 * time.Minute
)

// nodeOptions vary a test node.
type nodeOptions struct {
	// runtimeEndpoint is the node's CRI; empty gives it its own fakecri.
	runtimeEndpoint string
	// updateFrequency and reportFrequency are nodeStatusUpdateFrequency
	// and nodeStatusReportFrequency (zero: the kubelet defaults).
	updateFrequency, reportFrequency time.Duration
	// extraArgs are more agent flags (--cgroup-root, --sync-frequency, …).
	extraArgs []string
	// kubeletConfig are more KubeletConfiguration fields.
	kubeletConfig map[string]any
	// containerdSeries is the containerd newContainerdPodNodeWith starts
	// (empty: cluster.DefaultContainerdSeries).
	containerdSeries cluster.ContainerdSeries
}

// testNode is a node agent process with its runtime.
type testNode struct {
	name     string
	endpoint string // the CRI endpoint
	agent    *cluster.Agent
	fake     *fakecri.Server // nil on containerd
	stopFake func()
}

// startFakeNode starts a node agent named name, on its own fakecri unless
// opts names a runtime, and waits until its healthz answers.
func startFakeNode(ctx context.Context, name string, opts nodeOptions) (*testNode, error) {
	n := &testNode{name: name, endpoint: opts.runtimeEndpoint}
	if n.endpoint == "" {
		n.fake = fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
		var err error
		n.endpoint, n.stopFake, err = n.fake.Start(filepath.Join(env.dir, "cri-"+name+".sock"))
		if err != nil {
			return nil, err
		}
		// A fake runtime runs no process to put in the host's cgroups.
		opts.extraArgs = append([]string{"--cgroups-per-qos=false"}, opts.extraArgs...)
	}
	agent, err := env.cp.NewAgent(cluster.AgentOptions{
		Binary:                    env.agent,
		NodeName:                  name,
		RuntimeEndpoint:           n.endpoint,
		NodeStatusUpdateFrequency: opts.updateFrequency,
		NodeStatusReportFrequency: opts.reportFrequency,
		CgroupDriver:              "cgroupfs",
		ExtraArgs:                 opts.extraArgs,
		KubeletConfig:             opts.kubeletConfig,
	})
	if err == nil {
		n.agent = agent
		err = agent.Start(ctx)
	}
	if err != nil {
		return nil, errors.Join(err, n.stop())
	}
	return n, nil
}

// stop stops the agent (an error if it did not exit 0 on SIGTERM) and its
// fake runtime.
func (n *testNode) stop() error {
	var err error
	if n.agent != nil {
		err = n.agent.Stop()
	}
	if n.stopFake != nil {
		n.stopFake()
	}
	return err
}

// newNode starts a node for one test. Cleanup stops it, failing the test if
// the agent did not stop cleanly, and deletes the Node (its Lease goes with
// it, by owner reference), so stopped nodes do not pile up as unhealthy.
func newNode(t *testing.T, name string, opts nodeOptions) *testNode {
	t.Helper()
	n, err := startFakeNode(t.Context(), name, opts)
	if err != nil {
		t.Fatalf("start node %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent %s log %s, last lines:\n%s", name, n.agent.LogPath, cluster.LogTail(n.agent.LogPath, 30))
		}
		if err := n.stop(); err != nil {
			t.Errorf("stop node %s: %v", name, err)
		}
		if err := n.agent.UnmountVolumes(); err != nil {
			t.Errorf("unmount the volumes node %s left: %v", name, err)
		}
		err := env.cp.Client().CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node %s: %v", name, err)
		}
	})
	return n
}

// waitForNode polls the Node until cond holds and returns it; on timeout it
// fails the test with what it last saw.
func waitForNode(t *testing.T, name, what string, timeout time.Duration, cond func(*v1.Node) bool) *v1.Node {
	t.Helper()
	var last *v1.Node
	var lastErr error
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				lastErr = err
			}
			return false, nil
		}
		last, lastErr = node, nil
		return cond(node), nil
	})
	if err != nil {
		if lastErr != nil {
			err = fmt.Errorf("%w (last error: %v)", err, lastErr)
		}
		t.Fatalf("node %s: %s: not within %s: %v\nlast seen: %s", name, what, timeout, err, describeNode(last))
	}
	return last
}

func describeNode(n *v1.Node) string {
	if n == nil {
		return "(never read)"
	}
	var b strings.Builder
	for _, c := range n.Status.Conditions {
		fmt.Fprintf(&b, "\n  condition %s=%s reason=%s message=%q heartbeat=%s", c.Type, c.Status, c.Reason, c.Message, c.LastHeartbeatTime.Format(time.RFC3339))
	}
	for _, taint := range n.Spec.Taints {
		fmt.Fprintf(&b, "\n  taint %s", taint.ToString())
	}
	return b.String()
}

func readyStatus(n *v1.Node) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func readyCondition(n *v1.Node) v1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c
		}
	}
	return v1.NodeCondition{}
}

func isReady(n *v1.Node) bool { return readyStatus(n) == v1.ConditionTrue }

func hasTaint(n *v1.Node, key string, effect v1.TaintEffect) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == key && taint.Effect == effect {
			return true
		}
	}
	return false
}

// waitReadyOutsideTest waits for a node TestMain starts to turn Ready.
func waitReadyOutsideTest(ctx context.Context, n *testNode) error {
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		return err == nil && isReady(node), nil
	})
	if err != nil {
		return fmt.Errorf("node %s did not turn Ready: %w\n--- last lines of %s:\n%s", n.name, err, n.agent.LogPath, cluster.LogTail(n.agent.LogPath, 30))
	}
	return nil
}
