package status

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	nodeutil "k8s.io/component-helpers/node/util"
)

// applyPatch applies a strategic merge patch to node as the API server does.
func applyPatch(t *testing.T, node *v1.Node, patch []byte) *v1.Node {
	t.Helper()
	in, err := json.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(in, patch, v1.Node{})
	if err != nil {
		t.Fatalf("apply patch %s: %v", patch, err)
	}
	var res v1.Node
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}

func cond(t v1.NodeConditionType, s v1.ConditionStatus, heartbeat int64) v1.NodeCondition {
	return v1.NodeCondition{Type: t, Status: s, Reason: string(t) + string(s),
		LastHeartbeatTime: metav1.Unix(heartbeat, 0), LastTransitionTime: metav1.Unix(100, 0)}
}

func TestNodeChanged(t *testing.T) {
	base := newNode("n")
	base.Labels = map[string]string{"a": "b"}
	base.Status.Conditions = []v1.NodeCondition{cond(v1.NodeMemoryPressure, v1.ConditionFalse, 1), cond(v1.NodeReady, v1.ConditionTrue, 1)}
	base.Status.Capacity = v1.ResourceList{v1.ResourceMemory: q("1Gi")}

	same := base.DeepCopy()
	same.Status.Conditions = []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionTrue, 99), cond(v1.NodeMemoryPressure, v1.ConditionFalse, 99)}
	same.Status.Capacity = v1.ResourceList{v1.ResourceMemory: q("1024Mi")}
	if nodeChanged(base, same) {
		t.Error("heartbeats, condition order or quantity format counted as a change")
	}
	for name, edit := range map[string]func(*v1.Node){
		"condition status": func(n *v1.Node) { n.Status.Conditions[1].Status = v1.ConditionFalse },
		"condition added":  func(n *v1.Node) { n.Status.Conditions = append(n.Status.Conditions, cond("X", v1.ConditionTrue, 1)) },
		"transition time":  func(n *v1.Node) { n.Status.Conditions[0].LastTransitionTime = metav1.Unix(5, 0) },
		"capacity":         func(n *v1.Node) { n.Status.Capacity[v1.ResourceMemory] = q("2Gi") },
		"images":           func(n *v1.Node) { n.Status.Images = []v1.ContainerImage{{Names: []string{"x"}}} },
		"label":            func(n *v1.Node) { n.Labels["a"] = "c" },
		"annotation":       func(n *v1.Node) { n.Annotations = map[string]string{"k": "v"} },
	} {
		changed := base.DeepCopy()
		edit(changed)
		if !nodeChanged(base, changed) {
			t.Errorf("%s: not counted as a change", name)
		}
	}
}

func TestStatusPatchKeepsOtherWritersConditions(t *testing.T) {
	// What the reporter read: no foreign condition yet.
	read := newNode("n")
	read.Status.Conditions = []v1.NodeCondition{cond(v1.NodeMemoryPressure, v1.ConditionFalse, 1), cond(v1.NodeReady, v1.ConditionFalse, 1)}
	updated := read.DeepCopy()
	updated.Status.Conditions[1] = cond(v1.NodeReady, v1.ConditionTrue, 2)
	patch, err := statusPatch(read, updated)
	if err != nil {
		t.Fatal(err)
	}
	// Meanwhile node-problem-detector added its condition on the server.
	server := read.DeepCopy()
	server.Status.Conditions = append(server.Status.Conditions, cond("KernelDeadlock", v1.ConditionFalse, 1))
	got := applyPatch(t, server, patch)
	want := []v1.NodeCondition{cond(v1.NodeMemoryPressure, v1.ConditionFalse, 1), cond(v1.NodeReady, v1.ConditionTrue, 2), cond("KernelDeadlock", v1.ConditionFalse, 1)}
	if !reflect.DeepEqual(got.Status.Conditions, want) {
		t.Errorf("conditions after patch = %+v\nwant %+v", got.Status.Conditions, want)
	}
	if strings.Contains(string(patch), "MemoryPressure\",\"status") || strings.Contains(string(patch), "$delete") {
		t.Errorf("patch carries more than the Ready change: %s", patch)
	}
}

