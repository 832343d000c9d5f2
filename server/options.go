package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/features"
)

// Defaults, as the kubelet's (KubeletConfiguration v1beta1).
const (
	DefaultPort                    int32 = 10250
	DefaultAuthnCacheTTL                 = 2 * time.Minute
	DefaultAuthorizedTTL                 = 5 * time.Minute
	DefaultUnauthorizedTTL               = 30 * time.Second
	DefaultCertDirectory                 = "/var/lib/kubelet/pki"
	DefaultNodeLogDir                    = "/var/log"
	DefaultCheckpointDir                 = "/var/lib/kubelet/checkpoints"
	DefaultRuntimeRequestTimeout         = 2 * time.Minute
	AuthorizationModeWebhook             = "Webhook"
	AuthorizationModeAlwaysAllow         = "AlwaysAllow"
	defaultCacheSize                     = 4096
	defaultWebhookRequestTimeout         = 10 * time.Second
	defaultCertReloadCheckInterval       = time.Minute
)

// Options configure a Server. The zero value of every field is the
// kubelet's default unless its comment says otherwise.
type Options struct {
	// Address is the IP the secure server binds ("" and "0.0.0.0" mean all
	// addresses).
	Address string
	// Port is the secure (HTTPS) port; 0 means DefaultPort (10250). A
	// negative Port disables the secure server (tests, or an embedder that
	// serves Handler itself).
	Port int32
	// ReadOnlyPort, when positive, also serves the kubelet's read-only
	// endpoints on plain HTTP without authentication on Address:ReadOnlyPort.
	// 0 (the kubelet's default) leaves it off.
	ReadOnlyPort int32

	// Listener and ReadOnlyListener, when set, are served by Run instead of
	// listening on Address:Port and Address:ReadOnlyPort (socket
	// activation, tests). Run closes them when it returns.
	Listener, ReadOnlyListener net.Listener

	// NodeName is the node's name: authorization checks ask about
	// nodes/<NodeName>, and a bootstrapped serving certificate is for
	// system:node:<NodeName>.
	NodeName string
	// NodeAddresses returns the node's addresses as status reports them; the
	// self-signed and the bootstrapped serving certificates are issued for
	// its hostnames and IPs. It may be called from any goroutine and must
	// not block. Nil: the hostname (os.Hostname or NodeName) only.
	NodeAddresses func() []v1.NodeAddress

	TLS            TLSOptions
	Authentication AuthnOptions
	Authorization  AuthzOptions
	// Client is the node's clientset, used for TokenReview, SubjectAccessReview
	// and CertificateSigningRequests. Required when the token webhook, the
	// Webhook authorization mode or TLS bootstrap is on.
	Client kubernetes.Interface

	// Pods returns the pods bound to this node as the agent runs them
	// (static pods as the node runs them, not their mirror pods): /pods
	// serves them and logs, exec, attach and port-forward look pods up in
	// them by namespace and name. The returned pods must not be modified by
	// the caller or the callee afterwards. Required.
	Pods func() []*v1.Pod
	// PodStatus returns the latest status the agent computed for a pod by
	// UID; false when it has none (then the pod's own status is used, as
	// the kubelet does). Logs use it to find the container ID (and, with
	// previous=true, the last terminated one). Nil: the pod's own status.
	PodStatus func(uid types.UID) (v1.PodStatus, bool)
	// Runtime is the CRI runtime the default logs, exec, attach, run,
	// port-forward and /runningpods routes use. Nil: those routes answer
	// 501 unless an embedder replaces them (see RouteGroup).
	Runtime Runtime
	// SyncLoopHealthy backs /healthz/syncloop; nil is always healthy.
	SyncLoopHealthy func() error
	// HealthChecks are further named checks under /healthz, as the
	// kubelet's extended checkers.
	HealthChecks []HealthCheck

	// Summary returns the stats summary for /stats/summary (cached stats,
	// as the kubelet's Get(ctx, false)); CPUAndMemory the one for
	// /stats/summary?only_cpu_and_memory=true. Nil: 500 "Internal Error:
	// stats not available".
	Summary      func(ctx context.Context) (*statsapi.Summary, error)
	CPUAndMemory func(ctx context.Context) (*statsapi.Summary, error)

	// Metrics is served on /metrics; ResourceMetrics on /metrics/resource,
	// CadvisorMetrics on /metrics/cadvisor, ProbeMetrics on /metrics/probes.
	// A nil gatherer serves an empty exposition.
	Metrics, ResourceMetrics, CadvisorMetrics, ProbeMetrics prometheus.Gatherer

	// Configz returns the configuration /configz serves under
	// "kubeletconfig". The kubelet serves its v1beta1 KubeletConfiguration
	// with kind and apiVersion set; return that to look the same. It is
	// called per request and must be safe for concurrent use. Nil: /configz
	// serves {}.
	Configz func() any

	// CheckpointDir is where /checkpoint has the runtime write container
	// checkpoints; "" means /var/lib/kubelet/checkpoints (the kubelet's
	// <root-dir>/checkpoints).
	CheckpointDir string
	// NodeLogDir is the directory /logs/ serves; "" means /var/log.
	NodeLogDir string
	// DisableDebuggingHandlers turns off run, exec, attach, portForward,
	// containerLogs, runningpods, logs and pprof (enableDebuggingHandlers:
	// false): they answer 405 "Debug endpoints are disabled.".
	DisableDebuggingHandlers bool
	// DisableSystemLogHandler turns off /logs/ (enableSystemLogHandler:
	// false): 405 "logs endpoint is disabled.".
	DisableSystemLogHandler bool
	// EnableSystemLogQuery is accepted for KubeletConfiguration parity; the
	// journal/log query mode of /logs/ is not implemented, so New logs that
	// it is ignored and /logs/ serves files only.
	EnableSystemLogQuery bool
	// DisableProfilingHandler turns off /debug/pprof/ (enableProfilingHandler:
	// false): 405 "profiling endpoint is disabled.".
	DisableProfilingHandler bool
	// ReadRotatedLogs makes /containerLogs read a container's rotated log
	// files (<n>.log.<timestamp>, gzipped or not) before its current one.
	// The kubelet reads the current file only, so false is the default.
	ReadRotatedLogs bool

	// Features are the node's feature gates (nil: the kubelet's
	// defaults). The server reads ExtendWebSocketsToKubelet: off, WebSocket
	// exec, attach and port-forward are proxied to the runtime's streaming
	// server untranslated, as by the kubelet with the gate off (the node
	// must then not declare the feature; pods.NodeDeclaredFeatures follows
	// the same gates).
	Features *features.Gates

	// RuntimeRequestTimeout bounds the CRI calls the server makes; 0
	// means 2m.
	RuntimeRequestTimeout time.Duration

	// Routes are an embedder's routes: each is added, or replaces the
	// default route with the same Path (see Route). The fx Module fills it
	// from the RouteGroup value group.
	Routes []Route
	// Authenticator and Authorizer, when set, replace the ones built from
	// Authentication and Authorization.
	Authenticator Authenticator
	Authorizer    Authorizer

	// Clock drives caches, certificate reload checks and log follow polling;
	// nil is the real clock.
	Clock clock.WithTicker
	// Registerer receives the server's metrics (kubelet_http_*, the
	// TokenReview and SubjectAccessReview calls' apiserver_delegated_authn_*
	// and apiserver_delegated_authz_*, the certificate manager's); nil
	// registers nothing.
	Registerer prometheus.Registerer
}

