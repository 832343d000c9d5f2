package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	criutil "k8s.io/cri-client/pkg/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultConnectionTimeout is the kubelet's runtimeRequestTimeout default.
const DefaultConnectionTimeout = 2 * time.Minute

// kubeRuntimeAPIVersion is the kubelet runtime API version the kubelet sends
// with Version.
const kubeRuntimeAPIVersion = "0.1.0"

// ErrClosed is returned by every call on a Client's services after Close.
var ErrClosed = errors.New("container runtime client is closed")

// Options configures a Client.
type Options struct {
	// Endpoint is the CRI runtime service endpoint, required: a unix socket
	// URL ("unix:///run/containerd/containerd.sock") or an absolute socket
	// path, which means the same.
	Endpoint string
	// ImageEndpoint is the CRI image service endpoint (default Endpoint).
	ImageEndpoint string
	// ConnectionTimeout bounds each connection attempt and, because
	// cri-client uses the one value for both, every CRI request (RunPodSandbox
	// gets twice as long; PullImage and ExecSync have their own limits). It is
	// the kubelet's runtimeRequestTimeout, whose default, 2 minutes, is
	// DefaultConnectionTimeout: a shorter value would cut off slow sandbox
	// creations and container stops. Connecting to a runtime that is down
	// fails at once whatever the value, since the socket refuses connections.
	ConnectionTimeout time.Duration
	// Registerer, if set, registers the kubelet's CRI operation metrics:
	// kubelet_runtime_operations_total, kubelet_runtime_operations_errors_total,
	// kubelet_runtime_operations_duration_seconds (label operation_type), and
	// kubelet_run_podsandbox_duration_seconds and
	// kubelet_run_podsandbox_errors_total (label runtime_handler). Clients
	// sharing a registry share the metrics.
	Registerer prometheus.Registerer
	// Clock paces connection retries and times operations for the metrics
	// (default clock.RealClock{}).
	Clock clock.Clock
	// Logger, the node's, is in the context of what Close logs (the calls
	// that take a context log with its logger); default klog's.
	Logger logr.Logger
	// RuntimeService, if set, is used in place of dialling Endpoint: an
	// in-process runtime, such as runtime/fakecri's Server.InProcess,
	// that costs no connection, goroutines or serialization. The Client
	// wraps it as it wraps a connection (the CRI operation metrics,
	// ErrClosed after Close) and owns it: Close closes it. Endpoint then
	// only names the runtime in messages (default "in-process").
	RuntimeService cri.RuntimeService
	// ImageService, if set, is used in place of dialling ImageEndpoint,
	// as RuntimeService is; ImageEndpoint then defaults to Endpoint.
	ImageService cri.ImageManagerService
}

// inProcessEndpoint names an in-process service given without an
// endpoint.
const inProcessEndpoint = "in-process"

// Client is the agent's connection to a CRI container runtime. New does no
// I/O: the runtime and image services connect on their first call, and every
// call retries the connection while it is not established, so an agent
// starts while the runtime is down and recovers when it comes up. Once
// connected, gRPC reconnects by itself across runtime restarts; calls made
// while the runtime is unreachable fail with codes.Unavailable. All methods
// are safe for concurrent use.
type Client struct {
	endpoint string
	runtime  *runtimeService
	image    *imageService
	logger   logr.Logger
}

// Health is the runtime's health as the kubelet derives it from the CRI
// Status call, for the node's Ready condition and status.
type Health struct {
	// RuntimeErr is nil when the runtime answered Status with RuntimeReady
	// true. Otherwise it reads "container runtime is down: <cause>" when the
	// runtime could not be asked, or "container runtime not ready:
	// RuntimeReady=false reason:<reason> message:<message>".
	RuntimeErr error
	// NetworkErr is nil when the runtime reported NetworkReady true, or when
	// it could not be asked (RuntimeErr says so). Otherwise it reads
	// "container runtime network not ready: NetworkReady=false
	// reason:<reason> message:<message>".
	NetworkErr error
	// Handlers are the runtime handlers the runtime reported, nil if it
	// could not be asked. They belong to the caller.
	Handlers []*runtimeapi.RuntimeHandler
	// Features are the optional runtime features the runtime reported, nil
	// if none or if it could not be asked. They belong to the caller.
	Features *runtimeapi.RuntimeFeatures
}

