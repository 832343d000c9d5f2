package agent

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/nodeshutdown"
)

// The shutdown signal is opt-in: without --node-shutdown-signal the agent
// catches no signal (on a machine without logind it then has no source at
// all); with it, a SignalSource for SIGPWR is among the sources.
func TestNodeShutdownSignalIsOptIn(t *testing.T) {
	cfg, err := ParseFlags(klog.Background(), []string{"--hostname-override=node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeShutdownSignal {
		t.Fatal("NodeShutdownSignal is on by default")
	}
	cfg, err = ParseFlags(klog.Background(), []string{"--hostname-override=node-a", "--node-shutdown-signal"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.NodeShutdownSignal {
		t.Fatal("--node-shutdown-signal did not set NodeShutdownSignal")
	}

	periods, err := nodeshutdown.GracePeriods(10*time.Second, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeShutdownSources(logr.Discard(), false, false, periods); len(got) != 0 {
		t.Errorf("sources without logind and without the signal = %v, want none", got)
	}
	got := nodeShutdownSources(logr.Discard(), false, true, periods)
	if len(got) != 1 {
		t.Fatalf("sources with the signal = %v, want one", got)
	}
	if s, ok := got[0].(*nodeshutdown.SignalSource); !ok || s.String() != nodeshutdown.NewSignalSource(nodeshutdown.DefaultSignal).String() {
		t.Errorf("source with the signal = %v, want a SignalSource for %v", got[0], nodeshutdown.DefaultSignal)
	}
}
