// Command customstatus is a nodekit agent with two changes an embedder
// typically makes: it adds a node condition of its own (ScratchDiskReady, True
// while a directory exists) and replaces a default piece, the node Lease
// options, to renew a shorter Lease. Everything else is agent.Module.
package main

import (
	"context"
	"os"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/lease"
	"github.com/nodekit/nodekit/status"
)

const scratchDir = "/mnt/scratch"

// scratchDiskCondition reports whether scratchDir exists, keeping the
// transition time while the status does not change.
func scratchDiskCondition() status.Setter {
	set := func(_ context.Context, node *v1.Node) error {
		cond := v1.NodeCondition{Type: "ScratchDiskReady", Status: v1.ConditionTrue,
			Reason: "ScratchDiskMounted", Message: scratchDir + " is present"}
		if _, err := os.Stat(scratchDir); err != nil {
			cond.Status, cond.Reason, cond.Message = v1.ConditionFalse, "ScratchDiskMissing", err.Error()
		}
		now := metav1.Now()
		cond.LastHeartbeatTime, cond.LastTransitionTime = now, now
		for i, old := range node.Status.Conditions {
			if old.Type == cond.Type {
				if old.Status == cond.Status {
					cond.LastTransitionTime = old.LastTransitionTime
				}
				node.Status.Conditions[i] = cond
				return nil
			}
		}
		node.Status.Conditions = append(node.Status.Conditions, cond)
		return nil
	}
	return set
}

func main() {
	os.Exit(agent.Run(os.Args[1:],
		// Before Ready, which the kubelet keeps the last condition.
		status.AsSetter("ScratchDisk", status.OrderReady-1, scratchDiskCondition),
		fx.Decorate(func(o lease.Options) lease.Options {
			o.LeaseDurationSeconds = 20
			return o
		}),
	))
}
