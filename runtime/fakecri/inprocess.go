package fakecri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

// errConnClosing is what a call on closed in-process services fails with:
// the error gRPC gives a call on a closed client connection.
var errConnClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// InProcess returns a client of s that calls it directly, without a socket,
// gRPC or HTTP/2: a cri.RuntimeService and a cri.ImageManagerService with
// the contract cri-client's remote services have, for an agent that runs
// in the same process as its fake runtime (agent/fleet; the runtime
// package's Options.RuntimeService and Options.ImageService). It costs no
// goroutine, no connection and no serialization; each call of the
// returned services:
//
//   - fails, before reaching the fake, with the status error gRPC would
//     give when its context is already done, and after Close of that
//     service with codes.Canceled, as on a closed connection;
//   - passes through what the socket's interceptors do: it is counted by
//     [Server.Calls], fails with a [Server.SetError] fault and has its
//     reply rewritten by [Server.SetReplyRewriter];
//   - gets a copy of its request and returns a copy of the reply
//     (proto.Clone), so neither side shares memory with the other, as
//     over a wire;
//   - fails with a gRPC status error as a remote caller sees it: a
//     status error's code and message, codes.Unknown for any other error,
//     codes.Canceled or codes.DeadlineExceeded when its context ended
//     during the call;
//   - keeps cri-client's interface conventions: ExecSync reports a
//     non-zero exit code as a k8s.io/utils/exec.CodeExitError and a
//     timeout as an error wrapping cri-client's ErrCommandTimedOut;
//     PullImage's codes.Unknown errors carry the bare message;
//     GetContainerEvents streams into the caller's channel until its
//     context ends, after calling the connection callback once.
//
// Unlike cri-client it does not check the replies (an empty sandbox ID,
// a status without an ID, an image without a size): the fake's replies
// are well formed, and a test that rewrites replies to check how the
// agent copes with malformed ones must use the socket (Start), where
// cri-client sees them. It sets no deadline of its own either: the fake
// answers at once, and its waits (StopContainer's grace period, an
// ExecResult's Delay) end with the caller's context.
//
// Each call returns new services with their own Close; s keeps serving
// its sockets and other clients.
func (s *Server) InProcess() (cri.RuntimeService, cri.ImageManagerService) {
	return &localRuntime{conn: newLocalConn(s), srv: &runtimeService{s: s}},
		&localImage{conn: newLocalConn(s), srv: &imageService{s: s}}
}

// localConn is what an in-process service has in place of a gRPC
// connection: the Server, and whether it was closed.
type localConn struct {
	s    *Server
	once sync.Once
	done chan struct{} // closed by close
}

func newLocalConn(s *Server) *localConn { return &localConn{s: s, done: make(chan struct{})} }

func (c *localConn) close() { c.once.Do(func() { close(c.done) }) }

// check returns the error a call gets without reaching the server: the
// connection is closed or ctx is done.
func (c *localConn) check(ctx context.Context) error {
	select {
	case <-c.done:
		return errConnClosing
	default:
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// wireError returns err as a gRPC client receives it: a status error with
// the code and message of err (codes.Unknown, or the context error's code,
// for an error that carries none), or nil.
func wireError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	return st.Err()
}

// unary calls the unary RPC method (its short name) of service (the gRPC
// service's full name) through the Server's interceptor, as the socket
// does, with a copy of req, and returns a copy of the reply.
func unary[Req, Resp proto.Message](ctx context.Context, c *localConn, service, method string, req Req, handler func(context.Context, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	if err := c.check(ctx); err != nil {
		return zero, err
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/" + service + "/" + method}
	reply, err := c.s.unaryInterceptor(ctx, proto.Clone(req), info, func(ctx context.Context, req any) (any, error) {
		return handler(ctx, req.(Req))
	})
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller stopped waiting: gRPC reports its context's end,
		// whatever the server did meanwhile.
		return zero, status.FromContextError(ctxErr).Err()
	}
	if err != nil {
		return zero, wireError(err)
	}
	msg, ok := reply.(proto.Message)
	if !ok || msg == nil {
		return zero, status.Errorf(codes.Internal, "grpc: error while marshaling: %s answered %T", method, reply)
	}
	out, ok := proto.Clone(msg).(Resp)
	if !ok {
		// A reply rewriter may answer another message type; a wire
		// client would fail to decode it.
		return zero, status.Errorf(codes.Internal, "grpc: failed to unmarshal the response: %s answered %T, want %T", method, msg, zero)
	}
	return out, nil
}

const (
	runtimeServiceName = "runtime.v1.RuntimeService"
	imageServiceName   = "runtime.v1.ImageService"
)

// rpc calls a RuntimeService RPC in process.
func rpc[Req, Resp proto.Message](ctx context.Context, c *localConn, method string, req Req, handler func(context.Context, Req) (Resp, error)) (Resp, error) {
	return unary(ctx, c, runtimeServiceName, method, req, handler)
}

// localRuntime is the cri.RuntimeService of Server.InProcess.
type localRuntime struct {
	conn *localConn
	srv  *runtimeService
}

var _ cri.RuntimeService = (*localRuntime)(nil)

func (r *localRuntime) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	return rpc(ctx, r.conn, "Version", &runtimeapi.VersionRequest{Version: apiVersion}, r.srv.Version)
}

func (r *localRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return rpc(ctx, r.conn, "Status", &runtimeapi.StatusRequest{Verbose: verbose}, r.srv.Status)
}

func (r *localRuntime) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return rpc(ctx, r.conn, "RuntimeConfig", &runtimeapi.RuntimeConfigRequest{}, r.srv.RuntimeConfig)
}

