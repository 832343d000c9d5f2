package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/nodeshutdown"
)

// triggerSource is a nodeshutdown.Source the test fires.
type triggerSource chan struct{}

func (s triggerSource) Watch(ctx context.Context, handle func(context.Context, bool)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s:
			handle(ctx, true)
		}
	}
}

func shutdownConfigFile(t *testing.T, body string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestConfigNodeShutdownOptions: the three settings reach the manager's
// options, with the kubelet's state file.
func TestConfigNodeShutdownOptions(t *testing.T) {
	file := shutdownConfigFile(t, "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\nshutdownGracePeriodByPodPriority:\n- priority: 1000\n  shutdownGracePeriodSeconds: 7\n")
	cfg, err := agent.ParseFlags(klog.Background(), []string{"--config=" + file, "--hostname-override=n", "--root-dir=/var/lib/nk"})
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.NodeShutdownOptions()
	if o.GracePeriod != 30*time.Second || o.GracePeriodCriticalPods != 10*time.Second || len(o.GracePeriodByPodPriority) != 1 ||
		o.GracePeriodByPodPriority[0].ShutdownGracePeriodSeconds != 7 || o.StateFile != "/var/lib/nk/graceful_node_shutdown_state" || o.NodeName != "n" {
		t.Errorf("NodeShutdownOptions = %+v", o)
	}
}

// TestAgentGracefulNodeShutdown runs the whole agent on fakecri with
// shutdownGracePeriod 20s (10s for critical pods) and a test source: once a
// shutdown is signalled the node turns NotReady with the kubelet's message,
// both pods end Failed/Terminated with the DisruptionTarget condition, and
// a new pod is rejected with reason NodeShutdown.
func TestAgentGracefulNodeShutdown(t *testing.T) {
	trigger := make(triggerSource)
	file := shutdownConfigFile(t, "shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 10s\n")
	n := agenttest.Start(t, agenttest.Options{
		Args: []string{"--config=" + file, "--node-status-update-frequency=1m"},
		Extra: []fx.Option{fx.Decorate(func(o nodeshutdown.Options) nodeshutdown.Options {
			o.Sources = []nodeshutdown.Source{trigger}
			return o
		})},
	})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	web := agenttest.Pod("web", "registry.k8s.io/pause:3.10")
	dns := agenttest.Pod("dns", "registry.k8s.io/pause:3.10")
	dns.Spec.Priority = ptr.To[int32](2000001000)
	dns.Spec.PriorityClassName = "system-node-critical"
	for _, p := range []*v1.Pod{web, dns} {
		n.CreatePod(ctx, p)
		n.WaitForPod(ctx, p, agenttest.PodRunningAndReady)
	}

	trigger <- struct{}{}
	// The node status update frequency is a minute: NotReady comes from the
	// shutdown's own status sync.
	n.WaitForNode(ctx, func(node *v1.Node) bool {
		c := agenttest.NodeCondition(node, v1.NodeReady)
		return c.Status == v1.ConditionFalse && c.Reason == "KubeletNotReady" && c.Message == "node is shutting down"
	})
	for _, p := range []*v1.Pod{web, dns} {
		got := n.WaitForPod(ctx, p, agenttest.PodPhase(v1.PodFailed))
		if got.Status.Reason != "Terminated" || got.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("pod %s: reason %q message %q, want the kubelet's shutdown status", p.Name, got.Status.Reason, got.Status.Message)
		}
		dt := agenttest.PodCondition(got, v1.DisruptionTarget)
		if dt.Status != v1.ConditionTrue || dt.Reason != "TerminationByKubelet" {
			t.Errorf("pod %s DisruptionTarget = %+v", p.Name, dt)
		}
	}
	late := n.CreatePod(ctx, agenttest.Pod("late", "registry.k8s.io/pause:3.10"))
	got := n.WaitForPod(ctx, late, agenttest.PodPhase(v1.PodFailed))
	if got.Status.Reason != "NodeShutdown" || got.Status.Message != "Pod was rejected: Pod was rejected as the node is shutting down." {
		t.Errorf("late pod: reason %q message %q, want the kubelet's rejection (rejectPod prefixes \"Pod was rejected: \")", got.Status.Reason, got.Status.Message)
	}
}
