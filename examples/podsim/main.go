// Command podsim is a nodekit node whose pods are simulated instead of run:
// a pod-level backend (the pods.PodBackend interface, virtual-kubelet's
// shape) in about a hundred lines, plugged into the agent with
// agent.PodBackend. It registers a Node, turns Ready, renews its Lease and
// takes the pods the scheduler gives it like any kubelet; each pod gets an
// IP and containers that run for podsim.nodekit.io/run-seconds (forever by
// default) and exit with podsim.nodekit.io/exit-code. It takes the
// kubelet's flags (--kubeconfig, --hostname-override, ...).
//
//	go run ./examples/podsim --kubeconfig=$HOME/.kube/config --hostname-override=sim-1
package main

import (
	"os"

	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/agent"
)

func main() {
	os.Exit(agent.RunWith(os.Args[1:], agent.PodBackend(func(clk clock.Clock) *simulator { return newSimulator(clk) })))
}
