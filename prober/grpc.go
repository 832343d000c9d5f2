package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type grpcHandler struct{}

// NewGRPCHandler returns the default grpc handler, the kubelet's: it
// connects to the pod IP at the probe's port without TLS (blocking until
// connected, within the probe's timeout), with user agent
// "kube-probe/1.37", and calls the standard grpc.health.v1.Health/Check with the probe's service
// name. SERVING is Success; any other answer and any error is Failure, as
// the grpc_health_probe tool. The alpha TLS mode (GRPCContainerProbeTLS,
// off by default in v1.37) is not supported: such probes connect without
// TLS, as a kubelet with the gate off does.
func NewGRPCHandler() Handler { return grpcHandler{} }

// Kind returns KindGRPC.
func (grpcHandler) Kind() Kind { return KindGRPC }

// Probe runs t's grpc probe.
func (grpcHandler) Probe(ctx context.Context, t *Target) (Result, string, error) {
	service := ""
	if t.Probe.GRPC.Service != nil {
		service = *t.Probe.GRPC.Service
	}
	addr := net.JoinHostPort(t.PodIP, strconv.Itoa(int(t.Probe.GRPC.Port)))
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	// DialContext with WithBlock, as the kubelet: connection errors and
	// timeouts get its messages, and every probe tests a new connection.
	conn, err := grpc.DialContext(ctx, addr, //nolint:staticcheck // see above.
		grpc.WithUserAgent(userAgent),
		grpc.WithBlock(), //nolint:staticcheck // see above.
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return probeDialer().DialContext(ctx, "tcp", addr)
		}),
	)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, t.Timeout, err), nil
		}
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	defer func() { _ = conn.Close() }()

	resp, err := healthpb.NewHealthClient(conn).Check(metadata.NewOutgoingContext(ctx, make(metadata.MD)),
		&healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		if st, ok := status.FromError(err); ok {
			switch st.Code() {
			case codes.Unimplemented:
				return Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): " + st.Message(), nil
			case codes.DeadlineExceeded:
				return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", t.Timeout), nil
			}
		}
		return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", err), nil
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()), nil
	}
	return Success, "service healthy", nil
}
