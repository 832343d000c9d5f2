// Package deviceplugin is a sample device plugin of the e2e module's own,
// standing in for a vendor's: it serves the deviceplugin v1beta1 API on a
// socket in the node's device plugin directory, registers with the node
// agent's kubelet.sock, and gives each container its devices as the env
// SAMPLE_DEVICES (the device IDs, comma separated) and a device node
// /dev/sample-<id> per device (the host's /dev/null).
package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Plugin is a running sample device plugin.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	devices  []*pluginapi.Device
	socket   string
	srv      *grpc.Server
}

// Start serves a plugin of count healthy devices (dev-0…) for resource on
// dir/<name>.sock and registers it with dir/kubelet.sock.
func Start(ctx context.Context, dir, name, resource string, count int) (*Plugin, error) {
	p := &Plugin{resource: resource, socket: filepath.Join(dir, name+".sock")}
	for i := range count {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy})
	}
	os.Remove(p.socket)
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		return nil, fmt.Errorf("sample device plugin: %w", err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go p.srv.Serve(lis)
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("sample device plugin: %w", err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(p.socket), ResourceName: resource,
	}, grpc.WaitForReady(true))
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("sample device plugin: register %s: %w", resource, err)
	}
	return p, nil
}

// Stop stops serving, as a plugin that was killed: the agent's
// ListAndWatch stream ends.
func (p *Plugin) Stop() {
	p.srv.Stop()
	os.Remove(p.socket)
}

// GetDevicePluginOptions asks for no PreStartContainer and no preferred
// allocation.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once and keeps the stream open.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// Allocate gives each container SAMPLE_DEVICES and its device nodes.
func (p *Plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range r.ContainerRequests {
		ids := slices.Sorted(slices.Values(cr.DevicesIds))
		car := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"SAMPLE_DEVICES": strings.Join(ids, ",")}}
		for _, id := range ids {
			car.Devices = append(car.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/sample-" + id, HostPath: "/dev/null", Permissions: "rw"})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}