func (r *localRuntime) UpdateRuntimeConfig(ctx context.Context, cfg *runtimeapi.RuntimeConfig) error {
	_, err := rpc(ctx, r.conn, "UpdateRuntimeConfig", &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: cfg}, r.srv.UpdateRuntimeConfig)
	return err
}

func (r *localRuntime) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	resp, err := rpc(ctx, r.conn, "RunPodSandbox", &runtimeapi.RunPodSandboxRequest{Config: config, RuntimeHandler: runtimeHandler}, r.srv.RunPodSandbox)
	return resp.GetPodSandboxId(), err
}

func (r *localRuntime) StopPodSandbox(ctx context.Context, id string) error {
	_, err := rpc(ctx, r.conn, "StopPodSandbox", &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}, r.srv.StopPodSandbox)
	return err
}

func (r *localRuntime) RemovePodSandbox(ctx context.Context, id string) error {
	_, err := rpc(ctx, r.conn, "RemovePodSandbox", &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}, r.srv.RemovePodSandbox)
	return err
}

func (r *localRuntime) PodSandboxStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	return rpc(ctx, r.conn, "PodSandboxStatus", &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: verbose}, r.srv.PodSandboxStatus)
}

func (r *localRuntime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	resp, err := rpc(ctx, r.conn, "ListPodSandbox", &runtimeapi.ListPodSandboxRequest{Filter: filter}, r.srv.ListPodSandbox)
	return resp.GetItems(), err
}

func (r *localRuntime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return rpc(ctx, r.conn, "PortForward", req, r.srv.PortForward)
}

func (r *localRuntime) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return rpc(ctx, r.conn, "UpdatePodSandboxResources", req, r.srv.UpdatePodSandboxResources)
}

func (r *localRuntime) CheckpointPod(ctx context.Context, req *runtimeapi.CheckpointPodRequest) error {
	_, err := rpc(ctx, r.conn, "CheckpointPod", req, r.srv.CheckpointPod)
	return err
}

func (r *localRuntime) RestorePod(ctx context.Context, req *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return rpc(ctx, r.conn, "RestorePod", req, r.srv.RestorePod)
}

func (r *localRuntime) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	resp, err := rpc(ctx, r.conn, "CreateContainer", &runtimeapi.CreateContainerRequest{PodSandboxId: podSandboxID, Config: config, SandboxConfig: sandboxConfig}, r.srv.CreateContainer)
	return resp.GetContainerId(), err
}

func (r *localRuntime) StartContainer(ctx context.Context, id string) error {
	_, err := rpc(ctx, r.conn, "StartContainer", &runtimeapi.StartContainerRequest{ContainerId: id}, r.srv.StartContainer)
	return err
}

func (r *localRuntime) StopContainer(ctx context.Context, id string, timeout int64) error {
	_, err := rpc(ctx, r.conn, "StopContainer", &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeout}, r.srv.StopContainer)
	return err
}

func (r *localRuntime) RemoveContainer(ctx context.Context, id string) error {
	_, err := rpc(ctx, r.conn, "RemoveContainer", &runtimeapi.RemoveContainerRequest{ContainerId: id}, r.srv.RemoveContainer)
	return err
}

