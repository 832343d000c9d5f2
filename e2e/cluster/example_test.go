package cluster_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// A test brings up the control plane and one node agent on containerd.
// (Compiled, not run: it needs root and builds the control plane.)
func Example() {
	ctx := context.Background()
	src, err := cluster.LocateSource()
	if err != nil {
		log.Fatal(err)
	}
	bins, err := cluster.BuildControlPlane(ctx, cluster.BuildOptions{Source: src})
	if err != nil {
		log.Fatal(err)
	}
	cp, err := cluster.StartControlPlane(ctx, cluster.ControlPlaneOptions{Binaries: bins})
	if err != nil {
		log.Fatal(err)
	}
	defer cp.Stop()
	runtime, err := cluster.StartContainerd(ctx, cluster.ContainerdOptions{Source: src})
	if err != nil {
		log.Fatal(err)
	}
	defer runtime.Close(ctx)
	agentBin, err := cluster.BuildAgent(ctx, src, cp.Dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	node, err := cp.NewAgent(cluster.AgentOptions{Binary: agentBin, NodeName: "node-1", RuntimeEndpoint: runtime.Endpoint})
	if err != nil {
		log.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer node.Stop()
	fmt.Println("kubectl --kubeconfig", cp.AdminKubeconfig, "get nodes")
}

// Metrics reads an agent's /metrics; Sum adds up matching series.
func ExampleMetrics_Sum() {
	m, err := cluster.ParseMetrics(strings.NewReader(`# TYPE nodekit_node_status_patches_total counter
nodekit_node_status_patches_total{reason="changed"} 2
nodekit_node_status_patches_total{reason="report"} 3
`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Sum("nodekit_node_status_patches_total", nil))
	fmt.Println(m.Sum("nodekit_node_status_patches_total", map[string]string{"reason": "report"}))
	// Output:
	// 5
	// 3
}
