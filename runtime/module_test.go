package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	cri "k8s.io/cri-api/pkg/apis"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

func TestModule(t *testing.T) {
	endpoint, _ := serve(t, fakecri.New(fakecri.Options{}), socketPath(t))
	reg := prometheus.NewRegistry()
	var (
		client *runtime.Client
		rs     cri.RuntimeService
		is     cri.ImageManagerService
	)
	app := fxtest.New(t,
		runtime.Module,
		fx.Supply(runtime.Options{Endpoint: endpoint}),
		fx.Provide(func() prometheus.Registerer { return reg }),
		fx.Populate(&client, &rs, &is),
	)
	app.RequireStart()
	ctx := context.Background()
	if _, err := rs.Version(ctx, "0.1.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := is.ImageFsInfo(ctx); err != nil {
		t.Fatal(err)
	}
	if h := client.Health(ctx); h.RuntimeErr != nil {
		t.Fatal(h.RuntimeErr)
	}
	if n := testutil.CollectAndCount(reg, "kubelet_runtime_operations_total"); n != 3 {
		t.Errorf("%d operation series in the graph's registry, want 3", n)
	}
	app.RequireStop()
	if _, err := rs.Version(ctx, "0.1.0"); !errors.Is(err, runtime.ErrClosed) {
		t.Fatalf("Version after stop = %v, want ErrClosed", err)
	}
}

func TestModuleStartsWithoutRuntime(t *testing.T) {
	app := fxtest.New(t,
		runtime.Module,
		fx.Supply(runtime.Options{Endpoint: socketPath(t)}),
		fx.Invoke(func(*runtime.Client, cri.RuntimeService, cri.ImageManagerService) {}),
	)
	app.RequireStart()
	app.RequireStop()
}

func TestModuleRejectsBadOptions(t *testing.T) {
	err := fx.ValidateApp(runtime.Module, fx.Supply(runtime.Options{}), fx.Invoke(func(*runtime.Client) {}))
	if err != nil {
		t.Fatalf("ValidateApp: %v", err)
	}
	app := fx.New(runtime.Module, fx.Supply(runtime.Options{}), fx.Invoke(func(*runtime.Client) {}), fx.NopLogger)
	if app.Err() == nil {
		t.Fatal("the module built a client without an endpoint")
	}
}
