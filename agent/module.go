package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/eviction"
	"github.com/nodekit/nodekit/internal/fxgroup"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/lease"
	"github.com/nodekit/nodekit/machine"
	"github.com/nodekit/nodekit/nodeshutdown"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/apiserver"
	"github.com/nodekit/nodekit/prober"
	"github.com/nodekit/nodekit/server"
	"github.com/nodekit/nodekit/status"
	"github.com/nodekit/nodekit/status/podstatus"
	"github.com/nodekit/nodekit/ticks"
	"github.com/nodekit/nodekit/volume"
)

// Core is everything of a node agent but the runtime that runs its pods:
// the apiserver clients, metrics, events, the node Lease, node registration
// and status, the node watch, the API server pod source, the static pod
// sources (manifest directory and URL) and their mirror pods, the pod
// status manager, the pod lifecycle loop (admission, pod workers,
// housekeeping), the kubelet API (NodeAPI) and the /healthz and /metrics
// server, all configured from the *Config in the graph. Add a runtime: CRI
// for a kubelet-like node, or PodBackend for a node whose pods something
// else runs. The graph gets, for the modules and for an embedder's own
// pieces:
//
//   - *Config, as supplied;
//   - *Clients and kubernetes.Interface (the node's rate-limited client,
//     which registers the Node; lease.Options and status.Options carry the
//     heartbeat client for the Lease and the status), on the
//     rotating client certificate under rotateCertificates (see
//     certificate.UpdateTransport);
//   - prometheus.Registerer and prometheus.Gatherer (one registry, served on
//     /metrics of the node API and of the healthz port; an agent that
//     serves neither gets one that keeps nothing: an embedder that gathers
//     such an agent's metrics itself replaces both with fx.Decorate),
//     clock.Clock (real), ticks.Align (the node's shared ticks
//     on that clock, at a random phase: the periodic loops of pods, userns,
//     the runtime's status poll, image GC and log rotation, eviction, the
//     pod status sync and the node status wake on them together; the
//     Lease's renewals drift onto them within the kubelet's jitter),
//     logr.Logger (klog's, with the node's name on every line),
//     and record.EventRecorder (events as component "kubelet");
//   - *status.NodeWatch (the one watch of the node's object) and
//     pods.NodeGetter (the node admission checks against:
//     status.Reporter.NodeAnyWay, the node before it is registered too);
//   - the Options of lease, status, the API server source, the file and URL
//     sources, the mirror pods and pods, derived from the Config (see
//     Config's methods to derive them without fx).
//
// Core needs an API server (cfg.KubeconfigPath); Standalone is its variant
// without one, and CoreFor picks between them.
var Core = fx.Options(
	fx.Provide(
		provideClients,
		func(c *Clients) kubernetes.Interface { return c.Client },
		provideRecorder,
		// Lease and node status use the heartbeat client, as the
		// kubelet's: set in their Options rather than decorated in an
		// fx.Module of their own, whose dig scope costs every agent of a
		// fleet ~6 KiB.
		// The Lease takes its owner reference from the Node's
		// registration (the node watch, which the status Reporter
		// runs with) instead of reading the Node.
		func(cfg *Config, c *Clients, w *status.NodeWatch) lease.Options {
			o := cfg.LeaseOptions(c.CloseConnections)
			o.Client = c.Heartbeat
			o.Registration = w
			return o
		},
		// The Node is registered with the main client, as the kubelet
		// registers it: no request timeout, so that an API server
		// queueing a thousand starting nodes holds the CREATE up to its
		// default wait instead of answering 429 after 2.5 s.
		func(cfg *Config, c *Clients) status.Options {
			o := cfg.StatusOptions(c.CloseConnections)
			o.Client = c.Heartbeat
			o.RegisterClient = c.Client
			return o
		},
		provideNodeWatch,
		func(cfg *Config, w *status.NodeWatch) apiserver.Options {
			return cfg.APIServerSourceOptions(w.HasSynced)
		},
	),
	lease.Module,
	status.Module,
	apiserver.Module,
	MirrorPods,
	shared,
)

