package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"go.uber.org/fx"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/certificate"
	"github.com/nodekit/nodekit/internal/memtrim"
	"github.com/nodekit/nodekit/internal/runner"
)

// run is RunWith's body: parse, build, start, wait, stop, and say why the
// agent stopped.
func run(args []string, runtime fx.Option, opts []fx.Option) int {
	logger := klog.Background()
	cfg, err := ParseFlags(logger, args)
	var usage *UsageError
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.Is(err, ErrVersion):
		fmt.Println(VersionLine())
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "nodeagent: %v\n\nFlags:\n%s", err, FlagUsage())
		return 2
	case err != nil:
		logger.Error(err, "Invalid configuration")
		return 1
	}
	logger = logger.WithValues("node", cfg.NodeName)
	logger.Info("Starting nodekit agent", "version", nodekit.Version, "runtimeEndpoint", cfg.Kubelet.ContainerRuntimeEndpoint)
	if cfg.BootstrapKubeconfigPath != "" {
		// The kubeconfig must hold a valid client certificate before the
		// agent builds its clients, as the kubelet's LoadClientCert.
		ctx, stop := signal.NotifyContext(klog.NewContext(context.Background(), logger), syscall.SIGINT, syscall.SIGTERM)
		err := certificate.Bootstrap(ctx, cfg.BootstrapOptions())
		stop()
		if err != nil {
			logger.Error(err, "TLS bootstrap failed")
			return 1
		}
	}
	// Components shut the agent down through fx.Shutdowner when they fail
	// (runner.Hook); failures records which one and why.
	var failures *runner.Failures
	recordFailures := fx.Decorate(func(sd fx.Shutdowner) fx.Shutdowner {
		failures = runner.NewFailures(sd)
		return failures
	})
	app := NewWith(cfg, runtime, append([]fx.Option{recordFailures}, opts...)...)
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
	trimDone := make(chan struct{})
	go memtrim.AfterStart(logger, trimDone)
	sig := <-app.Wait()
	close(trimDone)
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