// TLSOptions choose the serving certificate and the TLS parameters.
type TLSOptions struct {
	// CertFile and KeyFile are tlsCertFile and tlsPrivateKeyFile. When both
	// are empty and Bootstrap is false, a self-signed pair is created in
	// CertDirectory (kubelet.crt, kubelet.key) unless one is already there.
	// The files are re-read when they change (checked at most once a
	// minute), as the kubelet's ReloadKubeletServerCertificateFile.
	CertFile, KeyFile string
	// CertDirectory is where self-signed and bootstrapped certificates
	// live; "" means /var/lib/kubelet/pki.
	CertDirectory string
	// Bootstrap is serverTLSBootstrap: request the serving certificate
	// through the CertificateSigningRequest API (signer
	// kubernetes.io/kubelet-serving) and rotate it before it expires.
	Bootstrap bool
	// MinVersion is tlsMinVersion ("VersionTLS12", "VersionTLS13"; "" is
	// Go's default).
	MinVersion string
	// CipherSuites is tlsCipherSuites, names as the kubelet's flag takes.
	CipherSuites []string
}

// AuthnOptions are KubeletConfiguration's authentication section.
type AuthnOptions struct {
	// Anonymous lets requests that carry no credentials through as
	// system:anonymous (group system:unauthenticated). Off by default.
	Anonymous bool
	// ClientCAFile enables x509 client certificate authentication: a
	// certificate verified against this bundle authenticates as its
	// CommonName with its Organizations as groups. Re-read when it changes.
	ClientCAFile string
	// DisableWebhook turns the bearer token webhook (TokenReview) off; it is
	// on by default, as the kubelet's authentication.webhook.enabled.
	DisableWebhook bool
	// CacheTTL is authentication.webhook.cacheTTL; 0 means 2m.
	CacheTTL time.Duration
}

