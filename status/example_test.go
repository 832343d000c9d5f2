package status_test

import (
	"context"
	"fmt"
	"net"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/machine"
	"github.com/nodekit/nodekit/status"
)

// An embedder adds its own node condition and replaces the default address
// setter; everything else comes from status.Module. The fake clientset and
// the fixed machine stand in for the cluster and the host.
func Example() {
	client := fake.NewClientset()
	var reporter *status.Reporter
	app := fx.New(fx.NopLogger,
		status.Module,
		// What the agent supplies.
		fx.Supply(
			status.Options{NodeName: "edge-1", Labels: map[string]string{"example.com/site": "lab"}},
			status.SetterOptions{Machine: func() (*machine.Info, error) {
				return &machine.Info{NumCores: 4, MemoryCapacity: 8 << 30, EphemeralStorageCapacity: 100e9,
					BootID: "b1", KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12 (bookworm)"}, nil
			}},
		),
		fx.Provide(
			func() kubernetes.Interface { return client },
			func() status.RuntimeVersionFunc {
				return func(context.Context) (string, string, error) { return "containerd", "1.6.20", nil }
			},
			func() status.RuntimeHealthFunc {
				return func(context.Context) (error, error) { return nil, nil }
			},
		),
		// The embedder's own condition, before Ready.
		status.AsSetter("GPUHealthy", status.OrderPIDPressure+50, status.Setter(func(_ context.Context, n *v1.Node) error {
			n.Status.Conditions = append(n.Status.Conditions[:len(n.Status.Conditions):len(n.Status.Conditions)],
				v1.NodeCondition{Type: "GPUHealthy", Status: v1.ConditionTrue, Reason: "DriverLoaded"})
			return nil
		})),
		// A replacement for the default NodeAddress setter: the site's
		// fixed addresses.
		status.AsSetter(status.SetterNodeAddress, status.OrderNodeAddress, status.Setter(func(_ context.Context, n *v1.Node) error {
			n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.10"}, {Type: v1.NodeHostName, Address: "edge-1.lab"}}
			return nil
		})),
		fx.Populate(&reporter),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	<-reporter.Registered()
	if err := app.Stop(ctx); err != nil {
		fmt.Println(err)
	}

	node, err := client.CoreV1().Nodes().Get(ctx, "edge-1", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("site:", node.Labels["example.com/site"])
	fmt.Println("runtime:", node.Status.NodeInfo.ContainerRuntimeVersion)
	fmt.Println("allocatable cpu:", node.Status.Allocatable.Cpu(), "pods:", node.Status.Allocatable.Pods())
	for _, a := range node.Status.Addresses {
		fmt.Println("address:", a.Type, a.Address)
	}
	for _, c := range node.Status.Conditions {
		fmt.Println("condition:", c.Type, c.Status, c.Reason)
	}
	// Output:
	// site: lab
	// runtime: containerd://1.6.20
	// allocatable cpu: 4 pods: 110
	// address: InternalIP 127.0.0.10
	// address: Hostname edge-1.lab
	// condition: MemoryPressure False KubeletHasSufficientMemory
	// condition: DiskPressure False KubeletHasNoDiskPressure
	// condition: PIDPressure False KubeletHasSufficientPID
	// condition: GPUHealthy True DriverLoaded
	// condition: Ready True KubeletReady
}

// Without fx: the default setters plus the embedder's, in Options.Setters.
func ExampleNew() {
	setters, err := status.DefaultSetters(status.SetterOptions{
		Hostname: "edge-2",
		NodeIPs:  []net.IP{net.ParseIP("127.0.0.11")},
		Machine: func() (*machine.Info, error) {
			return &machine.Info{NumCores: 2, MemoryCapacity: 4 << 30, EphemeralStorageCapacity: 20e9, BootID: "b2"}, nil
		},
		RuntimeVersion: func(context.Context) (string, string, error) { return "containerd", "2.0.0", nil },
		RuntimeHealth: func(context.Context) (error, error) {
			return nil, fmt.Errorf("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady")
		},
		MaxPods: 30,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := fake.NewClientset()
	r, err := status.New(status.Options{Client: client, NodeName: "edge-2", Setters: setters})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	<-r.Registered()
	cancel()
	fmt.Println("run:", <-done)

	node, _ := client.CoreV1().Nodes().Get(context.Background(), "edge-2", metav1.GetOptions{})
	ready := node.Status.Conditions[len(node.Status.Conditions)-1]
	fmt.Println(ready.Type, ready.Status, ready.Reason)
	fmt.Println(ready.Message)
	fmt.Println("pods:", node.Status.Capacity.Pods())
	// Output:
	// run: <nil>
	// Ready False KubeletNotReady
	// container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady
	// pods: 30
}