// Standalone is Core for a node without an API server (the kubelet's
// standalone mode, an empty --kubeconfig): it runs the static pods of the
// manifest directory and URL only. Nothing is registered, no Lease is
// renewed, no status is patched, no pod comes from an API server and no
// mirror pod is made; events are only logged. The node's status is computed
// all the same (a standalone status.Reporter keeps it in a local
// *status.NodeWatch, which admission, the cgroup hierarchy and the node API
// read), and the pods' statuses stay in the podstatus.Manager, whose
// GetPodStatus and the pods.Store the node API's /pods serves (NodeAPI
// without an API server accepts no bearer tokens and, unless
// authorization.mode is AlwaysAllow, serves no secure port; see NodeAPI).
// The graph has
// what Core gives but *Clients, kubernetes.Interface, lease.Options and
// apiserver.Options; a piece an embedder adds that needs them cannot run
// standalone (fx reports the missing type when the agent is built).
var Standalone = fx.Options(
	fx.Provide(
		provideLocalRecorder,
		func(cfg *Config) status.Options { return cfg.StatusOptions(nil) },
		provideLocalNodeWatch,
	),
	status.Module,
	shared,
)

// shared is what Core and Standalone have alike.
var shared = fx.Options(
	// A value of the wrong type in one of nodekit's groups fails the start.
	fxgroup.Check(map[string]reflect.Type{
		status.SetterGroup:       reflect.TypeFor[status.OrderedSetter](),
		status.HealthCheckGroup:  reflect.TypeFor[status.HealthCheck](),
		pods.AdmitHandlerGroup:   reflect.TypeFor[pods.OrderedAdmitHandler](),
		podsource.SourceGroup:    reflect.TypeFor[podsource.Source](),
		prober.HandlerGroup:      reflect.TypeFor[prober.Handler](),
		volume.PluginGroup:       reflect.TypeFor[volume.Plugin](),
		eviction.SignalGroup:     reflect.TypeFor[eviction.Signal](),
		nodeshutdown.SourceGroup: reflect.TypeFor[nodeshutdown.Source](),
		server.RouteGroup:        reflect.TypeFor[server.Route](),
	}),
	fx.Provide(
		newRegistry,
		func() clock.Clock { return clock.RealClock{} },
		func(clk clock.Clock) ticks.Align { return ticks.New(clk, ticks.RandomPhase()) },
		newLogger,
		setterOptions,
		provideMachine,
		// Admission sees the node before it is registered too.
		func(r *status.Reporter) pods.NodeGetter { return nodeAnyWay{r} },
		func(c *podsource.Config) podstatus.PodGetter { return c },
		func(cfg *Config, w *status.NodeWatch) pods.Options { return cfg.PodsOptions(w) },
		provideHealthServer,
		ensureDataDirs,
	),
	podsource.Module,
	StaticPods,
	podstatus.Module,
	pods.Module,
	Probes,
	NodeAPI,
	NodeShutdown,
	Plugins,
	// The health server is nil when healthzPort is 0.
	fx.Invoke(func(*HealthServer) {}),
)

// CoreFor returns the core for cfg: Standalone when cfg.KubeconfigPath is
// empty, Core otherwise. New and NewWith use it.
func CoreFor(cfg *Config) fx.Option {
	if cfg.KubeconfigPath == "" {
		return Standalone
	}
	return Core
}

// Module is a complete kubelet-like node agent: Core with the CRI runtime.
// It needs an API server; New picks Standalone instead of Core for a
// configuration without a kubeconfig.
//
// Replace any value with fx.Decorate (e.g. a fake clock, a different
// status.Options) and add pieces with the registration helpers
// (status.AsSetter, status.AsHealthCheck, podsource.AsSource,
// pods.AsAdmitHandler); see examples/customstatus.
var Module = fx.Options(Core, CRI)

// New returns an fx application that runs a kubelet-like node agent for
// cfg: CoreFor(cfg) (Core, or Standalone without a kubeconfig) with CRI,
// cfg, fx's events logged through klog at verbosity 4, and opts (an
// embedder's additions and replacements, applied last). cfg must be
// Complete. Call Run (blocks until SIGINT/SIGTERM) or Start/Stop.
func New(cfg *Config, opts ...fx.Option) *fx.App {
	return NewWith(cfg, CRI, opts...)
}