func TestStatusPatchReplacesAddresses(t *testing.T) {
	read := newNode("n")
	read.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "h"}}
	updated := read.DeepCopy()
	updated.Status.Addresses = []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeInternalIP, Address: "fd00::2"}, {Type: v1.NodeHostName, Address: "h"},
	}
	updated.Status.Conditions = []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionTrue, 1)}
	patch, err := statusPatch(read, updated)
	if err != nil {
		t.Fatal(err)
	}
	got := applyPatch(t, read, patch)
	if !reflect.DeepEqual(got.Status.Addresses, updated.Status.Addresses) || len(got.Status.Conditions) != 1 {
		t.Errorf("after patch %s: addresses %v conditions %v", patch, got.Status.Addresses, got.Status.Conditions)
	}
	if !reflect.DeepEqual(read.Status.Addresses, []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "h"}}) {
		t.Error("statusPatch modified the node as read")
	}

	first := newNode("n")
	withAddrs := first.DeepCopy()
	withAddrs.Status.Addresses = updated.Status.Addresses
	patch, err = statusPatch(first, withAddrs)
	if err != nil {
		t.Fatal(err)
	}
	if got := applyPatch(t, first, patch); !reflect.DeepEqual(got.Status.Addresses, updated.Status.Addresses) {
		t.Errorf("first addresses: %v", got.Status.Addresses)
	}
}

func TestStatusPatchNeverCarriesSpec(t *testing.T) {
	read := newNode("n")
	updated := read.DeepCopy()
	updated.Spec.Unschedulable = true
	updated.Spec.Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}}
	updated.Status.Phase = v1.NodeRunning
	patch, err := statusPatch(read, updated)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(patch), "spec") || !strings.Contains(string(patch), "Running") {
		t.Errorf("patch = %s, want status only", patch)
	}
	if !updated.Spec.Unschedulable {
		t.Error("statusPatch modified the updated node")
	}
}

func TestHeartbeatOnlyPatchIsSmall(t *testing.T) {
	read := newNode("n")
	read.Status.Conditions = []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionTrue, 1)}
	updated := read.DeepCopy()
	updated.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Unix(11, 0))
	patch, err := statusPatch(read, updated)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":{"$setElementOrder/conditions":[{"type":"Ready"}],"conditions":[{"lastHeartbeatTime":"1970-01-01T00:00:11Z","type":"Ready"}]}}`
	if string(patch) != want {
		t.Errorf("patch = %s\nwant %s", patch, want)
	}
}

// TestStatusPatchMatchesComponentHelpers checks that statusPatch sends what
// k8s.io/component-helpers/node/util.PatchNodeStatus (the kubelet's patch)
// sends (the same JSON, keys maybe in another order); statusPatch exists because that helper ignores the caller's context.
func TestStatusPatchMatchesComponentHelpers(t *testing.T) {
	read := newNode("n")
	read.Labels = map[string]string{"a": "b"}
	read.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "h"}}
	read.Status.Conditions = []v1.NodeCondition{cond(v1.NodeMemoryPressure, v1.ConditionFalse, 1), cond(v1.NodeReady, v1.ConditionFalse, 1)}
	read.Status.Capacity = v1.ResourceList{v1.ResourceCPU: q("2")}
	for name, edit := range map[string]func(*v1.Node){
		"heartbeat": func(n *v1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.Unix(50, 0) },
		"ready":     func(n *v1.Node) { n.Status.Conditions[1] = cond(v1.NodeReady, v1.ConditionTrue, 2) },
		"addresses": func(n *v1.Node) { n.Status.Addresses[0].Address = "10.0.0.9" },
		"capacity":  func(n *v1.Node) { n.Status.Capacity[v1.ResourceMemory] = q("1Gi") },
		"label":     func(n *v1.Node) { n.Labels["kubernetes.io/os"] = "linux" },
		"spec":      func(n *v1.Node) { n.Spec.Unschedulable = true },
	} {
		updated := read.DeepCopy()
		edit(updated)
		client := fake.NewClientset(read.DeepCopy())
		if _, _, err := nodeutil.PatchNodeStatus(client.CoreV1(), types.NodeName("n"), read, updated); err != nil {
			t.Fatalf("%s: PatchNodeStatus: %v", name, err)
		}
		upstream := client.Actions()[0].(k8stesting.PatchAction).GetPatch()
		ours, err := statusPatch(read, updated)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal(ours, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(upstream, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: patch\n%s\nwant (component-helpers)\n%s", name, ours, upstream)
		}
	}
}
