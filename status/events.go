package status

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Event reasons the default setters record, as the kubelet names them.
const (
	eventNodeReady                 = "NodeReady"
	eventNodeNotReady              = "NodeNotReady"
	eventNodeSchedulable           = "NodeSchedulable"
	eventNodeNotSchedulable        = "NodeNotSchedulable"
	eventNodeHasSufficientMemory   = "NodeHasSufficientMemory"
	eventNodeHasInsufficientMemory = "NodeHasInsufficientMemory"
	eventNodeHasNoDiskPressure     = "NodeHasNoDiskPressure"
	eventNodeHasDiskPressure       = "NodeHasDiskPressure"
	eventNodeHasSufficientPID      = "NodeHasSufficientPID"
	eventNodeHasInsufficientPID    = "NodeHasInsufficientPID"
	eventNodeRebooted              = "Rebooted"
)

// nodeRef is the reference events about node are recorded against. It carries
// the UID once the Node exists, so kubectl describe node finds the events.
func nodeRef(node *v1.Node) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
}

// recordStatusEvent records a "Node <name> status is now: <reason>" event,
// the message the kubelet uses for condition flips. It does nothing when rec
// is nil or ctx is a dry run.
func recordStatusEvent(ctx context.Context, rec record.EventRecorder, node *v1.Node, eventType, reason string) {
	if rec == nil || IsDryRun(ctx) {
		return
	}
	klog.FromContext(ctx).V(2).Info("Recording event for node", "node", klog.KObj(node), "event", reason)
	rec.Eventf(nodeRef(node), eventType, reason, "Node %s status is now: %s", node.Name, reason)
}
