package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/fx"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/volume/csi"
)

// testCSIDriver serves a CSI driver's registration (as
// node-driver-registrar) and Node services.
type testCSIDriver struct {
	registerapi.UnimplementedRegistrationServer
	csipb.UnimplementedNodeServer
	endpoint string
}

func (d *testCSIDriver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "csi.example.com", Endpoint: d.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (d *testCSIDriver) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *testCSIDriver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: "id-1"}, nil
}

// serveTestCSIDriver serves the driver's sockets: the CSI one in dir, the
// registration one in the agent's plugins_registry.
func serveTestCSIDriver(t *testing.T, root, dir string) {
	t.Helper()
	// The plugin manager makes the directory when it starts.
	err := wait.PollUntilContextTimeout(agenttest.Context(t), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(root, "plugins_registry"))
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no plugins_registry: %v", err)
	}
	d := &testCSIDriver{endpoint: filepath.Join(dir, "csi.sock")}
	csiSrv, regSrv := grpc.NewServer(), grpc.NewServer()
	csipb.RegisterNodeServer(csiSrv, d)
	registerapi.RegisterRegistrationServer(regSrv, d)
	for _, s := range []struct {
		srv  *grpc.Server
		path string
	}{{csiSrv, d.endpoint}, {regSrv, filepath.Join(root, "plugins_registry", "csi.example.com-reg.sock")}} {
		l, err := net.Listen("unix", s.path)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.srv.Serve(l) }()
		t.Cleanup(s.srv.Stop)
	}
}

// TestAgentRegistersCSIDrivers checks the wiring: the agent watches
// <root-dir>/plugins_registry, registers a CSI driver found there in its
// *csi.Drivers and publishes it in the node's CSINode.
func TestAgentRegistersCSIDrivers(t *testing.T) {
	var drivers *csi.Drivers
	n := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{fx.Populate(&drivers)}})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	serveTestCSIDriver(t, n.Config.RootDir, agenttest.TempDir(t))
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cn, err := n.Client.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err == nil && len(cn.Spec.Drivers) == 1 && cn.Spec.Drivers[0].NodeID == "id-1", nil
	})
	if err != nil {
		t.Fatalf("the driver is not in the CSINode: %v", err)
	}
	if _, err := drivers.NodeClient("csi.example.com"); err != nil {
		t.Fatalf("the graph's *csi.Drivers has no client of the driver: %v", err)
	}
}

// TestStandaloneRegistersCSIDrivers: without an API server the driver is
// registered on the node only.
func TestStandaloneRegistersCSIDrivers(t *testing.T) {
	var drivers *csi.Drivers
	n := agenttest.Start(t, agenttest.Options{Standalone: true, Extra: []fx.Option{fx.Populate(&drivers)}})
	serveTestCSIDriver(t, n.Config.RootDir, agenttest.TempDir(t))
	err := wait.PollUntilContextTimeout(agenttest.Context(t), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := drivers.NodeClient("csi.example.com")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the standalone agent did not register the driver: %v", err)
	}
}
