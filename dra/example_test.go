package dra_test

import (
	"context"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/dra"
)

// A Manager refuses a DRA plugin whose gRPC services it does not speak,
// and a pod without ResourceClaims needs nothing prepared.
func Example() {
	dir, _ := os.MkdirTemp("", "dra")
	defer os.RemoveAll(dir)
	m, err := dra.New(dra.Options{NodeName: "node-1", StateDir: dir})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	fmt.Println(m.ValidatePlugin(ctx, "gpu.example.com", "/var/lib/kubelet/plugins/gpu/dra.sock", []string{"v1alpha3.Node"}))
	fmt.Println(m.ValidatePlugin(ctx, "gpu.example.com", "/var/lib/kubelet/plugins/gpu/dra.sock", dra.SupportedServices))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	fmt.Println(m.PrepareResources(ctx, pod))
	// Output:
	// invalid supported gRPC versions of DRA driver plugin gpu.example.com at endpoint /var/lib/kubelet/plugins/gpu/dra.sock: none of services supported by the plugin (["v1alpha3.Node"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])
	// <nil>
	// <nil>
}
