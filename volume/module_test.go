package volume

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/mount-utils"
)

func TestModule(t *testing.T) {
	client := fake.NewClientset()
	reg := prometheus.NewRegistry()
	recorder := record.NewFakeRecorder(10)
	var m *Manager
	app := fxtest.New(t,
		fx.Supply(Options{RootDir: t.TempDir(), Mounter: mount.NewFakeMounter(nil)}),
		fx.Provide(func() kubernetes.Interface { return client }),
		fx.Provide(func() prometheus.Registerer { return reg }),
		fx.Provide(func() record.EventRecorder { return recorder }),
		AsPlugin(func() Plugin { return attachable{} }),
		Module,
		fx.Populate(&m),
	)
	app.RequireStart()
	if m.opts.Client != kubernetes.Interface(client) || m.opts.Recorder != record.EventRecorder(recorder) || m.opts.Registerer != prometheus.Registerer(reg) {
		t.Error("the graph's client, recorder or registerer was not used")
	}
	if m.byName["example.com/disk"] == nil {
		t.Error("the group's plugin was not added")
	}
	// The lifecycle started Run.
	deadline := time.Now().Add(10 * time.Second)
	for !m.ReconcilerSynced() {
		if time.Now().After(deadline) {
			t.Fatal("Run did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	app.RequireStop()
}
