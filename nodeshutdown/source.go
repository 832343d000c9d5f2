package nodeshutdown

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"k8s.io/klog/v2"
)

// Source tells the Manager that the node shuts down. An embedder replaces
// the agent's sources (a cloud's preemption notice, a BMC, a file) with its
// own.
type Source interface {
	// Watch watches for node shutdowns until ctx is done or the source
	// fails, and calls handle for each: handle(ctx, true) when the node
	// shuts down — it returns once the pods are stopped (or their grace is
	// up), and only then may the source let the shutdown proceed —
	// handle(ctx, false) when a shutdown was cancelled. handle must be
	// called with a ctx derived from Watch's. Watch blocks; it returns nil
	// when ctx is done and an error saying what failed otherwise (the
	// Manager then watches again after a while).
	Watch(ctx context.Context, handle func(ctx context.Context, shuttingDown bool)) error
}

// SignalSource signals a node shutdown when the process receives one of its
// signals: what an init system, a container runtime or an operator sends
// where no systemd-logind runs. A shutdown it signals is never cancelled.
type SignalSource struct {
	signals []os.Signal
}

// NewSignalSource returns a SignalSource for sigs (DefaultSignal when
// none). It does nothing until Watch.
func NewSignalSource(sigs ...os.Signal) *SignalSource {
	if len(sigs) == 0 {
		sigs = []os.Signal{DefaultSignal}
	}
	return &SignalSource{signals: sigs}
}

// Watch catches the signals (they no longer end the process) until ctx is
// done, and calls handle(ctx, true) for each one received. It returns nil
// when ctx is done.
func (s *SignalSource) Watch(ctx context.Context, handle func(context.Context, bool)) error {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, s.signals...)
	defer signal.Stop(ch)
	klog.FromContext(ctx).Info("Watching for node shutdown signals", "signals", s.String())
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig := <-ch:
			klog.FromContext(ctx).Info("Node shutdown signalled", "signal", sig.String())
			handle(ctx, true)
		}
	}
}

// String names the source and its signals.
func (s *SignalSource) String() string {
	names := make([]string, len(s.signals))
	for i, sig := range s.signals {
		names[i] = sig.String()
	}
	return fmt.Sprintf("signal(%s)", strings.Join(names, ","))
}
