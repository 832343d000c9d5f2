package fleet

import (
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
)

// TestNodeOptionsCheckTheGraphOnce checks that the first node's agent
// renders its graph for the value group check and the others do not.
func TestNodeOptionsCheckTheGraphOnce(t *testing.T) {
	opts := Options{Names: []string{"a", "b", "c"}}
	for i, wantGraph := range []bool{true, false, false} {
		var graph fx.DotGraph
		app := fx.New(append(nodeOptions(opts, i),
			fx.NopLogger,
			fx.Supply(logr.Discard()),
			fx.Invoke(func(g fx.DotGraph, _ logr.Logger) { graph = g }),
		)...)
		if err := app.Err(); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if got := graph != ""; got != wantGraph {
			t.Errorf("node %d (%s): graph rendered %v, want %v", i, opts.Names[i], got, wantGraph)
		}
	}
}

// TestMemoryLimitIsHeldMemoryPlusNodes: the limit is what the Go runtime
// holds (at most what it mapped) plus the nodes' share.
func TestMemoryLimitIsHeldMemoryPlusNodes(t *testing.T) {
	base := memoryLimit(0, 0)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if base <= 0 || uint64(base) > ms.Sys {
		t.Errorf("memory held %d, want more than 0 and at most the %d the runtime mapped", base, ms.Sys)
	}
	got := memoryLimit(1000, 1<<20)
	if d := got - base - 1000<<20; d < -16<<20 || d > 16<<20 {
		t.Errorf("limit for 1000 nodes of 1 MiB: %d, want %d + 1000 MiB (±16 MiB)", got, base)
	}
}
