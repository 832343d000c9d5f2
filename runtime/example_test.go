package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// Example creates a client before the runtime is up, as an agent started at
// boot does, and uses it once the runtime (here the in-process fake) serves.
func Example() {
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "cri.sock")

	client, err := runtime.New(runtime.Options{Endpoint: "unix://" + socket})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()

	fmt.Println("runtime down:", client.Health(ctx).RuntimeErr != nil)

	fake := fakecri.New(fakecri.Options{RuntimeName: "fakecri", RuntimeVersion: "1.2.3"})
	_, stop, err := fake.Start(socket)
	if err != nil {
		panic(err)
	}
	defer stop()

	name, version, err := client.Version(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("containerRuntimeVersion: %s://%s\n", name, version)

	fake.SetNetworkReady(false, "NetworkPluginNotReady", "cni plugin not initialized")
	h := client.Health(ctx)
	fmt.Println("runtime:", h.RuntimeErr)
	fmt.Println("network:", h.NetworkErr)

	driver, ok, err := client.CgroupDriver(ctx)
	fmt.Println("cgroup driver:", driver, ok, err)
	// Output:
	// runtime down: true
	// containerRuntimeVersion: fakecri://1.2.3
	// runtime: <nil>
	// network: container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized
	// cgroup driver: SYSTEMD true <nil>
}