// NewWith is New with the given runtime module instead of CRI: PodBackend
// for a pod-level backend, or an embedder's own module that provides a
// pods.Runtime.
func NewWith(cfg *Config, runtime fx.Option, opts ...fx.Option) *fx.App {
	return fx.New(append([]fx.Option{
		fx.Supply(cfg),
		fx.WithLogger(func(l logr.Logger) fxevent.Logger {
			if !l.V(4).Enabled() {
				return fxevent.NopLogger
			}
			return &fxevent.SlogLogger{Logger: slog.New(logr.ToSlogHandler(logrOnly(l.WithName("fx")).V(4)))}
		}),
		CoreFor(cfg),
		runtime,
	}, opts...)...)
}

// logrOnly is l without its sink's slog side. klog's sink handles slog
// records itself and drops the values given with WithValues, the node's
// name among them; through logr's adapter the fx lines keep them.
func logrOnly(l logr.Logger) logr.Logger {
	if l.GetSink() == nil {
		return l
	}
	return logr.New(logrSink{l.GetSink()})
}

// logrSink is a LogSink and nothing more (no logr.SlogSink).
type logrSink struct{ logr.LogSink }

// Init does nothing: the wrapped sink was initialised by its own logger.
func (logrSink) Init(logr.RuntimeInfo) {}

// newLogger is klog's logger with the node's name, so every line of an
// agent (several may share a process) says which node it is about.
func newLogger(cfg *Config) logr.Logger {
	return klog.Background().WithValues("node", cfg.NodeName)
}

// newRegistry is the agent's registry, with the Go and process
// collectors, which the node API's /metrics and the healthz server's
// serve. The Go collector adds to its defaults the runtime's scheduling
// latencies (go_sched_latencies_seconds: how long goroutines waited
// runnable for a core, by decade, one transition in eight sampled), read
// only when /metrics is gathered:
// nodebench splits a burst's waits with it. An agent that serves neither (enableServer false and healthzPort
// 0, as every agent of a fleet) gets a Registerer that keeps nothing and a
// Gatherer that gathers nothing: nobody could read its registry, whose
// maps and collectors cost each agent memory. The modules' metrics are
// updated as before, unregistered.
func newRegistry(cfg *Config) (prometheus.Registerer, prometheus.Gatherer) {
	if !cfg.ServerEnabled() && !cfg.healthzServed() {
		return unread()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(schedLatencies)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, reg
}

// schedLatencies selects the runtime's /sched/latencies:seconds for the Go
// collector.
var schedLatencies = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)}

// unread is the registry of metrics nothing serves: registering keeps
// nothing (and never fails), gathering finds nothing.
func unread() (prometheus.Registerer, prometheus.Gatherer) {
	return prometheus.WrapRegistererWith(nil, nil), prometheus.Gatherers{}
}

func provideRecorder(lc fx.Lifecycle, cfg *Config, logger logr.Logger, c *Clients) record.EventRecorder {
	events := c.Events
	if events == nil {
		events = c.Client.CoreV1()
	}
	rec, stop := newRecorder(cfg, logger, events, scheme.Scheme)
	lc.Append(fx.StopHook(stop))
	return rec
}

// nodeAnyWay is the node admission checks pods against: the Reporter's
// NodeAnyWay, so static pods run before the node is registered.
type nodeAnyWay struct{ r *status.Reporter }

func (n nodeAnyWay) Node() (*v1.Node, bool) { return n.r.NodeAnyWay() }

// provideLocalRecorder records events as Core's recorder does, but only to
// the log: a standalone node has no API server to send them to, as the
// kubelet's without one.
func provideLocalRecorder(lc fx.Lifecycle, cfg *Config, logger logr.Logger) record.EventRecorder {
	logger.Info("No API server: events are only logged")
	// Logged with the agent's logger (its node on every line), not klog's
	// global one as StartStructuredLogging would.
	sink := loggingSink{logger: logger}
	rec, stop := newEventRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: cfg.NodeName}, logger,
		func(_ context.Context, e *v1.Event) { sink.log(e) })
	lc.Append(fx.StopHook(stop))
	return rec
}

