package runtime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// socketPath returns a socket path in a fresh short directory: t.TempDir can
// exceed the 107 bytes a unix socket path may have.
func socketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "cri.sock")
}

// serve starts srv at path and stops it when the test ends; it returns the
// endpoint and the stop function.
func serve(t testing.TB, srv *fakecri.Server, path string) (string, func()) {
	t.Helper()
	endpoint, stop, err := srv.Start(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return endpoint, stop
}

func newClient(t testing.TB, opts runtime.Options) *runtime.Client {
	t.Helper()
	c, err := runtime.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestVersion(t *testing.T) {
	srv := fakecri.New(fakecri.Options{RuntimeName: "containerd", RuntimeVersion: "v2.1.4"})
	endpoint, _ := serve(t, srv, socketPath(t))
	c := newClient(t, runtime.Options{Endpoint: endpoint})
	name, version, err := c.Version(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if name != "containerd" || version != "v2.1.4" {
		t.Fatalf("Version = %q, %q", name, version)
	}
	// cri-client rejects a version response with empty fields.
	srv.SetVersion("", "")
	if _, _, err := c.Version(testCtx(t)); err == nil {
		t.Fatal("Version accepted an empty runtime name and version")
	}
}

func TestHealth(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	endpoint, _ := serve(t, srv, socketPath(t))
	c := newClient(t, runtime.Options{Endpoint: endpoint})

	h := c.Health(testCtx(t))
	if h.RuntimeErr != nil || h.NetworkErr != nil {
		t.Fatalf("healthy runtime: %+v", h)
	}
	if len(h.Handlers) != 2 || h.Handlers[1].Name != "runc" {
		t.Errorf("handlers %v", h.Handlers)
	}

	srv.SetNetworkReady(false, "NetworkPluginNotReady", "cni plugin not initialized")
	h = c.Health(testCtx(t))
	if h.RuntimeErr != nil {
		t.Errorf("RuntimeErr = %v with only the network down", h.RuntimeErr)
	}
	if want := "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized"; h.NetworkErr == nil || h.NetworkErr.Error() != want {
		t.Errorf("NetworkErr = %v, want %q", h.NetworkErr, want)
	}

	srv.SetRuntimeReady(false, "Starting", "still starting")
	h = c.Health(testCtx(t))
	if want := "container runtime not ready: RuntimeReady=false reason:Starting message:still starting"; h.RuntimeErr == nil || h.RuntimeErr.Error() != want {
		t.Errorf("RuntimeErr = %v, want %q", h.RuntimeErr, want)
	}

	if err := srv.SetError("Status", status.Error(codes.Internal, "boom")); err != nil {
		t.Fatal(err)
	}
	h = c.Health(testCtx(t))
	if h.RuntimeErr == nil || !strings.HasPrefix(h.RuntimeErr.Error(), "container runtime is down: ") || status.Code(h.RuntimeErr) != codes.Internal {
		t.Errorf("RuntimeErr = %v, want container runtime is down wrapping the Internal status", h.RuntimeErr)
	}
	if h.NetworkErr != nil || h.Handlers != nil {
		t.Errorf("a failed Status reported network %v and handlers %v", h.NetworkErr, h.Handlers)
	}
}

func TestUnreachableRuntime(t *testing.T) {
	c := newClient(t, runtime.Options{Endpoint: socketPath(t)})
	ctx := testCtx(t)
	h := c.Health(ctx)
	if h.RuntimeErr == nil || !strings.Contains(h.RuntimeErr.Error(), "container runtime is down") {
		t.Fatalf("RuntimeErr = %v, want container runtime is down", h.RuntimeErr)
	}
	if _, _, err := c.Version(ctx); err == nil {
		t.Error("Version succeeded without a runtime")
	}
	if _, _, err := c.CgroupDriver(ctx); err == nil {
		t.Error("CgroupDriver succeeded without a runtime")
	}
	if _, err := c.ImageService().ListImages(ctx, nil); err == nil {
		t.Error("ListImages succeeded without a runtime")
	}
	if _, err := c.RuntimeService().ListContainers(ctx, nil); err == nil {
		t.Error("ListContainers succeeded without a runtime")
	}
}

func TestRuntimeStartedAfterNew(t *testing.T) {
	path := socketPath(t)
	c := newClient(t, runtime.Options{Endpoint: "unix://" + path})
	ctx := testCtx(t)
	if _, _, err := c.Version(ctx); err == nil {
		t.Fatal("Version succeeded before the runtime started")
	}
	if _, err := c.ImageService().ImageFsInfo(ctx); err == nil {
		t.Fatal("ImageFsInfo succeeded before the runtime started")
	}

	srv := fakecri.New(fakecri.Options{})
	serve(t, srv, path)
	if _, _, err := c.Version(ctx); err != nil {
		t.Fatalf("Version after the runtime started: %v", err)
	}
	if h := c.Health(ctx); h.RuntimeErr != nil {
		t.Fatalf("Health after the runtime started: %v", h.RuntimeErr)
	}
	if _, err := c.ImageService().ImageFsInfo(ctx); err != nil {
		t.Fatalf("ImageFsInfo after the runtime started: %v", err)
	}
}

func TestReconnectsAfterRuntimeRestart(t *testing.T) {
	path := socketPath(t)
	srv := fakecri.New(fakecri.Options{})
	endpoint, stop := serve(t, srv, path)
	c := newClient(t, runtime.Options{Endpoint: endpoint})
	ctx := testCtx(t)
	if _, _, err := c.Version(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	if h := c.Health(ctx); h.RuntimeErr == nil {
		t.Fatal("Health is fine with the runtime stopped")
	}
	serve(t, srv, path)
	// gRPC redials with back-off (at most 3 s apart in cri-client).
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 25*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.Health(ctx).RuntimeErr == nil, nil
	})
	if err != nil {
		t.Fatalf("the client did not reconnect after the runtime restarted: %v", err)
	}
}

func TestCgroupDriver(t *testing.T) {
	srv := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
	endpoint, _ := serve(t, srv, socketPath(t))
	c := newClient(t, runtime.Options{Endpoint: endpoint})
	ctx := testCtx(t)

	driver, ok, err := c.CgroupDriver(ctx)
	if err != nil || !ok || driver != runtimeapi.CgroupDriver_CGROUPFS {
		t.Fatalf("CgroupDriver = %v, %v, %v; want cgroupfs", driver, ok, err)
	}
	srv.SetCgroupDriver(runtimeapi.CgroupDriver_SYSTEMD)
	driver, ok, err = c.CgroupDriver(ctx)
	if err != nil || !ok || driver != runtimeapi.CgroupDriver_SYSTEMD {
		t.Fatalf("CgroupDriver = %v, %v, %v; want systemd", driver, ok, err)
	}
	srv.SetCgroupDriver(runtimeapi.CgroupDriver(7))
	if _, ok, err := c.CgroupDriver(ctx); err == nil || ok {
		t.Fatalf("CgroupDriver accepted an unknown driver: ok=%v err=%v", ok, err)
	}

	if err := srv.SetUnimplemented("RuntimeConfig"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.CgroupDriver(ctx); err != nil || ok {
		t.Fatalf("CgroupDriver on a runtime without RuntimeConfig = ok %v, err %v; want false, nil", ok, err)
	}
	if err := srv.SetError("RuntimeConfig", status.Error(codes.Unavailable, "busy")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.CgroupDriver(ctx); err == nil || ok {
		t.Fatalf("CgroupDriver hid a failure: ok %v, err %v", ok, err)
	}
}

func TestUnimplementedRPCReachesCaller(t *testing.T) {
	// Like containerd 1.6, without the container event stream.
	endpoint, _ := serve(t, fakecri.New(fakecri.Options{Unimplemented: []string{"GetContainerEvents"}}), socketPath(t))
	c := newClient(t, runtime.Options{Endpoint: endpoint})
	events := make(chan *runtimeapi.ContainerEventResponse, 1)
	err := c.RuntimeService().GetContainerEvents(testCtx(t), events, nil)
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetContainerEvents = %v, want Unimplemented", err)
	}
}

func TestFailedHandshakeRetriesArePaced(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	endpoint, _ := serve(t, srv, socketPath(t))
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newClient(t, runtime.Options{Endpoint: endpoint, Clock: clk})
	ctx := testCtx(t)

	if err := srv.SetError("Version", status.Error(codes.Unavailable, "starting")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Version(ctx); err == nil {
		t.Fatal("Version succeeded through a failing handshake")
	}
	if n := srv.Calls("Version"); n != 1 {
		t.Fatalf("%d Version calls, want the 1 handshake", n)
	}
	if err := srv.SetError("Version", nil); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Version(ctx)
	if err == nil || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("Version within the retry interval = %v, want the handshake's error again", err)
	}
	if n := srv.Calls("Version"); n != 1 {
		t.Fatalf("%d Version calls: the client retried the handshake at once", n)
	}
	clk.Step(time.Second)
	if _, _, err := c.Version(ctx); err != nil {
		t.Fatalf("Version after the retry interval: %v", err)
	}
}

func TestConcurrentFirstUse(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	endpoint, _ := serve(t, srv, socketPath(t))
	c := newClient(t, runtime.Options{Endpoint: endpoint})
	ctx := testCtx(t)
	const callers = 16
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := c.Version(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// One handshake, then one call each: a single connection was built.
	if n := srv.Calls("Version"); n != callers+1 {
		t.Errorf("%d Version calls, want %d", n, callers+1)
	}
}

func TestSeparateImageEndpoint(t *testing.T) {
	runtimeSrv := fakecri.New(fakecri.Options{})
	imageSrv := fakecri.New(fakecri.Options{})
	imageSrv.AddImage(&runtimeapi.Image{RepoTags: []string{"pause:3.10"}, Size: 1})
	endpoint, _ := serve(t, runtimeSrv, socketPath(t))
	imageEndpoint, _ := serve(t, imageSrv, socketPath(t))
	c := newClient(t, runtime.Options{Endpoint: endpoint, ImageEndpoint: imageEndpoint})
	images, err := c.ImageService().ListImages(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(images) != 1 || runtimeSrv.Calls("ListImages") != 0 {
		t.Fatalf("ListImages = %v, runtime endpoint got %d calls; want the image endpoint's one image", images, runtimeSrv.Calls("ListImages"))
	}
}

func TestMetrics(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	endpoint, _ := serve(t, srv, socketPath(t))
	reg := prometheus.NewRegistry()
	c := newClient(t, runtime.Options{Endpoint: endpoint, Registerer: reg})
	ctx := testCtx(t)

	for range 2 {
		if _, _, err := c.Version(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ImageService().PullImage(ctx, &runtimeapi.ImageSpec{Image: "missing"}, nil, nil); err == nil {
		t.Fatal("pulled an image the fake registry does not have")
	}
	if _, err := c.RuntimeService().RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, "runc"); err == nil {
		t.Fatal("RunPodSandbox succeeded on a fake without sandboxes")
	}

	// A second client on the same registry shares the metrics.
	other := newClient(t, runtime.Options{Endpoint: endpoint, Registerer: reg})
	if _, _, err := other.Version(ctx); err != nil {
		t.Fatal(err)
	}

	want := `
# HELP kubelet_runtime_operations_errors_total Cumulative number of runtime operation errors by operation type.
# TYPE kubelet_runtime_operations_errors_total counter
kubelet_runtime_operations_errors_total{operation_type="pull_image"} 1
kubelet_runtime_operations_errors_total{operation_type="run_podsandbox"} 1
# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_total counter
kubelet_runtime_operations_total{operation_type="pull_image"} 1
kubelet_runtime_operations_total{operation_type="run_podsandbox"} 1
kubelet_runtime_operations_total{operation_type="version"} 3
# HELP kubelet_run_podsandbox_errors_total Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.
# TYPE kubelet_run_podsandbox_errors_total counter
kubelet_run_podsandbox_errors_total{runtime_handler="runc"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kubelet_runtime_operations_total", "kubelet_runtime_operations_errors_total", "kubelet_run_podsandbox_errors_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "kubelet_runtime_operations_duration_seconds"); n != 3 {
		t.Fatalf("%d duration series, want one per operation type (3)", n)
	}
}

func TestClose(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	endpoint, _ := serve(t, srv, socketPath(t))
	c, err := runtime.New(runtime.Options{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, _, err := c.Version(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if _, _, err := c.Version(ctx); !errors.Is(err, runtime.ErrClosed) {
		t.Errorf("Version after Close = %v, want ErrClosed", err)
	}
	if _, err := c.ImageService().ListImages(ctx, nil); !errors.Is(err, runtime.ErrClosed) {
		t.Errorf("ListImages after Close = %v, want ErrClosed", err)
	}
}

// TestInProcessServices: a Client given in-process services (fakecri's
// Server.InProcess) uses them without an endpoint, records the CRI
// operation metrics for them, names them in its errors, and closes them.
func TestInProcessServices(t *testing.T) {
	srv := fakecri.New(fakecri.Options{RuntimeName: "in-process-fake"})
	rt, img := srv.InProcess()
	reg := prometheus.NewRegistry()
	c, err := runtime.New(runtime.Options{RuntimeService: rt, ImageService: img, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if name, _, err := c.Version(ctx); err != nil || name != "in-process-fake" {
		t.Fatalf("Version = %q, %v; want in-process-fake", name, err)
	}
	if h := c.Health(ctx); h.RuntimeErr != nil || h.NetworkErr != nil {
		t.Fatalf("Health = %+v, want a healthy runtime", h)
	}
	if _, err := c.ImageService().ListImages(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetError("RuntimeConfig", status.Error(codes.Unavailable, "down")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CgroupDriver(ctx); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "in-process") {
		t.Fatalf("CgroupDriver with RuntimeConfig failing = %v, want Unavailable naming the in-process runtime", err)
	}
	want := `
# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_total counter
kubelet_runtime_operations_total{operation_type="list_images"} 1
kubelet_runtime_operations_total{operation_type="runtime_config"} 1
kubelet_runtime_operations_total{operation_type="status"} 1
kubelet_runtime_operations_total{operation_type="version"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_runtime_operations_total"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Version(ctx); !errors.Is(err, runtime.ErrClosed) {
		t.Errorf("Version after Close = %v, want ErrClosed", err)
	}
	if _, err := rt.Status(ctx, false); status.Code(err) != codes.Canceled {
		t.Errorf("the in-process runtime service after the Client's Close: %v, want it closed (Canceled)", err)
	}
	if _, err := img.ImageFsInfo(ctx); status.Code(err) != codes.Canceled {
		t.Errorf("the in-process image service after the Client's Close: %v, want it closed (Canceled)", err)
	}

	// One in-process service beside a dialled one.
	endpoint, _ := serve(t, srv, socketPath(t))
	_, img = srv.InProcess()
	mixed := newClient(t, runtime.Options{Endpoint: endpoint, ImageService: img})
	if _, _, err := mixed.Version(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mixed.ImageService().ImageFsInfo(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	for name, opts := range map[string]runtime.Options{
		"no endpoint":         {},
		"tcp endpoint":        {Endpoint: "tcp://127.0.0.1:1234"},
		"relative path":       {Endpoint: "run/cri.sock"},
		"unix without path":   {Endpoint: "unix://"},
		"unix with host":      {Endpoint: "unix://run/cri.sock"},
		"bad image endpoint":  {Endpoint: "/run/cri.sock", ImageEndpoint: "http://x"},
		"negative timeout":    {Endpoint: "/run/cri.sock", ConnectionTimeout: -time.Second},
		"unsupported scheme":  {Endpoint: "npipe:////./pipe/cri"},
		"clashing registerer": {Endpoint: "/run/cri.sock", Registerer: clashingRegistry(t)},
	} {
		t.Run(name, func(t *testing.T) {
			if c, err := runtime.New(opts); err == nil {
				c.Close()
				t.Fatalf("New(%+v) succeeded", opts)
			}
		})
	}
	// A bare absolute path means a unix socket.
	c, err := runtime.New(runtime.Options{Endpoint: "/run/containerd/containerd.sock"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// clashingRegistry returns a registry that already holds a different
// collector under one of the client's metric names.
func clashingRegistry(t *testing.T) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubelet_runtime_operations_total", Help: "clash"}))
	return reg
}

// logLines is a logger whose lines (Info lines with their V level, Error
// lines marked "ERROR") are collected, and the lines so far.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10, LogInfoLevel: ptr.To("v")})
}

func (l *logLines) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, `"error"=`) { // funcr's Error lines
			out = append(out, line)
		}
	}
	return out
}

// TestOptionalRPCsLogNoError: a runtime without RuntimeConfig and the
// container event stream (containerd 1.6) is healthy; cri-client's error
// lines for the two Unimplemented answers become V(4) info lines, while
// any other failure of theirs stays an error line.
func TestOptionalRPCsLogNoError(t *testing.T) {
	srv := fakecri.New(fakecri.Options{Unimplemented: []string{"RuntimeConfig", "GetContainerEvents"}})
	endpoint, _ := serve(t, srv, socketPath(t))
	c := newClient(t, runtime.Options{Endpoint: endpoint})
	var log logLines
	ctx := klog.NewContext(testCtx(t), log.logger())
	if _, ok, err := c.CgroupDriver(ctx); err != nil || ok {
		t.Fatalf("CgroupDriver = ok %v, err %v; want false, nil", ok, err)
	}
	events := make(chan *runtimeapi.ContainerEventResponse, 1)
	if err := c.RuntimeService().GetContainerEvents(ctx, events, nil); status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetContainerEvents = %v, want Unimplemented", err)
	}
	if errs := log.errors(); len(errs) != 0 {
		t.Errorf("error lines for a runtime without optional RPCs:\n%s", strings.Join(errs, "\n"))
	}
	quiet := 0
	for _, line := range log.lines {
		if strings.Contains(line, `"v"=4`) && strings.Contains(line, "Unimplemented") {
			quiet++
		}
	}
	if quiet < 2 {
		t.Errorf("cri-client's lines for the two Unimplemented calls are not at V(4):\n%s", strings.Join(log.lines, "\n"))
	}

	if err := srv.SetError("RuntimeConfig", status.Error(codes.Internal, "broken")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CgroupDriver(ctx); err == nil {
		t.Fatal("CgroupDriver hid a failure")
	}
	if errs := log.errors(); len(errs) != 1 || !strings.Contains(errs[0], "broken") {
		t.Errorf("a real RuntimeConfig failure must stay one error line; got %q", errs)
	}
}
