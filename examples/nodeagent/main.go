// Command nodeagent is the full nodekit node agent, a drop-in for the
// kubelet binary: it takes the kubelet's KubeletConfiguration file (--config)
// and its common flags unchanged, registers the node, keeps its Lease and
// status up to date and talks to the container runtime over CRI.
//
//	nodeagent --kubeconfig=/etc/kubernetes/kubelet.conf \
//	    --config=/var/lib/kubelet/config.yaml \
//	    --container-runtime-endpoint=unix:///run/containerd/containerd.sock
//
// It stops cleanly on SIGTERM or SIGINT.
package main

import (
	"os"

	"github.com/nodekit/nodekit/agent"
	// gRPC's proto codec with finer buffer tiers, for the whole process (a
	// choice for the binary, not the library): a CRI answer of a few tens
	// of KiB would otherwise keep a 1 MiB buffer live.
	_ "github.com/nodekit/nodekit/internal/grpcproto"
)

func main() {
	os.Exit(agent.Run(os.Args[1:]))
}
