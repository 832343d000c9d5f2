package runtime

import (
	"context"
	"time"

	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeService is the cri.RuntimeService a Client hands out: every call
// connects lazily (see lazyConn), then runs on cri-client's remote runtime
// service and is counted in the kubelet's runtime operation metrics under the
// kubelet's operation_type names.
type runtimeService struct {
	conn *lazyConn[cri.RuntimeService]
}

var _ cri.RuntimeService = (*runtimeService)(nil)

func (r *runtimeService) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	return call(ctx, r.conn, "version", func(s cri.RuntimeService) (*runtimeapi.VersionResponse, error) {
		return s.Version(ctx, apiVersion)
	})
}

func (r *runtimeService) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return call(ctx, r.conn, "status", func(s cri.RuntimeService) (*runtimeapi.StatusResponse, error) {
		return s.Status(ctx, verbose)
	})
}

// RuntimeConfig is optional in the CRI (containerd 1.6 lacks it): a
// codes.Unimplemented answer is no error line (optionalRPC).
func (r *runtimeService) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return call(ctx, r.conn, "runtime_config", func(s cri.RuntimeService) (*runtimeapi.RuntimeConfigResponse, error) {
		return s.RuntimeConfig(optionalRPC(ctx))
	})
}

func (r *runtimeService) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	return callErr(ctx, r.conn, "update_runtime_config", func(s cri.RuntimeService) error {
		return s.UpdateRuntimeConfig(ctx, runtimeConfig)
	})
}

func (r *runtimeService) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	return call(ctx, r.conn, "create_container", func(s cri.RuntimeService) (string, error) {
		return s.CreateContainer(ctx, podSandboxID, config, sandboxConfig)
	})
}

func (r *runtimeService) StartContainer(ctx context.Context, containerID string) error {
	return callErr(ctx, r.conn, "start_container", func(s cri.RuntimeService) error {
		return s.StartContainer(ctx, containerID)
	})
}

func (r *runtimeService) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	return callErr(ctx, r.conn, "stop_container", func(s cri.RuntimeService) error {
		return s.StopContainer(ctx, containerID, timeout)
	})
}

func (r *runtimeService) RemoveContainer(ctx context.Context, containerID string) error {
	return callErr(ctx, r.conn, "remove_container", func(s cri.RuntimeService) error {
		return s.RemoveContainer(ctx, containerID)
	})
}

func (r *runtimeService) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return call(ctx, r.conn, "list_containers", func(s cri.RuntimeService) ([]*runtimeapi.Container, error) {
		return s.ListContainers(ctx, filter)
	})
}

func (r *runtimeService) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	return call(ctx, r.conn, "container_status", func(s cri.RuntimeService) (*runtimeapi.ContainerStatusResponse, error) {
		return s.ContainerStatus(ctx, containerID, verbose)
	})
}

func (r *runtimeService) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	return callErr(ctx, r.conn, "update_container", func(s cri.RuntimeService) error {
		return s.UpdateContainerResources(ctx, containerID, resources)
	})
}

func (r *runtimeService) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	type output struct{ stdout, stderr []byte }
	out, err := call(ctx, r.conn, "exec_sync", func(s cri.RuntimeService) (output, error) {
		stdout, stderr, err := s.ExecSync(ctx, containerID, cmd, timeout)
		return output{stdout, stderr}, err
	})
	return out.stdout, out.stderr, err
}

func (r *runtimeService) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return call(ctx, r.conn, "exec", func(s cri.RuntimeService) (*runtimeapi.ExecResponse, error) {
		return s.Exec(ctx, req)
	})
}

func (r *runtimeService) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return call(ctx, r.conn, "attach", func(s cri.RuntimeService) (*runtimeapi.AttachResponse, error) {
		return s.Attach(ctx, req)
	})
}

func (r *runtimeService) ReopenContainerLog(ctx context.Context, containerID string) error {
	return callErr(ctx, r.conn, "reopen_container_log", func(s cri.RuntimeService) error {
		return s.ReopenContainerLog(ctx, containerID)
	})
}

func (r *runtimeService) CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error {
	return callErr(ctx, r.conn, "checkpoint_container", func(s cri.RuntimeService) error {
		return s.CheckpointContainer(ctx, options)
	})
}

// GetContainerEvents streams container events into containerEventsCh until
// ctx is done or the stream fails. A runtime without the RPC fails it with
// codes.Unimplemented, without an error line (optionalRPC); callers fall
// back to relisting.
func (r *runtimeService) GetContainerEvents(ctx context.Context, containerEventsCh chan *runtimeapi.ContainerEventResponse, connectionEstablishedCallback func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	return callErr(ctx, r.conn, "get_container_events", func(s cri.RuntimeService) error {
		return s.GetContainerEvents(optionalRPC(ctx), containerEventsCh, connectionEstablishedCallback)
	})
}

// RunPodSandbox also records the kubelet's per-runtime-handler sandbox
// metrics.
func (r *runtimeService) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	start := r.conn.clock.Now()
	id, err := call(ctx, r.conn, "run_podsandbox", func(s cri.RuntimeService) (string, error) {
		return s.RunPodSandbox(ctx, config, runtimeHandler)
	})
	r.conn.metrics.recordSandbox(runtimeHandler, r.conn.clock.Since(start), err)
	return id, err
}