func (r *localRuntime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	resp, err := rpc(ctx, r.conn, "ListContainers", &runtimeapi.ListContainersRequest{Filter: filter}, r.srv.ListContainers)
	return resp.GetContainers(), err
}

func (r *localRuntime) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	return rpc(ctx, r.conn, "ContainerStatus", &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: verbose}, r.srv.ContainerStatus)
}

func (r *localRuntime) UpdateContainerResources(ctx context.Context, id string, resources *runtimeapi.ContainerResources) error {
	req := &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: resources.GetLinux(), Windows: resources.GetWindows()}
	_, err := rpc(ctx, r.conn, "UpdateContainerResources", req, r.srv.UpdateContainerResources)
	return err
}

// ExecSync reports a command's non-zero exit code and its timeout as
// cri-client does: the prober and the kubelet API read them so.
func (r *localRuntime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	req := &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: int64(timeout.Seconds())}
	resp, err := rpc(ctx, r.conn, "ExecSync", req, r.srv.ExecSync)
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded {
			err = fmt.Errorf("%w: %q timed out after %s", criclient.ErrCommandTimedOut, strings.Join(cmd, " "), timeout)
		}
		return nil, nil, err
	}
	if resp.GetExitCode() != 0 {
		err = utilexec.CodeExitError{
			Err:  fmt.Errorf("command '%s' exited with %d: %s", strings.Join(cmd, " "), resp.GetExitCode(), resp.GetStderr()),
			Code: int(resp.GetExitCode()),
		}
	}
	return resp.GetStdout(), resp.GetStderr(), err
}

func (r *localRuntime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return rpc(ctx, r.conn, "Exec", req, r.srv.Exec)
}

func (r *localRuntime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return rpc(ctx, r.conn, "Attach", req, r.srv.Attach)
}

func (r *localRuntime) ReopenContainerLog(ctx context.Context, id string) error {
	_, err := rpc(ctx, r.conn, "ReopenContainerLog", &runtimeapi.ReopenContainerLogRequest{ContainerId: id}, r.srv.ReopenContainerLog)
	return err
}

func (r *localRuntime) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) error {
	_, err := rpc(ctx, r.conn, "CheckpointContainer", req, r.srv.CheckpointContainer)
	return err
}

func (r *localRuntime) ContainerStats(ctx context.Context, id string) (*runtimeapi.ContainerStats, error) {
	resp, err := rpc(ctx, r.conn, "ContainerStats", &runtimeapi.ContainerStatsRequest{ContainerId: id}, r.srv.ContainerStats)
	return resp.GetStats(), err
}

func (r *localRuntime) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	resp, err := rpc(ctx, r.conn, "ListContainerStats", &runtimeapi.ListContainerStatsRequest{Filter: filter}, r.srv.ListContainerStats)
	return resp.GetStats(), err
}

func (r *localRuntime) PodSandboxStats(ctx context.Context, id string) (*runtimeapi.PodSandboxStats, error) {
	resp, err := rpc(ctx, r.conn, "PodSandboxStats", &runtimeapi.PodSandboxStatsRequest{PodSandboxId: id}, r.srv.PodSandboxStats)
	return resp.GetStats(), err
}

func (r *localRuntime) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	resp, err := rpc(ctx, r.conn, "ListPodSandboxStats", &runtimeapi.ListPodSandboxStatsRequest{Filter: filter}, r.srv.ListPodSandboxStats)
	return resp.GetStats(), err
}

func (r *localRuntime) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	resp, err := rpc(ctx, r.conn, "ListMetricDescriptors", &runtimeapi.ListMetricDescriptorsRequest{}, r.srv.ListMetricDescriptors)
	return resp.GetDescriptors(), err
}

func (r *localRuntime) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	resp, err := rpc(ctx, r.conn, "ListPodSandboxMetrics", &runtimeapi.ListPodSandboxMetricsRequest{}, r.srv.ListPodSandboxMetrics)
	return resp.GetPodMetrics(), err
}