// New returns a Client for the runtime at opts.Endpoint, or for the
// in-process services opts.RuntimeService and opts.ImageService. It
// validates and defaults opts and registers the metrics but does not
// connect.
func New(opts Options) (*Client, error) {
	if opts.RuntimeService != nil && opts.Endpoint == "" {
		opts.Endpoint = inProcessEndpoint
	}
	if opts.ImageEndpoint == "" {
		opts.ImageEndpoint = opts.Endpoint
	}
	if opts.ConnectionTimeout < 0 {
		return nil, fmt.Errorf("container runtime connection timeout %v is negative", opts.ConnectionTimeout)
	}
	if opts.ConnectionTimeout == 0 {
		opts.ConnectionTimeout = DefaultConnectionTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = klog.Background()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}

	// No OpenTelemetry on either service: the agent exports no traces, and
	// cri-client's default (otelgrpc with a noop provider) still builds
	// attribute sets on every call.
	runtimeConn, endpoint, err := newConn("runtime", opts.Endpoint, opts.RuntimeService, opts.ConnectionTimeout, opts.Clock, m,
		func(ctx context.Context, endpoint string) (cri.RuntimeService, error) {
			return criclient.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).
				WithConnectionTimeout(opts.ConnectionTimeout).WithTracerProvider(nil).Build(ctx)
		})
	if err != nil {
		return nil, err
	}
	imageConn, _, err := newConn("image", opts.ImageEndpoint, opts.ImageService, opts.ConnectionTimeout, opts.Clock, m,
		func(ctx context.Context, endpoint string) (cri.ImageManagerService, error) {
			return criclient.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).
				WithConnectionTimeout(opts.ConnectionTimeout).WithTracerProvider(nil).Build(ctx)
		})
	if err != nil {
		return nil, err
	}

	return &Client{
		endpoint: endpoint,
		runtime:  &runtimeService{conn: runtimeConn},
		image:    &imageService{conn: imageConn},
		logger:   opts.Logger,
	}, nil
}

// parseEndpoint normalizes a CRI endpoint to a unix:// URL and returns it
// with the socket address and a dialer for it.
func parseEndpoint(kind, endpoint string) (string, string, func(context.Context, string) (net.Conn, error), error) {
	if endpoint == "" {
		return "", "", nil, fmt.Errorf("container %s endpoint is empty", kind)
	}
	if !strings.Contains(endpoint, "://") {
		if !strings.HasPrefix(endpoint, "/") {
			return "", "", nil, fmt.Errorf("container %s endpoint %q: a socket path must be absolute", kind, endpoint)
		}
		endpoint = "unix://" + endpoint
	}
	// "unix://run/x.sock" would silently mean /x.sock on host "run".
	if strings.HasPrefix(endpoint, "unix://") && !strings.HasPrefix(endpoint, "unix:///") {
		return "", "", nil, fmt.Errorf("container %s endpoint %q: want unix:// followed by an absolute socket path", kind, endpoint)
	}
	addr, dial, err := criutil.GetAddressAndDialer(endpoint)
	if err != nil {
		return "", "", nil, fmt.Errorf("container %s endpoint %q: %w", kind, endpoint, err)
	}
	return endpoint, addr, dial, nil
}

// RuntimeService returns the runtime service: a cri.RuntimeService that
// connects on first use and records the CRI operation metrics. It is shared
// and owned by the Client; its Close closes the Client's runtime connection.
func (c *Client) RuntimeService() cri.RuntimeService { return c.runtime }

