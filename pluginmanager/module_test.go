package pluginmanager_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodekit/nodekit/pluginmanager"
)

type recordingHandler struct{ registered chan string }

func (h recordingHandler) ValidatePlugin(context.Context, string, string, []string) error { return nil }
func (h recordingHandler) RegisterPlugin(_ context.Context, name, _ string, _ []string, _ *time.Duration) error {
	h.registered <- name
	return nil
}
func (h recordingHandler) DeRegisterPlugin(context.Context, string, string) {}

type registrar struct {
	registerapi.UnimplementedRegistrationServer
}

func (registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "dra.example.com", SupportedVersions: []string{"v1.DRAPlugin"}}, nil
}

func (registrar) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

// TestModuleDispatchesToGroupHandlers checks that a handler added with
// AsHandler receives the plugins of its type.
func TestModuleDispatchesToGroupHandlers(t *testing.T) {
	dir := t.TempDir()
	h := recordingHandler{registered: make(chan string, 1)}
	app := fxtest.New(t,
		fx.Supply(pluginmanager.Options{Dir: dir}),
		pluginmanager.AsHandler(registerapi.DRAPlugin, func() pluginmanager.Handler { return h }),
		pluginmanager.Module,
	)
	app.RequireStart()
	defer app.RequireStop()

	l, err := net.Listen("unix", filepath.Join(dir, "dra.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, registrar{})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	select {
	case name := <-h.registered:
		if name != "dra.example.com" {
			t.Fatalf("registered %q", name)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the group's handler was not called")
	}
}

func TestModuleRefusesTwoHandlersOfOneType(t *testing.T) {
	h := recordingHandler{}
	err := fx.New(fx.NopLogger,
		fx.Supply(pluginmanager.Options{Dir: t.TempDir()}),
		pluginmanager.AsHandler(registerapi.CSIPlugin, pluginmanager.Handler(h)),
		pluginmanager.AsHandler(registerapi.CSIPlugin, pluginmanager.Handler(h)),
		pluginmanager.Module,
	).Err()
	if err == nil {
		t.Fatal("two CSIPlugin handlers accepted")
	}
}
