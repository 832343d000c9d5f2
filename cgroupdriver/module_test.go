package cgroupdriver

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

// countingDriver counts Create calls, to see that a decorated driver is
// the one the Manager uses.
type countingDriver struct {
	Driver
	creates *atomic.Int32
}

func (d countingDriver) Create(ctx context.Context, n Name, r ResourceConfig) error {
	d.creates.Add(1)
	return d.Driver.Create(ctx, n, r)
}

func TestModuleValidates(t *testing.T) {
	err := fx.ValidateApp(
		fx.Supply(Options{}),
		Module,
	)
	if err != nil {
		t.Fatal(err)
	}
}

func TestModuleRunsAndSwapsDriver(t *testing.T) {
	root := fakeV1Tree(t)
	reg := prometheus.NewPedanticRegistry()
	var creates atomic.Int32
	var m *Manager
	app := fxtest.New(t,
		fx.Supply(Options{FS: FSOptions{Root: root}}),
		fx.Provide(
			func() prometheus.Registerer { return reg },
			func() clock.Clock { return testclock.NewFakeClock(time.Now()) },
			func() logr.Logger { return logr.Discard() },
		),
		Module,
		fx.Decorate(func(d Driver) Driver { return countingDriver{Driver: d, creates: &creates} }),
		fx.Populate(&m),
	)
	app.RequireStart()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return exists(filepath.Join(root, "cpu/kubepods/besteffort")), nil
	})
	if err != nil {
		t.Fatalf("Run did not create the QoS cgroups: %v", err)
	}
	if _, ok := m.Driver().(countingDriver); !ok {
		t.Errorf("the Manager uses %T, not the decorated driver", m.Driver())
	}
	parent, err := m.EnsurePod(context.Background(), guaranteedPod)
	if err != nil || parent != "/kubepods/podg-1" {
		t.Errorf("EnsurePod = %q, %v", parent, err)
	}
	if got := creates.Load(); got != 4 {
		t.Errorf("decorated driver saw %d creates, want 4", got)
	}
	if _, ok := m.clock.(*testclock.FakeClock); !ok {
		t.Errorf("the graph's clock was not used: %T", m.clock)
	}
	if histogramCount(t, reg, opCreate) != 4 {
		t.Error("the graph's registerer did not receive the metrics")
	}
	app.RequireStop()
}

func TestModuleShutsDownOnDriverMismatch(t *testing.T) {
	root := fakeV1Tree(t)
	app := fxtest.New(t,
		fx.Supply(Options{
			FS: FSOptions{Root: root},
			RuntimeCgroupDriver: func(context.Context) (runtimeapi.CgroupDriver, bool, error) {
				return runtimeapi.CgroupDriver_SYSTEMD, true, nil
			},
		}),
		fx.Provide(func() logr.Logger { return logr.Discard() }),
		Module,
	)
	app.RequireStart()
	select {
	case sig := <-app.Wait():
		if sig.ExitCode != 1 {
			t.Errorf("exit code %d, want 1", sig.ExitCode)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the application was not shut down")
	}
	app.RequireStop()
	if exists(filepath.Join(root, "cpu/kubepods")) {
		t.Error("cgroups were created despite the mismatch")
	}
}