// ImageService returns the image service, lazily connecting and instrumented
// like RuntimeService. It is shared and owned by the Client.
func (c *Client) ImageService() cri.ImageManagerService { return c.image }

// Version returns the runtime's name and version, as the node reports them in
// status.nodeInfo.containerRuntimeVersion ("<name>://<version>"). It blocks
// for one CRI call.
func (c *Client) Version(ctx context.Context) (runtimeName, runtimeVersion string, err error) {
	resp, err := c.runtime.Version(ctx, kubeRuntimeAPIVersion)
	if err != nil {
		return "", "", fmt.Errorf("get version of container runtime at %s: %w", c.endpoint, err)
	}
	return resp.RuntimeName, resp.RuntimeVersion, nil
}

// errRuntimeUnreachable starts the runtime error of a Status call that
// failed, as the kubelet words it.
var errRuntimeUnreachable = errors.New("container runtime is down")

// Health asks the runtime for its status and derives the errors the kubelet
// reports in the node's Ready condition. It never fails: an unreachable
// runtime is a RuntimeErr. It blocks for one CRI call.
func (c *Client) Health(ctx context.Context) Health {
	resp, err := c.runtime.Status(ctx, false)
	if err != nil {
		return Health{RuntimeErr: fmt.Errorf("%w: %w", errRuntimeUnreachable, err)}
	}
	conditions := resp.GetStatus().GetConditions()
	return Health{
		RuntimeErr: conditionErr(conditions, runtimeapi.RuntimeReady, "container runtime not ready"),
		NetworkErr: conditionErr(conditions, runtimeapi.NetworkReady, "container runtime network not ready"),
		Handlers:   resp.GetRuntimeHandlers(),
		Features:   resp.GetFeatures(),
	}
}

// conditionErr returns nil if the condition of type typ is true, and an error
// worded like the kubelet's otherwise.
func conditionErr(conditions []*runtimeapi.RuntimeCondition, typ, prefix string) error {
	for _, c := range conditions {
		if c.GetType() != typ {
			continue
		}
		if c.GetStatus() {
			return nil
		}
		return fmt.Errorf("%s: %s=%t reason:%s message:%s", prefix, c.GetType(), c.GetStatus(), c.GetReason(), c.GetMessage())
	}
	return fmt.Errorf("%s: the runtime did not report the %s condition", prefix, typ)
}

// CgroupDriver returns the cgroup driver the runtime uses, from the CRI
// RuntimeConfig call. ok is false, with a nil error, when the runtime does
// not implement RuntimeConfig (containerd before 1.7) or reports no Linux
// configuration: the agent then uses its configured driver, as the kubelet
// does. It blocks for one CRI call.
func (c *Client) CgroupDriver(ctx context.Context) (driver runtimeapi.CgroupDriver, ok bool, err error) {
	resp, err := c.runtime.RuntimeConfig(ctx)
	if status.Code(err) == codes.Unimplemented {
		klog.FromContext(ctx).Info("Container runtime does not implement RuntimeConfig; using the configured cgroup driver", "endpoint", c.endpoint)
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("get cgroup driver of container runtime at %s: %w", c.endpoint, err)
	}
	linux := resp.GetLinux()
	if linux == nil {
		return 0, false, nil
	}
	switch d := linux.GetCgroupDriver(); d {
	case runtimeapi.CgroupDriver_SYSTEMD, runtimeapi.CgroupDriver_CGROUPFS:
		return d, true, nil
	default:
		return 0, false, fmt.Errorf("container runtime at %s reported unknown cgroup driver %d", c.endpoint, d)
	}
}

// Close closes the runtime and image connections. Calls in flight fail, and
// later calls fail with ErrClosed. It is idempotent and does not block on the
// runtime.
func (c *Client) Close() error {
	ctx := klog.NewContext(context.Background(), c.logger)
	return errors.Join(c.runtime.Close(ctx), c.image.Close(ctx))
}
