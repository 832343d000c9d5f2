package agent_test

import (
	"fmt"

	"go.uber.org/fx"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/lease"
)

// ParseFlags reads the kubelet's command line: flags override the
// KubeletConfiguration file, and what neither sets has the kubelet's
// default.
func ExampleParseFlags() {
	cfg, err := agent.ParseFlags(klog.Background(), []string{
		"--hostname-override=Worker-1",
		"--node-labels=role=edge",
		"--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
		"--max-pods=50",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.NodeName, cfg.NodeLabels["role"], cfg.Kubelet.MaxPods)
	fmt.Println(cfg.Kubelet.NodeStatusUpdateFrequency.Duration, cfg.Kubelet.NodeLeaseDurationSeconds)
	// Output:
	// worker-1 edge 50
	// 10s 40
}

// An embedder replaces one default piece with fx.Decorate and checks the
// graph without starting anything.
func ExampleModule() {
	cfg, err := agent.ParseFlags(klog.Background(), []string{"--hostname-override=worker-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = fx.ValidateApp(
		fx.Supply(cfg),
		agent.Module,
		fx.Decorate(func(o lease.Options) lease.Options {
			o.LeaseDurationSeconds = 20
			return o
		}),
	)
	fmt.Println("valid:", err == nil)
	// Output: valid: true
}
