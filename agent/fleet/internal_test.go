package fleet

import (
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
