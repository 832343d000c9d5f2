package podstatus_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/status/podstatus"
)

func TestModuleRunsTheManager(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	client := fake.NewClientset(p.DeepCopy())
	reg := prometheus.NewPedanticRegistry()
	g := &getter{pods: map[types.UID]*v1.Pod{p.UID: p.DeepCopy()}}
	var (
		iface podstatus.Interface
		m     *podstatus.Manager
	)
	app := fxtest.New(t,
		fx.Provide(
			func() kubernetes.Interface { return client },
			func() prometheus.Registerer { return reg },
			func() podstatus.PodGetter { return g },
		),
		podstatus.Module,
		fx.Populate(&iface, &m),
	)
	app.RequireStart()
	defer app.RequireStop()
	if iface != podstatus.Interface(m) {
		t.Error("Interface is not the *Manager")
	}
	iface.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e := &env{client: client, reg: reg}
	e.waitFor(t, "the write", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
	// The write is counted once Patch returned, after the API server
	// shows it (as TestWritesAStrategicMergePatchWithTheUID).
	e.waitFor(t, "the write counted", func() bool { return e.counter(t, "nodekit_pod_status_patches_total", "patched") >= 1 })
	if got := e.counter(t, "nodekit_pod_status_patches_total", "patched"); got != 1 {
		t.Errorf("the graph's registry counted %v patches", got)
	}
}

func TestModuleValidates(t *testing.T) {
	err := fx.ValidateApp(fx.NopLogger,
		fx.Provide(func() kubernetes.Interface { return fake.NewClientset() }),
		podstatus.Module,
		fx.Invoke(func(podstatus.Interface) {}),
	)
	if err != nil {
		t.Fatal(err)
	}
	// Without a client the Manager keeps statuses locally (a standalone
	// node).
	if err := fx.ValidateApp(fx.NopLogger, podstatus.Module, fx.Invoke(func(podstatus.Interface) {})); err != nil {
		t.Errorf("a graph without kubernetes.Interface: %v", err)
	}
}
