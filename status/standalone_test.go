package status

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"
)

func mustLocalWatch(t *testing.T, name string) *NodeWatch {
	t.Helper()
	w, err := NewLocalNodeWatch(name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustAPIWatch(t *testing.T, client kubernetes.Interface, name string) *NodeWatch {
	t.Helper()
	w, err := NewNodeWatch(client, name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A Reporter without a Client keeps the Node it computes in its local
// watch, at start and every UpdateFrequency, and never calls the API.
func TestStandaloneReporterKeepsTheNodeLocally(t *testing.T) {
	watch := mustLocalWatch(t, testNode)
	if _, ok := watch.Node(); ok || !watch.HasSynced() || !watch.Local() {
		t.Fatalf("a new local watch: node known, or not synced, or not local")
	}
	h := newHarness(t, func(o *Options) {
		o.Client = nil
		o.Node = watch
		o.Labels = map[string]string{"role": "edge"}
		o.Taints = []v1.Taint{{Key: "dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule}}
	})
	h.start()
	h.waitRegistered()
	node, ok := watch.Node()
	if !ok {
		t.Fatal("registered, but the local watch has no node")
	}
	if node.Labels["role"] != "edge" || node.Labels[v1.LabelHostname] != testNode || len(node.Spec.Taints) != 1 {
		t.Errorf("local node: labels %v, taints %v", node.Labels, node.Spec.Taints)
	}
	if q := node.Status.Allocatable[v1.ResourcePods]; q.Value() != 110 {
		t.Errorf("local node's allocatable pods = %s, want 110 (the setters ran)", q.String())
	}
	first := node.Status.Conditions
	h.setRuntimeErr(errors.New("container runtime is down"))
	h.waitFor("the loop to wait", func() bool { return h.r.waits.Load() >= 1 })
	h.clk.Step(h.r.opts.UpdateFrequency)
	h.waitFor("the loop to wait again", func() bool { return h.r.waits.Load() >= 2 })
	node, _ = watch.Node()
	if ready := findCondition(node, v1.NodeReady); ready == nil || ready.Status != v1.ConditionFalse {
		t.Errorf("after the runtime failed, Ready = %+v (before: %+v)", ready, first)
	}
	if n := len(h.client.Actions()); n != 0 {
		t.Errorf("a standalone reporter made %d API calls", n)
	}
	if err := watch.SetLocal(&v1.Node{}); err == nil {
		t.Error("SetLocal of another node succeeded")
	}
	if err := mustAPIWatch(t, h.client, testNode).SetLocal(node); err == nil {
		t.Error("SetLocal on a watch of the API succeeded")
	}
}

// Before the node is registered (here: the API server refuses), NodeAnyWay
// gives the Node computed for registration, as the kubelet's
// getNodeAnyWay; once the watch has the Node, that one.
func TestNodeAnyWayBeforeRegistration(t *testing.T) {
	h := newHarness(t, nil)
	var refuse atomic.Bool
	refuse.Store(true)
	h.client.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	if _, ok := h.r.NodeAnyWay(); ok {
		t.Fatal("NodeAnyWay has a node before Run")
	}
	h.start()
	h.waitFor("the node computed for registration", func() bool { _, ok := h.r.NodeAnyWay(); return ok })
	node, _ := h.r.NodeAnyWay()
	if node.Name != testNode || node.UID != "" {
		t.Errorf("node %s (UID %q), want the unregistered %s", node.Name, node.UID, testNode)
	}
	if q := node.Status.Allocatable[v1.ResourcePods]; q.Value() != 110 {
		t.Errorf("allocatable pods = %s: the setters did not run", q.String())
	}
	if _, ok := h.r.Node(); ok {
		t.Error("the watch has a node that was never created")
	}
	// The node is computed before the create is tried: step only once
	// the refused create's back-off timer is armed, or the step comes
	// before it and the timer never fires.
	h.waitFor("the registration back-off", func() bool { return h.clk.Waiters() == 1 })
	refuse.Store(false)
	h.clk.Step(time.Minute) // the registration back-off
	h.waitRegistered()
	h.waitFor("the watch to have the node", func() bool { _, ok := h.r.Node(); return ok })
	watched, _ := h.r.Node()
	if node, _ := h.r.NodeAnyWay(); node != watched {
		t.Error("NodeAnyWay is not the watched node once registered")
	}
}
