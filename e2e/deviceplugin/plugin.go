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
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Plugin is a running sample device plugin.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	dir      string
	socket   string

	devMu   sync.Mutex // guards devices and changed
	devices []*pluginapi.Device
	// changed is closed (and replaced) when a device's health changes.
	changed chan struct{}

	mu  sync.Mutex // guards srv
	srv *grpc.Server

	cancel context.CancelFunc
	done   chan struct{}
}

// Start serves a plugin of count healthy devices (dev-0…) for resource on
// dir/<name>.sock and registers it with dir/kubelet.sock. Like a vendor's
// plugin, it registers again when the node agent restarts: the agent
// removes the plugins' sockets from dir when it starts (as the kubelet), so
// once its socket is gone the plugin serves a new one and registers it with
// the new kubelet.sock, until Stop.
func Start(ctx context.Context, dir, name, resource string, count int) (*Plugin, error) {
	p := &Plugin{resource: resource, dir: dir, socket: filepath.Join(dir, name+".sock"), done: make(chan struct{}), changed: make(chan struct{})}
	for i := range count {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy})
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.serveAndRegister(rctx); err != nil {
		p.stopServer()
		return nil, err
	}
	wctx, wcancel := context.WithCancel(context.Background())
	p.cancel = wcancel
	go p.watch(wctx)
	return p, nil
}

// serveAndRegister serves a new socket and registers it.
func (p *Plugin) serveAndRegister(ctx context.Context) error {
	p.stopServer()
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("sample device plugin: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go srv.Serve(lis)
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("sample device plugin: %w", err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(p.socket), ResourceName: p.resource,
	}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("sample device plugin: register %s: %w", p.resource, err)
	}
	return nil
}

// watch serves and registers again whenever the plugin's socket is
// removed, until ctx ends.
func (p *Plugin) watch(ctx context.Context) {
	defer close(p.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := os.Stat(p.socket); err == nil {
			continue
		}
		// A failed registration (the agent still starting) is tried
		// again on the next tick: the socket is removed with the server.
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := p.serveAndRegister(rctx); err != nil {
			p.stopServer()
		}
		cancel()
	}
}

func (p *Plugin) stopServer() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	os.Remove(p.socket)
}

// Stop stops serving and registering, as a plugin that was killed: the
// agent's ListAndWatch stream ends.
func (p *Plugin) Stop() {
	p.cancel()
	<-p.done
	p.stopServer()
}

// GetDevicePluginOptions asks for no PreStartContainer and no preferred
// allocation.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// SetHealth reports device id (dev-<n>) healthy or unhealthy on the
// ListAndWatch streams.
func (p *Plugin) SetHealth(id string, healthy bool) {
	health := pluginapi.Unhealthy
	if healthy {
		health = pluginapi.Healthy
	}
	p.devMu.Lock()
	defer p.devMu.Unlock()
	devs := make([]*pluginapi.Device, len(p.devices))
	for i, d := range p.devices {
		devs[i] = &pluginapi.Device{ID: d.ID, Health: d.Health}
		if d.ID == id {
			devs[i].Health = health
		}
	}
	p.devices = devs
	close(p.changed)
	p.changed = make(chan struct{})
}

// ListAndWatch sends the devices, and again after each SetHealth, until
// the stream ends.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		p.devMu.Lock()
		devs, changed := p.devices, p.changed
		p.devMu.Unlock()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
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