func (r *runtimeService) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	return callErr(ctx, r.conn, "stop_podsandbox", func(s cri.RuntimeService) error {
		return s.StopPodSandbox(ctx, podSandboxID)
	})
}

func (r *runtimeService) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	return callErr(ctx, r.conn, "remove_podsandbox", func(s cri.RuntimeService) error {
		return s.RemovePodSandbox(ctx, podSandboxID)
	})
}

func (r *runtimeService) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	return call(ctx, r.conn, "podsandbox_status", func(s cri.RuntimeService) (*runtimeapi.PodSandboxStatusResponse, error) {
		return s.PodSandboxStatus(ctx, podSandboxID, verbose)
	})
}

func (r *runtimeService) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return call(ctx, r.conn, "list_podsandbox", func(s cri.RuntimeService) ([]*runtimeapi.PodSandbox, error) {
		return s.ListPodSandbox(ctx, filter)
	})
}

func (r *runtimeService) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return call(ctx, r.conn, "port_forward", func(s cri.RuntimeService) (*runtimeapi.PortForwardResponse, error) {
		return s.PortForward(ctx, req)
	})
}

func (r *runtimeService) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return call(ctx, r.conn, "update_podsandbox_resources", func(s cri.RuntimeService) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
		return s.UpdatePodSandboxResources(ctx, req)
	})
}

func (r *runtimeService) CheckpointPod(ctx context.Context, options *runtimeapi.CheckpointPodRequest) error {
	return callErr(ctx, r.conn, "checkpoint_pod", func(s cri.RuntimeService) error {
		return s.CheckpointPod(ctx, options)
	})
}

func (r *runtimeService) RestorePod(ctx context.Context, options *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return call(ctx, r.conn, "restore_pod", func(s cri.RuntimeService) (*runtimeapi.RestorePodResponse, error) {
		return s.RestorePod(ctx, options)
	})
}

func (r *runtimeService) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	return call(ctx, r.conn, "container_stats", func(s cri.RuntimeService) (*runtimeapi.ContainerStats, error) {
		return s.ContainerStats(ctx, containerID)
	})
}

func (r *runtimeService) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return call(ctx, r.conn, "list_container_stats", func(s cri.RuntimeService) ([]*runtimeapi.ContainerStats, error) {
		return s.ListContainerStats(ctx, filter)
	})
}

func (r *runtimeService) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	return call(ctx, r.conn, "podsandbox_stats", func(s cri.RuntimeService) (*runtimeapi.PodSandboxStats, error) {
		return s.PodSandboxStats(ctx, podSandboxID)
	})
}

func (r *runtimeService) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	return call(ctx, r.conn, "list_podsandbox_stats", func(s cri.RuntimeService) ([]*runtimeapi.PodSandboxStats, error) {
		return s.ListPodSandboxStats(ctx, filter)
	})
}

func (r *runtimeService) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return call(ctx, r.conn, "list_metric_descriptors", func(s cri.RuntimeService) ([]*runtimeapi.MetricDescriptor, error) {
		return s.ListMetricDescriptors(ctx)
	})
}

func (r *runtimeService) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return call(ctx, r.conn, "list_podsandbox_metrics", func(s cri.RuntimeService) ([]*runtimeapi.PodSandboxMetrics, error) {
		return s.ListPodSandboxMetrics(ctx)
	})
}

// Close closes the runtime connection the Client shares with every user of
// this service; later calls fail with ErrClosed. The Client owns it: users
// other than the Client's owner must not call Close.
func (r *runtimeService) Close(ctx context.Context) error {
	return callClose(ctx, r.conn)
}

// imageService is the cri.ImageManagerService a Client hands out, lazily
// connecting and instrumented like runtimeService.
type imageService struct {
	conn *lazyConn[cri.ImageManagerService]
}

var _ cri.ImageManagerService = (*imageService)(nil)

func (i *imageService) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return call(ctx, i.conn, "list_images", func(s cri.ImageManagerService) ([]*runtimeapi.Image, error) {
		return s.ListImages(ctx, filter)
	})
}

func (i *imageService) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	return call(ctx, i.conn, "image_status", func(s cri.ImageManagerService) (*runtimeapi.ImageStatusResponse, error) {
		return s.ImageStatus(ctx, image, verbose)
	})
}

func (i *imageService) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	return call(ctx, i.conn, "pull_image", func(s cri.ImageManagerService) (string, error) {
		return s.PullImage(ctx, image, auth, podSandboxConfig)
	})
}

func (i *imageService) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	return callErr(ctx, i.conn, "remove_image", func(s cri.ImageManagerService) error {
		return s.RemoveImage(ctx, image)
	})
}

func (i *imageService) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return call(ctx, i.conn, "image_fs_info", func(s cri.ImageManagerService) (*runtimeapi.ImageFsInfoResponse, error) {
		return s.ImageFsInfo(ctx)
	})
}

// Close closes the image connection; see runtimeService.Close.
func (i *imageService) Close(ctx context.Context) error {
	return callClose(ctx, i.conn)
}

// callClose closes l, recording the kubelet's "close" operation.
func callClose[S closer](ctx context.Context, l *lazyConn[S]) error {
	start := l.clock.Now()
	err := l.close(ctx)
	l.metrics.record("close", l.clock.Since(start), err)
	return err
}
