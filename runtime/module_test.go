package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
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

func TestPodsModule(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	img, _ := fakecri.NewImage("busybox", 1)
	srv.AddImage(img)
	endpoint, _ := serve(t, srv, socketPath(t))
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	var (
		pm      *runtime.PodManager
		pleg    *runtime.PLEG
		backend *runtime.Backend
	)
	app := fxtest.New(t,
		runtime.Module,
		runtime.PodsModule,
		fx.Supply(runtime.Options{Endpoint: endpoint}),
		fx.Supply(runtime.PodManagerOptions{PodLogsDir: filepath.Join(dir, "logs"), ContainerLogsDir: filepath.Join(dir, "containers"), PodsDir: filepath.Join(dir, "pods"), MemoryCapacity: 1 << 30}),
		fx.Provide(func() prometheus.Registerer { return reg }),
		fx.Populate(&pm, &pleg, &backend),
	)
	app.RequireStart()
	ctx := testCtx(t)
	pod := newPod("fx", ctr("app"))
	// The pod lifecycle loop syncs through the Backend, which hands the
	// PLEG what it started.
	if res := backend.SyncPod(ctx, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	poll(t, func() bool {
		st, _ := pleg.Cache().Get(pod.UID)
		return st.Container("app") != nil
	})
	if ok, err := pleg.Healthy(); !ok {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "kubelet_started_pods_total"); n != 1 {
		t.Errorf("%d started pods series, want 1", n)
	}
	app.RequireStop()

	if err := fx.ValidateApp(runtime.Module, runtime.PodsModule, fx.Supply(runtime.Options{Endpoint: endpoint}),
		fx.Supply(runtime.PodManagerOptions{}), fx.Invoke(func(*runtime.PodManager, *runtime.PLEG, *runtime.PodCache) {})); err != nil {
		t.Fatal(err)
	}
}
