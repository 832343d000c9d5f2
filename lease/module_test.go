package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/lease"
)

// waitForLease polls client until the node lease exists and returns it.
func waitForLease(t *testing.T, client kubernetes.Interface) *metav1.ObjectMeta {
	t.Helper()
	var meta *metav1.ObjectMeta
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, wait.ForeverTestTimeout, true,
		func(ctx context.Context) (bool, error) {
			l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			meta = &l.ObjectMeta
			return l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(t0), nil
		})
	if err != nil {
		t.Fatalf("lease %s/%s not written at %v: %v", corev1.NamespaceNodeLease, nodeName, t0, err)
	}
	return meta
}

func TestModuleRunsTheController(t *testing.T) {
	client := fake.NewClientset(node())
	reg := prometheus.NewPedanticRegistry()
	var ctrl *lease.Controller
	app := fxtest.New(t,
		fx.Supply(lease.Options{NodeName: nodeName}),
		fx.Provide(
			func() kubernetes.Interface { return client },
			func() clock.Clock { return newRecordingClock() },
			func() prometheus.Registerer { return reg },
		),
		lease.Module,
		fx.Populate(&ctrl),
	)
	app.RequireStart()
	// The graph's client, clock (renewTime = t0) and registry are used.
	waitForLease(t, client)
	if ctrl == nil {
		t.Fatal("Module provided no *Controller")
	}
	if got := failureCount(t, reg, "get"); got != 0 {
		t.Errorf("get failures = %v, want 0", got)
	}
	stopped := make(chan struct{})
	go func() { app.RequireStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("app did not stop")
	}
}

func TestModuleOptionsOverrideTheGraph(t *testing.T) {
	graphClient := fake.NewClientset(node())
	ownClient := fake.NewClientset(node())
	app := fxtest.New(t,
		fx.Supply(lease.Options{NodeName: nodeName, Client: ownClient, Clock: newRecordingClock()}),
		fx.Provide(func() kubernetes.Interface { return graphClient }),
		lease.Module,
	)
	app.RequireStart()
	waitForLease(t, ownClient)
	app.RequireStop()
	if n := len(graphClient.Actions()); n != 0 {
		t.Errorf("graph client got %d requests, want 0", n)
	}
}

func TestModuleGraph(t *testing.T) {
	client := func() kubernetes.Interface { return fake.NewClientset() }
	if err := fx.ValidateApp(fx.Supply(lease.Options{NodeName: nodeName}), fx.Provide(client), lease.Module); err != nil {
		t.Errorf("graph with only the required dependencies: %v", err)
	}
	if err := fx.ValidateApp(fx.Supply(lease.Options{NodeName: nodeName}), lease.Module); err == nil {
		t.Error("graph without kubernetes.Interface validated")
	}
	app := fx.New(fx.NopLogger, fx.Supply(lease.Options{}), fx.Provide(client), lease.Module)
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "NodeName is required") {
		t.Errorf("invalid Options: app error = %v, want NodeName is required", err)
	}
}