// GetContainerEvents streams the fake's container events into ch, as
// cri-client does over the socket: it calls established once the stream
// is open, then sends each event (a copy) to ch until ctx is done or the
// service is closed, and returns the status error that ended the stream.
func (r *localRuntime) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, established func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	if err := r.conn.check(ctx); err != nil {
		return err
	}
	if err := r.conn.s.admit("/" + runtimeServiceName + "/GetContainerEvents"); err != nil {
		return wireError(err)
	}
	sub := r.conn.s.subscribe()
	defer r.conn.s.unsubscribe(sub)
	stream := &eventStream{ctx: ctx, conn: r.conn, sub: sub}
	if established != nil {
		established(stream)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		select {
		case ch <- ev:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-r.conn.done:
			return errConnClosing
		}
	}
}

// Close ends the service's event streams; later calls fail with
// codes.Canceled. It is idempotent; the Server goes on serving.
func (r *localRuntime) Close(context.Context) error {
	r.conn.close()
	return nil
}

// eventStream is the client end of an in-process GetContainerEvents
// stream, handed to the connection callback as cri-client hands its gRPC
// stream: Recv takes the next event, as the stream's own loop does.
type eventStream struct {
	ctx  context.Context
	conn *localConn
	sub  *subscriber
}

var _ runtimeapi.RuntimeService_GetContainerEventsClient = (*eventStream)(nil)

// Recv returns a copy of the next event, or the status error that ends
// the stream.
func (e *eventStream) Recv() (*runtimeapi.ContainerEventResponse, error) {
	for {
		if ev, ok := e.sub.pop(); ok {
			return proto.Clone(ev).(*runtimeapi.ContainerEventResponse), nil
		}
		select {
		case <-e.sub.ready:
		case <-e.ctx.Done():
			return nil, status.FromContextError(e.ctx.Err()).Err()
		case <-e.conn.done:
			return nil, errConnClosing
		}
	}
}

func (e *eventStream) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (e *eventStream) Trailer() metadata.MD         { return metadata.MD{} }
func (e *eventStream) CloseSend() error             { return nil }
func (e *eventStream) Context() context.Context     { return e.ctx }

// SendMsg fails: the client of a server stream sends nothing after its
// request.
func (e *eventStream) SendMsg(any) error {
	return errors.New("fakecri: GetContainerEvents is a server stream; the client sends nothing")
}

// RecvMsg receives the next event into m, a *runtimeapi.ContainerEventResponse.
func (e *eventStream) RecvMsg(m any) error {
	out, ok := m.(*runtimeapi.ContainerEventResponse)
	if !ok {
		return status.Errorf(codes.Internal, "fakecri: GetContainerEvents receives into a *ContainerEventResponse, not %T", m)
	}
	ev, err := e.Recv()
	if err != nil {
		return err
	}
	proto.Reset(out)
	proto.Merge(out, ev)
	return nil
}

// localImage is the cri.ImageManagerService of Server.InProcess.
type localImage struct {
	conn *localConn
	srv  *imageService
}

var _ cri.ImageManagerService = (*localImage)(nil)

func imageRPC[Req, Resp proto.Message](ctx context.Context, c *localConn, method string, req Req, handler func(context.Context, Req) (Resp, error)) (Resp, error) {
	return unary(ctx, c, imageServiceName, method, req, handler)
}

func (i *localImage) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	resp, err := imageRPC(ctx, i.conn, "ListImages", &runtimeapi.ListImagesRequest{Filter: filter}, i.srv.ListImages)
	return resp.GetImages(), err
}

func (i *localImage) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	return imageRPC(ctx, i.conn, "ImageStatus", &runtimeapi.ImageStatusRequest{Image: image, Verbose: verbose}, i.srv.ImageStatus)
}

// PullImage reports a codes.Unknown failure by its bare message, as
// cri-client does.
func (i *localImage) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	resp, err := imageRPC(ctx, i.conn, "PullImage", &runtimeapi.PullImageRequest{Image: image, Auth: auth, SandboxConfig: sandboxConfig}, i.srv.PullImage)
	if st, ok := status.FromError(err); ok && err != nil && st.Code() == codes.Unknown {
		return "", errors.New(st.Message())
	}
	return resp.GetImageRef(), err
}

func (i *localImage) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	_, err := imageRPC(ctx, i.conn, "RemoveImage", &runtimeapi.RemoveImageRequest{Image: image}, i.srv.RemoveImage)
	return err
}

func (i *localImage) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return imageRPC(ctx, i.conn, "ImageFsInfo", &runtimeapi.ImageFsInfoRequest{}, i.srv.ImageFsInfo)
}

// Close makes later calls fail with codes.Canceled. It is idempotent.
func (i *localImage) Close(context.Context) error {
	i.conn.close()
	return nil
}
