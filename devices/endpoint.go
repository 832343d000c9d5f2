package devices

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// dialTimeout bounds the connection to a registering plugin and its
// GetDevicePluginOptions answer, as the kubelet's 10 s dial.
const dialTimeout = 10 * time.Second

// endpoint is the connection to one registered device plugin. stopped and
// stopTime are guarded by the Manager's mu.
type endpoint struct {
	resource string
	socket   string
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	options  *pluginapi.DevicePluginOptions

	stopped  bool
	stopTime time.Time

	closeOnce sync.Once
	cancel    context.CancelFunc
	ctx       context.Context
}

func dialEndpoint(ctx context.Context, resource, socket string) (*endpoint, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to device plugin %s at %s: %w", resource, socket, err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	octx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	opts, err := client.GetDevicePluginOptions(octx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to get device plugin options of %s at %s: %w", resource, socket, err)
	}
	ectx, ecancel := context.WithCancel(context.Background())
	return &endpoint{resource: resource, socket: socket, conn: conn, client: client, options: opts, ctx: ectx, cancel: ecancel}, nil
}

// listAndWatch calls update with every ListAndWatch response until the
// stream ends or the endpoint is closed.
func (e *endpoint) listAndWatch(ctx context.Context, update func([]*pluginapi.Device)) error {
	stream, err := e.client.ListAndWatch(e.ctx, &pluginapi.Empty{})
	if err != nil {
		return fmt.Errorf("ListAndWatch of device plugin %s: %w", e.resource, err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("ListAndWatch of device plugin %s: %w", e.resource, err)
		}
		update(resp.Devices)
	}
}

func (e *endpoint) close() {
	if e.conn == nil {
		return
	}
	e.closeOnce.Do(func() {
		e.cancel()
		e.conn.Close()
	})
}

func (e *endpoint) allocate(ctx context.Context, devs []string) (*pluginapi.AllocateResponse, error) {
	if e.client == nil {
		return nil, fmt.Errorf("device plugin %s is not registered", e.resource)
	}
	return e.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: devs}},
	})
}

func (e *endpoint) preStartContainer(ctx context.Context, devs []string) error {
	if e.client == nil {
		return fmt.Errorf("device plugin %s is not registered", e.resource)
	}
	ctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
	defer cancel()
	_, err := e.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: devs})
	return err
}

func (e *endpoint) getPreferredAllocation(ctx context.Context, available, mustInclude []string, size int) (*pluginapi.PreferredAllocationResponse, error) {
	if e.client == nil {
		return nil, fmt.Errorf("device plugin %s is not registered", e.resource)
	}
	return e.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   available,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       int32(size),
		}},
	})
}
