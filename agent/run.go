package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

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
	go releaseStartupMemory(logger, trimDone, startupSettle, memtrim.Release)
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

// startupSettle is how long after the agent started its startup memory is
// released (releaseStartupMemory): long enough for the first list of every
// informer, the node's registration and the first status and lease
// updates, which the agent does within a second of starting (start →
// Ready is 0.2-0.3 s in nodebench).
const startupSettle = 5 * time.Second

// releaseStartupMemoryEnv, set to false (strconv.ParseBool), keeps the
// agent from releasing its startup memory.
const releaseStartupMemoryEnv = "NODEKIT_RELEASE_STARTUP_MEMORY"

// releaseStartupMemory gives back what the agent touched only to start
// (release: memtrim.Release) settle after it is called, unless done closes
// first or NODEKIT_RELEASE_STARTUP_MEMORY=false is in the environment. RSS
// falls by a third to a half (docs/performance.md); the cost is one
// collection and the page faults that map back the executable's pages
// still in use, each reading its page from the file the first time.
func releaseStartupMemory(logger klog.Logger, done <-chan struct{}, settle time.Duration, release func() (memtrim.Result, error)) {
	if v, ok := os.LookupEnv(releaseStartupMemoryEnv); ok {
		release, err := strconv.ParseBool(v)
		switch {
		case err != nil:
			logger.Error(err, "Ignoring an invalid setting, releasing the startup memory as by default", "env", releaseStartupMemoryEnv, "value", v)
		case !release:
			logger.V(2).Info("Not releasing the memory used only at startup", "env", releaseStartupMemoryEnv)
			return
		}
	}
	select {
	case <-done:
		return
	case <-time.After(settle):
	}
	res, err := release()
	if err != nil {
		logger.Error(err, "Cannot release the memory used only at startup")
		return
	}
	logger.V(2).Info("Released the memory used only at startup", "executableMappings", res.Mappings, "executableBytes", res.Bytes)
}
