package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cri "k8s.io/cri-api/pkg/apis"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/internal/clientmetrics"
	"github.com/nodekit/nodekit/machine"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/server"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/status/podstatus"
)

// NodeAPI serves the kubelet's HTTPS API (server.Module) on
// address:port, 10250 by default, from the *Config in the graph: TLS
// (tlsCertFile/tlsPrivateKeyFile, else a self-signed pair in --cert-dir,
// or serverTLSBootstrap through the CSR API), authentication and
// authorization as configured, the read-only port when readOnlyPort is set,
// and the kubelet's endpoints over the graph:
//
//   - the pods of the pod sources (podsource.Config.Pods: static pods as
//     run, not their mirror pods) with the statuses the agent computed
//     (podstatus.Manager), for /pods and the logs, exec, attach and
//     port-forward lookups;
//   - the CRI runtime (cri.RuntimeService) for logs, exec, attach,
//     port-forward, run, checkpoint and /runningpods, when the graph has
//     one: without it (a node whose pods something else runs) those routes
//     answer 501 unless the embedder adds its own with server.AsRoute;
//   - the stats provider (*stats.Provider) for /stats/summary,
//     /metrics/resource and /metrics/cadvisor, when the graph has one;
//   - /metrics from the agent's registry, /metrics/probes from the
//     registry named prober.MetricsRegistererName, where Probes registers
//     the prober's metrics;
//   - /configz with the KubeletConfiguration, /healthz/syncloop from the
//     pod lifecycle loop.
//
// It also adds to the agent's registry the kubelet's kubelet_node_name,
// client-go's rest_client_* series (see internal/clientmetrics) and, when
// the graph has a stats.VolumeStatsFunc, kubelet_volume_stats_*. With
// enableServer false no node API is built at all: the graph's
// *server.Server is nil (its handlers, routes and HTTP metrics would cost
// every agent of a fleet memory for nothing), and nothing listens. The
// healthz port is a separate server (HealthServer) and stays as it is.
//
// Without an API server (Standalone) no token can be reviewed and no
// request authorized by webhook: bearer tokens are refused,
// serverTLSBootstrap falls back to a self-signed pair, and under Webhook
// authorization (the default) the secure port is not served at all, each
// said once in the log; with authorization.mode AlwaysAllow it serves the
// static pods on /pods. The kubelet refuses to start in that case.
//
// Change the server's inputs with fx.Decorate on server.Options, add or
// replace endpoints with server.AsRoute.
var NodeAPI = fx.Options(
	fx.Provide(
		provideServerOptions,
		provideNodeAPI,
	),
	fx.Invoke(registerNodeMetrics),
	fx.Invoke(func(*server.Server) {}),
)

// provideNodeAPI is server.Module's provider when the configuration serves
// the kubelet API (Config.ServerEnabled), else nil: no server to build.
func provideNodeAPI(cfg *Config, p server.Params) (*server.Server, error) {
	if !cfg.ServerEnabled() {
		if p.Logger.GetSink() != nil {
			p.Logger.Info("enableServer is false: the kubelet API is not served")
		}
		return nil, nil
	}
	return server.Provide(p)
}

type serverOptionsParams struct {
	fx.In

	Config     *Config
	Node       *status.NodeWatch
	Sources    *podsource.Config
	Statuses   *podstatus.Manager
	Controller *pods.Controller
	Metrics    prometheus.Gatherer
	// Probes is Probes' registry; a node without it serves an empty
	// /metrics/probes.
	Probes  prometheus.Gatherer `name:"probe_metrics" optional:"true"`
	Runtime cri.RuntimeService  `optional:"true"`
	Stats   *stats.Provider     `optional:"true"`
	Machine machine.Func
	Logger  logr.Logger `optional:"true"`
	// Client is the API server's; a standalone node has none (see
	// withoutAPIServer).
	Client kubernetes.Interface `optional:"true"`
	// Dirs makes the root directory exist before the server writes its
	// self-signed certificate under it.
	Dirs dataDirs
}

// provideServerOptions builds the node API's options from the
// configuration (ServerOptions) and the graph.
func provideServerOptions(p serverOptionsParams) (server.Options, error) {
	o := p.Config.ServerOptions(p.Node.Node)
	if p.Client == nil {
		o = withoutAPIServer(o, p.Logger)
	}
	o.Pods = p.Sources.Pods
	o.PodStatus = p.Statuses.GetPodStatus
	if p.Runtime != nil {
		o.Runtime = p.Runtime
	}
	o.SyncLoopHealthy = p.Controller.SyncLoopHealthy
	o.Metrics = p.Metrics
	o.ProbeMetrics = p.Probes
	if p.Stats != nil {
		o.Summary = p.Stats.Summary
		o.CPUAndMemory = p.Stats.CPUAndMemory
		resource := prometheus.NewRegistry()
		if err := resource.Register(stats.ResourceMetricsCollector(p.Stats, p.Logger)); err != nil {
			return o, fmt.Errorf("node API: /metrics/resource: %w", err)
		}
		cadvisor := prometheus.NewRegistry()
		if err := cadvisor.Register(stats.CadvisorCollector(p.Stats, stats.CadvisorOptions{Machine: p.Machine, Logger: p.Logger})); err != nil {
			return o, fmt.Errorf("node API: /metrics/cadvisor: %w", err)
		}
		o.ResourceMetrics, o.CadvisorMetrics = resource, cadvisor
	}
	return o, nil
}

