package fleet_test

import (
	"context"
	"runtime/debug"
	"testing"

	"github.com/nodekit/nodekit/agent/fleet"
)

func TestStartRefusesIncompleteOptions(t *testing.T) {
	kubeconfig := func(int) string { return "/nonexistent" }
	for name, o := range map[string]fleet.Options{
		"no names":         {Dir: t.TempDir(), Kubeconfig: kubeconfig},
		"no directory":     {Names: []string{"a"}, Kubeconfig: kubeconfig},
		"no credentials":   {Names: []string{"a"}, Dir: t.TempDir()},
		"both credentials": {Names: []string{"a"}, Dir: t.TempDir(), Kubeconfig: kubeconfig, BootstrapKubeconfig: "/b"},
	} {
		if f, err := fleet.Start(context.Background(), o); err == nil {
			f.Stop() //nolint:errcheck // the test fails anyway
			t.Errorf("%s: Start succeeded", name)
		}
	}
}

// TestStartSetsTheMemoryLimit: MemoryPerNode sets the process's Go memory
// limit before the agents start (here they fail: no kubeconfig), and
// Fleet.MemoryLimit is not reported for a failed start.
func TestStartSetsTheMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	const perNode = 64 << 20
	_, err := fleet.Start(context.Background(), fleet.Options{
		Names: []string{"a", "b"}, Dir: t.TempDir(), Kubeconfig: func(int) string { return "/nonexistent" },
		MemoryPerNode: perNode,
	})
	if err == nil {
		t.Fatal("Start without a kubeconfig succeeded")
	}
	if got := debug.SetMemoryLimit(-1); got < 2*perNode || got > 2*perNode+1<<30 {
		t.Errorf("memory limit after Start: %d, want 2 × %d plus what the runtime held", got, perNode)
	}
}
