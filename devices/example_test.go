package devices_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/devices"
)

// A Manager serving the registration socket in the device plugin
// directory; before any plugin registers, the node has no device resources.
func Example() {
	dir, _ := os.MkdirTemp("", "devices")
	defer os.RemoveAll(dir)
	m, err := devices.New(devices.Options{PluginDir: filepath.Join(dir, "device-plugins")})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	node := &v1.Node{}
	_ = m.SetNodeStatus(ctx, node)
	fmt.Println("device resources:", len(node.Status.Capacity))
	fmt.Println("socket:", filepath.Base(m.SocketPath()))
	// Output:
	// device resources: 0
	// socket: kubelet.sock
}
