package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// ExamplePodManager runs a pod that exits on the fake runtime: a sync starts
// it, and a sync after it exited leaves it exited (restartPolicy Never) and
// stops its sandbox.
func ExamplePodManager() {
	dir, err := os.MkdirTemp("", "pods")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	fake := fakecri.New(fakecri.Options{PullAny: true})
	endpoint, stop, err := fake.Start(filepath.Join(dir, "cri.sock"))
	if err != nil {
		panic(err)
	}
	defer stop()
	client, err := runtime.New(runtime.Options{Endpoint: endpoint})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	pm, err := runtime.NewPodManager(runtime.PodManagerOptions{
		Runtime:          client.RuntimeService(),
		Images:           client.ImageService(),
		PodLogsDir:       filepath.Join(dir, "logs"),
		ContainerLogsDir: filepath.Join(dir, "containers"),
		PodsDir:          filepath.Join(dir, "pods"),
		MemoryCapacity:   1 << 30,
	})
	if err != nil {
		panic(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default", UID: "1234"},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyNever,
			Containers:    []v1.Container{{Name: "main", Image: "busybox:1.36", Command: []string{"sh", "-c", "echo done; exit 0"}}},
		},
	}
	ctx := context.Background()
	for range 2 {
		status, err := pm.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			panic(err)
		}
		if res := pm.SyncPod(ctx, pod, status, runtime.SyncInput{}); res.Err != nil {
			panic(res.Err)
		}
	}
	status, err := pm.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		panic(err)
	}
	c := status.Container("main")
	fmt.Println("container:", c.State, "exit code", c.ExitCode, c.Reason)
	fmt.Println("sandbox ready:", status.Sandboxes[0].Ready)
	log, err := os.ReadFile(runtime.ContainerLogPath(filepath.Join(dir, "logs"), "default", "job", "1234", "main", 0))
	if err != nil {
		panic(err)
	}
	fmt.Println("log ends with:", strings.SplitN(string(log), " ", 4)[3])
	// Output:
	// container: exited exit code 0 Completed
	// sandbox ready: false
	// log ends with: done
}
