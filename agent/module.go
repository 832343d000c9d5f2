package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/lease"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/status"
)

// Module is a complete node agent: it wires every default nodekit module
// from the *Config in the graph. The graph gets, for the modules and for an
// embedder's own pieces:
//
//   - *Config, as supplied;
//   - *Clients and kubernetes.Interface (the node's rate-limited client; the
//     lease and status modules get the heartbeat client instead);
//   - prometheus.Registerer and prometheus.Gatherer (one registry, served on
//     /metrics), clock.Clock (real), logr.Logger (klog's), and
//     record.EventRecorder (events as component "kubelet");
//   - the Options of lease, status and runtime, derived from the Config;
//   - the runtime's funcs the status setters take (RuntimeVersionFunc,
//     RuntimeHealthFunc, ListImagesFunc, RuntimeHandlersFunc, RuntimeFeaturesFunc).
//
// Replace any of them with fx.Decorate (e.g. a fake clock, a different
// status.Options) or add node status setters to the status.SetterGroup
// value group; see examples/customstatus.
var Module = fx.Module("agent",
	fx.Provide(
		NewClients,
		func(c *Clients) kubernetes.Interface { return c.Client },
		newRegistry,
		func() clock.Clock { return clock.RealClock{} },
		func() logr.Logger { return klog.Background() },
		provideRecorder,
		leaseOptions,
		statusOptions,
		setterOptions,
		runtimeOptions,
		runtimeFuncs,
		provideHealthServer,
		ensureDataDirs,
	),
	fx.Module("heartbeat",
		// Lease and node status use the heartbeat client, as the kubelet's.
		fx.Decorate(func(c *Clients) kubernetes.Interface { return c.Heartbeat }),
		lease.Module,
		status.Module,
	),
	runtime.Module,
	podModule,
	// The health server is nil when healthzPort is 0.
	fx.Invoke(func(*HealthServer) {}),
)

// New returns an fx application that runs a node agent for cfg: Module,
// cfg, fx's events logged through klog at verbosity 4, and opts (an
// embedder's additions and replacements, applied last). cfg must be
// Complete. Call Run (blocks until SIGINT/SIGTERM) or Start/Stop.
func New(cfg *Config, opts ...fx.Option) *fx.App {
	return fx.New(append([]fx.Option{
		fx.Supply(cfg),
		fx.WithLogger(func(l logr.Logger) fxevent.Logger {
			return &fxevent.SlogLogger{Logger: slog.New(logr.ToSlogHandler(l.V(4).WithName("fx")))}
		}),
		Module,
	}, opts...)...)
}

func newRegistry() (prometheus.Registerer, prometheus.Gatherer) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, reg
}

func provideRecorder(lc fx.Lifecycle, cfg *Config, c *Clients) record.EventRecorder {
	events := c.Events
	if events == nil {
		events = c.Client
	}
	rec, stop := newRecorder(cfg, events, scheme.Scheme)
	lc.Append(fx.StopHook(stop))
	return rec
}

func leaseOptions(cfg *Config, c *Clients) lease.Options {
	return lease.Options{
		NodeName:             cfg.NodeName,
		LeaseDurationSeconds: cfg.Kubelet.NodeLeaseDurationSeconds,
		OnRepeatedFailure:    c.CloseConnections,
	}
}

func statusOptions(cfg *Config, c *Clients) status.Options {
	kc := &cfg.Kubelet
	var taints []v1.Taint
	if kc.RegisterNode != nil && *kc.RegisterNode {
		taints = kc.RegisterWithTaints
	}
	return status.Options{
		NodeName:          cfg.NodeName,
		Hostname:          cfg.Hostname,
		Labels:            cfg.NodeLabels,
		Taints:            taints,
		UpdateFrequency:   kc.NodeStatusUpdateFrequency.Duration,
		ReportFrequency:   kc.NodeStatusReportFrequency.Duration,
		OnRepeatedFailure: c.CloseConnections,
		// The node watch must not inherit the heartbeat client's timeout.
		WatchClient: c.Client,
	}
}

// dataDirs stands for the agent's directories existing: the provider of a
// value that needs them takes a dataDirs, so its start hook runs after they
// are made.
type dataDirs struct{}

// ensureDataDirs makes the agent's directories on start, as the kubelet
// does: its root directory (whose filesystem is the node's
// ephemeral-storage), the pods directory under it and the pod logs directory.
func ensureDataDirs(lc fx.Lifecycle, cfg *Config) dataDirs {
	lc.Append(fx.StartHook(func() error {
		for _, d := range []struct {
			path string
			mode os.FileMode
		}{{cfg.RootDir, 0o750}, {filepath.Join(cfg.RootDir, "pods"), 0o750}, {cfg.Kubelet.PodLogsDir, 0o755}} {
			if err := os.MkdirAll(d.path, d.mode); err != nil {
				return fmt.Errorf("create the agent's directory: %w", err)
			}
		}
		return nil
	}))
	return dataDirs{}
}