// provideLocalNodeWatch is the node watch of a standalone node: the
// standalone status.Reporter keeps the Node there.
func provideLocalNodeWatch(cfg *Config) (*status.NodeWatch, error) {
	return status.NewLocalNodeWatch(cfg.NodeName)
}

// provideNodeWatch watches the node with the main client (the heartbeat
// client's timeout would cut every watch off) from start to stop.
func provideNodeWatch(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, cfg *Config, c *Clients) (*status.NodeWatch, error) {
	w, err := status.NewNodeWatch(c.Client, cfg.NodeName)
	if err != nil {
		return nil, err
	}
	runner.Hook(lc, sd, logger, "nodewatch", w.Run)
	return w, nil
}

// dataDirs stands for the agent's directories existing: the provider of a
// value that needs them takes a dataDirs, so its start hook runs after they
// are made.
type dataDirs struct{}

// ensureDataDirs makes the agent's directories on start, as the kubelet
// does: its root directory (whose filesystem is the node's
// ephemeral-storage), the pods and plugins directories under it, the
// pod logs directory and that of the container log links (the plugin
// manager makes plugins_registry).
func ensureDataDirs(lc fx.Lifecycle, cfg *Config) dataDirs {
	lc.Append(fx.StartHook(func() error {
		for _, d := range []struct {
			path string
			mode os.FileMode
		}{{cfg.RootDir, 0o750}, {filepath.Join(cfg.RootDir, "pods"), 0o750},
			{filepath.Join(cfg.RootDir, "plugins"), 0o750}, {cfg.Kubelet.PodLogsDir, 0o755}, {cfg.ContainerLogsDir, 0o755}} {
			if err := os.MkdirAll(d.path, d.mode); err != nil {
				return fmt.Errorf("create the agent's directory: %w", err)
			}
		}
		return nil
	}))
	return dataDirs{}
}

// setterOptions gives the status setters the agent's one machine.Func
// and the features of its runtime.
func setterOptions(cfg *Config, host machine.Func, rt pods.Runtime) (status.SetterOptions, error) {
	opts, err := cfg.SetterOptions(rt)
	opts.Machine = host
	return opts, err
}

// provideMachine is the agent's one source of the host's facts
// (machine.Read under the root directory, cached once read), which the
// node status and the kubepods cgroup share; an embedder simulating a
// node replaces it with fx.Decorate. dataDirs: the root directory whose
// filesystem is measured exists before the first read.
func provideMachine(cfg *Config, _ dataDirs) machine.Func {
	roots := machine.Roots{RootDir: cfg.RootDir}
	return machine.Cached(func() (*machine.Info, error) { return machine.Read(roots) })
}

func provideHealthServer(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, cfg *Config, g prometheus.Gatherer) *HealthServer {
	if !cfg.healthzServed() {
		return nil
	}
	s := NewHealthServer(healthzAddress(cfg), g)
	if cfg.HealthzListener != nil {
		s = newHealthServerOn(cfg.HealthzListener, g)
	}
	runner.Hook(lc, sd, logger, "healthz", s.Run)
	return s
}

// Run parses kubelet-style args (without the program name), builds a
// kubelet-like agent (New) with opts and runs it until SIGINT or SIGTERM, or
// until one of its components fails. It returns the process exit code: 0
// after a clean stop; 1 when the configuration is invalid (reported in one
// line), the agent fails to start, or a component failed (the last line
// names it and its error); 2 for bad usage (an unknown or malformed flag:
// the error, then the flags' usage). It is the body of examples/nodeagent.
func Run(args []string, opts ...fx.Option) int {
	return RunWith(args, CRI, opts...)
}

// RunWith is Run with the given runtime module instead of CRI (see
// NewWith).
func RunWith(args []string, runtime fx.Option, opts ...fx.Option) int {
	return run(args, runtime, opts)
}