// withoutAPIServer adapts the node API's options to a node without an API
// server (Standalone), which cannot ask one to review tokens, authorize
// requests or sign a serving certificate. The kubelet refuses to start
// then; the agent runs its static pods all the same and says, once, what
// it serves instead: bearer tokens are not accepted (client certificates
// and, when enabled, anonymous requests still authenticate), Webhook
// authorization means the secure port is not served at all (with
// authorization.mode AlwaysAllow it is), and serverTLSBootstrap falls back
// to the certificate files or a self-signed pair. An embedder's own
// Authenticator or Authorizer is kept as it is. The read-only port, which
// has no authentication, is served as configured.
func withoutAPIServer(o server.Options, logger logr.Logger) server.Options {
	if logger.GetSink() == nil {
		logger = logr.Discard()
	}
	if o.Port < 0 {
		return o
	}
	if o.Authenticator == nil && !o.Authentication.DisableWebhook {
		o.Authentication.DisableWebhook = true
		logger.Info("No API server: the kubelet API does not accept bearer tokens (authentication.webhook.enabled needs TokenReview)")
	}
	if o.TLS.Bootstrap {
		o.TLS.Bootstrap = false
		logger.Info("No API server: serverTLSBootstrap cannot request a serving certificate; the certificate files or a self-signed pair are used")
	}
	if o.Authorizer == nil && o.Authorization.Mode != server.AuthorizationModeAlwaysAllow {
		o.Port, o.Listener = -1, nil
		// Nothing is served to authorize; the Server still wants an
		// authorizer without a client.
		o.Authorizer = denyAll{}
		logger.Info("No API server: Webhook authorization cannot run, so the kubelet API is not served; set authorization.mode AlwaysAllow (--authorization-mode=AlwaysAllow) to serve it standalone")
	}
	return o
}

// denyAll is the authorizer of a node API that serves no secure port.
type denyAll struct{}

func (denyAll) Authorize(context.Context, server.Attributes) (server.Decision, string, error) {
	return server.DecisionDeny, "no API server to authorize requests (standalone node)", nil
}

// ServerEnabled reports whether the kubelet API is served
// (enableServer, true by default).
func (cfg *Config) ServerEnabled() bool {
	return cfg.Kubelet.EnableServer == nil || *cfg.Kubelet.EnableServer
}

// ServerOptions returns the node API's options from the configuration:
// server.ConfigOptions of the KubeletConfiguration, the node's name, the
// serving certificates in CertDir (--cert-dir; its default <root-dir>/pki
// differs from the kubelet's fixed /var/lib/kubelet/pki only with another
// --root-dir, so that agents sharing a host keep apart), container
// checkpoints in <root-dir>/checkpoints, /configz serving the
// KubeletConfiguration, and no listener at all when enableServer is false.
// node returns the node as last seen (status.NodeWatch.Node fits): its
// addresses name the serving certificate. The pods, statuses, runtime,
// stats and gatherers come from the caller (NodeAPI fills them from the
// graph).
func (cfg *Config) ServerOptions(node func() (*v1.Node, bool)) server.Options {
	o := server.ConfigOptions(&cfg.Kubelet)
	if !cfg.ServerEnabled() {
		o.Port, o.ReadOnlyPort = -1, 0
	}
	o.NodeName = cfg.NodeName
	o.Features = cfg.Features
	if cfg.ServerEnabled() {
		o.Listener = cfg.NodeAPIListener
	}
	o.TLS.CertDirectory = cfg.CertDir
	o.CheckpointDir = filepath.Join(cfg.RootDir, "checkpoints")
	o.NodeAddresses = func() []v1.NodeAddress {
		if n, ok := node(); ok {
			return n.Status.Addresses
		}
		return nil
	}
	configz := cfg.Kubelet.DeepCopy()
	configz.TypeMeta = metav1.TypeMeta{APIVersion: kubeletconfig.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"}
	o.Configz = func() any { return configz }
	return o
}

type nodeMetricsParams struct {
	fx.In

	Config      *Config
	Registerer  prometheus.Registerer
	Stats       *stats.Provider       `optional:"true"`
	VolumeStats stats.VolumeStatsFunc `optional:"true"`
	Logger      logr.Logger           `optional:"true"`
}

// registerNodeMetrics adds to the agent's registry the kubelet's series
// that no module owns: kubelet_node_name, client-go's rest_client_*, and
// kubelet_volume_stats_* when volume usage is measured.
func registerNodeMetrics(p nodeMetricsParams) error {
	name := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "node_name",
		Help: "[ALPHA] The node's name. The count is always 1.",
	}, []string{"node"})
	name.WithLabelValues(p.Config.NodeName).Set(1)
	if err := p.Registerer.Register(name); err != nil {
		return fmt.Errorf("register kubelet_node_name: %w", err)
	}
	if err := clientmetrics.Register(p.Registerer); err != nil {
		if !errors.Is(err, clientmetrics.ErrOtherAdapter) {
			return fmt.Errorf("register rest_client metrics: %w", err)
		}
		if p.Logger.GetSink() != nil {
			p.Logger.Info("No rest_client_* metrics", "reason", err.Error())
		}
	}
	if p.Stats != nil && p.VolumeStats != nil {
		if err := p.Registerer.Register(stats.VolumeStatsCollector(p.Stats, p.Logger)); err != nil {
			return fmt.Errorf("register kubelet_volume_stats metrics: %w", err)
		}
	}
	return nil
}
