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
	go releaseMemory(logger, trimDone, memtrimSchedule, memtrim.Usage, memtrim.Release)
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

// trimSchedule says when releaseMemory releases.
type trimSchedule struct {
	// settle is how long after the agent started its startup memory is
	// released: long enough for the first list of every informer, the
	// node's registration and the first status and lease updates, which
	// the agent does within a second of starting (start → Ready is
	// 0.2-0.3 s in nodebench).
	settle time.Duration
	// check is how often, after that, the process's RSS and CPU time are
	// read.
	check time.Duration
	// growth is how much the RSS must have grown since the last release
	// for another one.
	growth uint64
	// quiet is the most CPU time the process may have used over the last
	// check for it to count as quiet: the burst that grew it is over.
	quiet time.Duration
}

// memtrimSchedule is the agent's: the startup release 5 s after the start,
// then a release once the RSS grew by 8 MiB and the agent used at most 1 %
// of a core over 5 s. A burst of pod starts maps the start paths of the
// executable back in (its text, the pc-value tables every GC's stack scan
// reads for the pod workers' stacks) and grows the heap past its goal;
// once the pods run, the agent's steady work touches a fraction of that
// (docs/performance.md). The checks cost a read of /proc/self/statm and a
// getrusage every 5 s.
var memtrimSchedule = trimSchedule{settle: 5 * time.Second, check: 5 * time.Second, growth: 8 << 20, quiet: 50 * time.Millisecond}

// releaseStartupMemoryEnv, set to false (strconv.ParseBool), keeps the
// agent from releasing memory (releaseMemory).
const releaseStartupMemoryEnv = "NODEKIT_RELEASE_STARTUP_MEMORY"

// releaseMemory gives back what the agent touched only to start, and
// later what a burst of work touched only while it lasted (release:
// memtrim.Release), until done closes: once s.settle after it is called,
// then whenever a check finds the RSS (usage: memtrim.Usage) grown by
// s.growth since the last release and the process quiet over the last
// s.check. NODEKIT_RELEASE_STARTUP_MEMORY=false in the environment turns
// both off. RSS falls by a quarter to a third (docs/performance.md); the
// cost of each release is one collection and the minor faults that map
// back the executable's pages still in use. If usage fails, only the
// startup release happens.
func releaseMemory(logger klog.Logger, done <-chan struct{}, s trimSchedule, usage func() (uint64, time.Duration, error), release func() (memtrim.Result, error)) {
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
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-done:
			return false
		case <-t.C:
			return true
		}
	}
	if !wait(s.settle) {
		return
	}
	res, err := release()
	if err != nil {
		logger.Error(err, "Cannot release the memory used only at startup")
		return
	}
	logger.V(2).Info("Released the memory used only at startup", "executableMappings", res.Mappings, "executableBytes", res.Bytes)
	base, lastCPU, err := usage()
	if err != nil {
		logger.V(2).Info("Not releasing memory after bursts of work", "err", err)
		return
	}
	for wait(s.check) {
		rss, cpu, err := usage()
		if err != nil {
			logger.V(2).Info("Not releasing memory after bursts of work any more", "err", err)
			return
		}
		busy := cpu - lastCPU
		lastCPU = cpu
		if rss < base+s.growth || busy > s.quiet {
			continue
		}
		if _, err := release(); err != nil {
			logger.Error(err, "Cannot release the memory of a burst of work")
			return
		}
		after, cpu, err := usage()
		if err != nil {
			logger.V(2).Info("Not releasing memory after bursts of work any more", "err", err)
			return
		}
		logger.V(4).Info("Released the memory of a burst of work", "rssBefore", rss, "rssAfter", after)
		base, lastCPU = after, cpu
	}
}
