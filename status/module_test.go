package status_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/machine"
	"github.com/nodekit/nodekit/status"
)

func testMachine() (*machine.Info, error) {
	return &machine.Info{
		NumCores: 2, MemoryCapacity: 4 << 30, EphemeralStorageCapacity: 50e9,
		BootID: "boot", KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12 (bookworm)",
	}, nil
}

// graph is what the agent supplies to status.Module.
func graph(client kubernetes.Interface) fx.Option {
	return fx.Options(
		fx.Supply(status.Options{NodeName: "node-m"}),
		fx.Supply(status.SetterOptions{NodeIPs: []net.IP{net.ParseIP("127.0.0.7")}, Machine: testMachine}),
		fx.Provide(
			func() kubernetes.Interface { return client },
			func() prometheus.Registerer { return prometheus.NewRegistry() },
			func() status.RuntimeVersionFunc {
				return func(context.Context) (string, string, error) { return "fakecri", "1.0", nil }
			},
			func() status.RuntimeHealthFunc {
				return func(context.Context) (error, error) { return nil, nil }
			},
		),
	)
}

func TestModuleGraphIsValid(t *testing.T) {
	if err := fx.ValidateApp(status.Module, graph(fake.NewClientset())); err != nil {
		t.Fatal(err)
	}
}

func TestModuleMissingRuntimeFails(t *testing.T) {
	app := fx.New(status.Module, fx.NopLogger,
		fx.Supply(status.Options{NodeName: "node-m"}, status.SetterOptions{Machine: testMachine}),
		fx.Provide(func() kubernetes.Interface { return fake.NewClientset() }))
	if err := app.Err(); err == nil {
		t.Fatal("a graph without RuntimeHealth/RuntimeVersion started")
	}
}

func TestModuleAddsReplacesAndRemovesSetters(t *testing.T) {
	client := fake.NewClientset()
	var reporter *status.Reporter
	app := fxtest.New(t, status.Module, graph(client),
		// Add a condition.
		status.AsSetter("GPUHealthy", status.OrderPIDPressure+50, func(_ context.Context, n *v1.Node) error {
			n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: "GPUHealthy", Status: v1.ConditionTrue, Reason: "AllGood"})
			return nil
		}),
		// Replace the default addresses.
		status.AsSetter(status.SetterNodeAddress, status.OrderNodeAddress, func(_ context.Context, n *v1.Node) error {
			n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeExternalDNS, Address: "node-m.example.com"}}
			return nil
		}),
		// Remove the daemon endpoints.
		status.AsSetter(status.SetterDaemonEndpoints, 0, nil),
		// One more health check gates Ready.
		status.AsHealthCheck(status.HealthCheck{Name: "PLEG", Healthy: func() (bool, error) {
			return false, errors.New("PLEG is not healthy: pleg was last seen active 4m ago")
		}}),
		fx.Populate(&reporter),
	)
	app.RequireStart()
	select {
	case <-reporter.Registered():
	case <-time.After(30 * time.Second):
		t.Fatal("the node was not registered")
	}
	app.RequireStop()

	node, err := client.CoreV1().Nodes().Get(context.Background(), "node-m", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var gpu, ready *v1.NodeCondition
	for i, c := range node.Status.Conditions {
		switch c.Type {
		case "GPUHealthy":
			gpu = &node.Status.Conditions[i]
		case v1.NodeReady:
			ready = &node.Status.Conditions[i]
		}
	}
	if gpu == nil || gpu.Reason != "AllGood" {
		t.Errorf("custom condition = %+v", gpu)
	}
	if ready == nil || ready.Status != v1.ConditionFalse || ready.Message != "PLEG is not healthy: pleg was last seen active 4m ago" {
		t.Errorf("Ready = %+v, want False from the PLEG check", ready)
	}
	if len(node.Status.Addresses) != 1 || node.Status.Addresses[0].Address != "node-m.example.com" {
		t.Errorf("addresses = %v, want the replacement's", node.Status.Addresses)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != 0 {
		t.Errorf("daemon endpoints = %+v, want the removed setter's field unset", node.Status.DaemonEndpoints)
	}
	if node.Status.NodeInfo.ContainerRuntimeVersion != "fakecri://1.0" || node.Labels["kubernetes.io/hostname"] != "node-m" {
		t.Errorf("runtime version %q, labels %v", node.Status.NodeInfo.ContainerRuntimeVersion, node.Labels)
	}
}

// TestModuleRefusesAMisspeltRemoval: removing a default setter under a
// name no default has (a typo) fails the start instead of removing
// nothing.
func TestModuleRefusesAMisspeltRemoval(t *testing.T) {
	app := fx.New(status.Module, graph(fake.NewClientset()), fx.NopLogger,
		status.AsSetter("DaemonEndpoint", 0, nil))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "DaemonEndpoint") {
		t.Fatalf("start with a misspelt setter name: %v, want an error naming it", err)
	}
}
