package agent_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agent/agenttest"
)

// TestStartReadsNoNode: from its start to Ready with its Lease and CSINode
// created, the agent never GETs its Node (the kubelet GETs it for the
// Lease's owner reference, for the CSINode's, and for the first status
// update when its informer has not delivered it yet): the Lease and the
// CSINode take the UID from the registration, the first status patch
// starts from registering's answer. Nor does it GET the CSINode of the Node
// it just created before creating it. Both are still owned by the Node. The
// test reads the fake cluster's tracker, which records no request.
func TestStartReadsNoNode(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{InProcessCRI: true})
	tracker := n.Client.Tracker()
	err := wait.PollUntilContextTimeout(agenttest.Context(t), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		obj, err := tracker.Get(v1.SchemeGroupVersion.WithResource("nodes"), "", n.Name)
		if err != nil {
			return false, nil
		}
		node := obj.(*v1.Node)
		if agenttest.NodeCondition(node, v1.NodeReady).Status != v1.ConditionTrue {
			return false, nil
		}
		l, err := tracker.Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), v1.NamespaceNodeLease, n.Name)
		if err != nil {
			return false, nil
		}
		cn, err := tracker.Get(storagev1.SchemeGroupVersion.WithResource("csinodes"), "", n.Name)
		if err != nil {
			return false, nil
		}
		for _, refs := range [][]metav1.OwnerReference{l.(*coordinationv1.Lease).OwnerReferences, cn.(*storagev1.CSINode).OwnerReferences} {
			if len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != node.UID {
				t.Fatalf("owner references %+v, want the Node (UID %s)", refs, node.UID)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the node did not turn Ready with its Lease and CSINode: %v", err)
	}
	for _, a := range n.Client.Actions() {
		if r := a.GetResource().Resource; a.GetVerb() == "get" && (r == "nodes" || r == "csinodes") {
			t.Errorf("the agent read its %s: %v", r, a)
		}
	}
}