// AuthzOptions are KubeletConfiguration's authorization section.
type AuthzOptions struct {
	// Mode is "Webhook" (the default: SubjectAccessReview) or "AlwaysAllow".
	Mode string
	// AuthorizedTTL and UnauthorizedTTL are the webhook's cache TTLs; 0
	// means 5m and 30s.
	AuthorizedTTL, UnauthorizedTTL time.Duration
}

// HealthCheck is a named check under /healthz: /healthz runs them all and
// /healthz/<Name> runs one. Check must be safe for concurrent use.
type HealthCheck struct {
	Name  string
	Check func(r *http.Request) error
}

// Runtime is the part of the CRI runtime service the default routes use:
// the streaming calls (which return the runtime's streaming server URL the
// server proxies to), ExecSync for /run, CheckpointContainer for
// /checkpoint, the sandbox and container lists
// for /runningpods and container lookups, and ContainerStatus for a
// container's log path and state. cri-api's RuntimeService (and nodekit's
// runtime.Client.RuntimeService()) implement it.
type Runtime interface {
	Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error
}

// withDefaults returns o with defaults applied, or an error naming the
// first invalid field.
func (o Options) withDefaults() (Options, error) {
	if o.NodeName == "" {
		return o, errors.New("server: NodeName is required")
	}
	if o.Pods == nil {
		return o, errors.New("server: Pods is required")
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Port > 65535 || o.ReadOnlyPort > 65535 || o.ReadOnlyPort < 0 {
		return o, fmt.Errorf("server: port %d or read-only port %d out of range", o.Port, o.ReadOnlyPort)
	}
	if o.Address != "" && net.ParseIP(o.Address) == nil {
		return o, fmt.Errorf("server: address %q is not an IP address", o.Address)
	}
	if o.TLS.CertDirectory == "" {
		o.TLS.CertDirectory = DefaultCertDirectory
	}
	if (o.TLS.CertFile == "") != (o.TLS.KeyFile == "") {
		return o, errors.New("server: tlsCertFile and tlsPrivateKeyFile must be set together")
	}
	if o.Authentication.CacheTTL == 0 {
		o.Authentication.CacheTTL = DefaultAuthnCacheTTL
	}
	switch o.Authorization.Mode {
	case "":
		o.Authorization.Mode = AuthorizationModeWebhook
	case AuthorizationModeWebhook, AuthorizationModeAlwaysAllow:
	default:
		return o, fmt.Errorf("server: authorization mode %q is not Webhook or AlwaysAllow", o.Authorization.Mode)
	}
	if o.Authorization.AuthorizedTTL == 0 {
		o.Authorization.AuthorizedTTL = DefaultAuthorizedTTL
	}
	if o.Authorization.UnauthorizedTTL == 0 {
		o.Authorization.UnauthorizedTTL = DefaultUnauthorizedTTL
	}
	if o.TLS.Bootstrap && o.Client == nil {
		return o, errors.New("server: Client is required for TLS bootstrap")
	}
	if o.CheckpointDir == "" {
		o.CheckpointDir = DefaultCheckpointDir
	}
	if o.NodeLogDir == "" {
		o.NodeLogDir = DefaultNodeLogDir
	}
	if o.RuntimeRequestTimeout == 0 {
		o.RuntimeRequestTimeout = DefaultRuntimeRequestTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o, nil
}