func setterOptions(cfg *Config, _ dataDirs) (status.SetterOptions, error) {
	kc := &cfg.Kubelet
	kubeReserved, err := parseResourceList(kc.KubeReserved)
	if err != nil {
		return status.SetterOptions{}, fmt.Errorf("kubeReserved: %w", err)
	}
	systemReserved, err := parseResourceList(kc.SystemReserved)
	if err != nil {
		return status.SetterOptions{}, fmt.Errorf("systemReserved: %w", err)
	}
	return status.SetterOptions{
		Hostname:                        cfg.Hostname,
		NodeIPs:                         cfg.NodeIPs,
		MaxPods:                         kc.MaxPods,
		PodsPerCore:                     kc.PodsPerCore,
		KubeReserved:                    kubeReserved,
		SystemReserved:                  systemReserved,
		EvictionHard:                    kc.EvictionHard,
		NoLocalStorageCapacityIsolation: kc.LocalStorageCapacityIsolation != nil && !*kc.LocalStorageCapacityIsolation,
		NodeStatusMaxImages:             kc.NodeStatusMaxImages,
		KubeletPort:                     kc.Port,
		Roots:                           status.MachineRoots{RootDir: cfg.RootDir},
	}, nil
}

func parseResourceList(m map[string]string) (v1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(v1.ResourceList, len(m))
	for name, value := range m {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", name, value, err)
		}
		out[v1.ResourceName(name)] = q
	}
	return out, nil
}

func runtimeOptions(cfg *Config) runtime.Options {
	return runtime.Options{
		Endpoint:          cfg.Kubelet.ContainerRuntimeEndpoint,
		ImageEndpoint:     cfg.Kubelet.ImageServiceEndpoint,
		ConnectionTimeout: cfg.Kubelet.RuntimeRequestTimeout.Duration,
	}
}

// RuntimeFuncs are the container runtime's answers the node status setters
// take, adapted from a *runtime.Client.
type RuntimeFuncs struct {
	fx.Out

	Version  status.RuntimeVersionFunc
	Health   status.RuntimeHealthFunc
	Images   status.ListImagesFunc
	Handlers status.RuntimeHandlersFunc
	Features status.RuntimeFeaturesFunc
}

// healthTTL is how long one CRI Status answer serves the node status
// setters: the Ready and runtime handler setters of one cycle share it.
const healthTTL = time.Second

func runtimeFuncs(c *runtime.Client, clk clock.Clock) RuntimeFuncs {
	var (
		mu     sync.Mutex
		last   runtime.Health
		lastAt time.Time
	)
	health := func(ctx context.Context) runtime.Health {
		mu.Lock()
		defer mu.Unlock()
		if now := clk.Now(); lastAt.IsZero() || now.Sub(lastAt) >= healthTTL {
			last, lastAt = c.Health(ctx), now
		}
		return last
	}
	return RuntimeFuncs{
		Version: c.Version,
		Health: func(ctx context.Context) (error, error) {
			h := health(ctx)
			return h.RuntimeErr, h.NetworkErr
		},
		Images: func(ctx context.Context) ([]*runtimeapi.Image, error) {
			return c.ImageService().ListImages(ctx, nil)
		},
		Handlers: func(ctx context.Context) ([]*runtimeapi.RuntimeHandler, error) {
			h := health(ctx)
			return h.Handlers, h.RuntimeErr
		},
		Features: func(ctx context.Context) (*runtimeapi.RuntimeFeatures, error) {
			h := health(ctx)
			return h.Features, h.RuntimeErr
		},
	}
}

func provideHealthServer(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, cfg *Config, g prometheus.Gatherer) *HealthServer {
	if *cfg.Kubelet.HealthzPort == 0 {
		return nil
	}
	s := NewHealthServer(healthzAddress(cfg), g)
	runner.Hook(lc, sd, logger, "healthz", s.Run)
	return s
}

// Run parses kubelet-style args (without the program name), builds the agent
// with opts and runs it until SIGINT or SIGTERM, or until one of its
// components fails. It returns the process exit code: 0 after a clean stop;
// 1 when the configuration is invalid (reported in one line), the agent
// fails to start, or a component failed (the last line names it and its
// error); 2 for bad usage (an unknown or malformed flag: the error, then the
// flags' usage). It is the body of examples/nodeagent.
func Run(args []string, opts ...fx.Option) int {
	logger := klog.Background()
	cfg, err := ParseFlags(logger, args)
	var usage *UsageError
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "nodeagent: %v\n\nFlags:\n%s", err, FlagUsage())
		return 2
	case err != nil:
		logger.Error(err, "Invalid configuration")
		return 1
	}
	logger.Info("Starting nodekit agent", "version", nodekit.Version, "node", cfg.NodeName,
		"runtimeEndpoint", cfg.Kubelet.ContainerRuntimeEndpoint)
	// Components shut the agent down through fx.Shutdowner when they fail
	// (runner.Hook); failures records which one and why.
	var failures *runner.Failures
	recordFailures := fx.Decorate(func(sd fx.Shutdowner) fx.Shutdowner {
		failures = runner.NewFailures(sd)
		return failures
	})
	app := New(cfg, append([]fx.Option{recordFailures}, opts...)...)
	if err := app.Err(); err != nil {
		logger.Error(err, "Cannot build the agent")
		return 1
	}
	startCtx, cancel := context.WithTimeout(context.Background(), app.StartTimeout())
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		logger.Error(err, "Cannot start the agent")
		return 1
	}
	sig := <-app.Wait()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), app.StopTimeout())
	defer cancelStop()
	stopErr := app.Stop(stopCtx)
	if failures != nil {
		if component, err := failures.First(); err != nil {
			kv := []any{"component", component, "exitCode", 1}
			if stopErr != nil {
				kv = append(kv, "stopErr", stopErr)
			}
			logger.Error(err, "Agent stopped because a component failed", kv...)
			return 1
		}
	}
	if stopErr != nil {
		logger.Error(stopErr, "Agent did not stop cleanly")
		return 1
	}
	logger.Info("Agent stopped", "signal", sig.Signal, "exitCode", sig.ExitCode)
	return sig.ExitCode
}
