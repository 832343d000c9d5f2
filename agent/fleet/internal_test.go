package fleet

import (
	"context"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/mount-utils"

	"github.com/nodekit/nodekit/internal/memtrim"
	"github.com/nodekit/nodekit/internal/testenv"
	nkruntime "github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/volume"
)

// TestNodeOptionsCheckTheGraphOnce checks that the first node's agent
// renders its graph for the value group check and the others do not.
func TestNodeOptionsCheckTheGraphOnce(t *testing.T) {
	opts := Options{Names: []string{"a", "b", "c"}}
	for i, wantGraph := range []bool{true, false, false} {
		var graph fx.DotGraph
		app := fx.New(append(nodeOptions(opts, i, nil, nil),
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

// TestGoMemoryLimitLeavesTheExecutable: a budget smaller than the
// executable's read-only mappings is refused, not turned into a limit of
// nothing.
func TestGoMemoryLimitLeavesTheExecutable(t *testing.T) {
	exe, err := memtrim.ExecutableSize()
	if err != nil {
		testenv.Unavailable(t, "no executable size: %v", err)
	}
	if got, err := goMemoryLimit(int64(exe) + 1<<20); err != nil || got != 1<<20 {
		t.Errorf("goMemoryLimit(executable + 1 MiB) = %d, %v, want 1 MiB", got, err)
	}
	if got, err := goMemoryLimit(int64(exe)); err == nil {
		t.Errorf("goMemoryLimit(the executable's size) = %d, want an error", got)
	}
}

// TestNodeOptionsCallTheFakeRuntimeInProcess: given its fake runtime, a
// node's agent gets the runtime's in-process services in its
// runtime.Options, and a Client built from them reaches that runtime;
// without one (SocketCRI) the options are left to dial the endpoint.
func TestNodeOptionsCallTheFakeRuntimeInProcess(t *testing.T) {
	opts := Options{Names: []string{"a"}}
	cri := fakecri.New(fakecri.Options{RuntimeName: "fleet-fake"})
	for _, tc := range []struct {
		cri       *fakecri.Server
		inProcess bool
	}{{cri, true}, {nil, false}} {
		var got nkruntime.Options
		app := fx.New(append(nodeOptions(opts, 0, tc.cri, nil),
			fx.NopLogger,
			fx.Supply(logr.Discard(), nkruntime.Options{Endpoint: inProcessEndpoint + "a"}),
			fx.Invoke(func(o nkruntime.Options, _ logr.Logger) { got = o }),
		)...)
		if err := app.Err(); err != nil {
			t.Fatal(err)
		}
		if (got.RuntimeService != nil) != tc.inProcess || (got.ImageService != nil) != tc.inProcess {
			t.Fatalf("in-process services set: %v, %v; want %v", got.RuntimeService != nil, got.ImageService != nil, tc.inProcess)
		}
		if !tc.inProcess {
			continue
		}
		c, err := nkruntime.New(got)
		if err != nil {
			t.Fatal(err)
		}
		name, _, err := c.Version(context.Background())
		if err != nil || name != "fleet-fake" {
			t.Errorf("Version through the in-process client: %q, %v; want fleet-fake", name, err)
		}
		if n := cri.Calls("Version"); n != 1 {
			t.Errorf("the fake runtime saw %d Version calls, want 1", n)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestNodeOptionsShareTheMounter: every node's volume manager gets the
// fleet's one mounter, unless something set its own.
func TestNodeOptionsShareTheMounter(t *testing.T) {
	opts := Options{Names: []string{"a"}}
	shared, own := mount.NewFakeMounter(nil), mount.NewFakeMounter(nil)
	for _, tc := range []struct {
		given, want mount.Interface
	}{{nil, shared}, {own, own}} {
		var got volume.Options
		app := fx.New(append(nodeOptions(opts, 0, nil, shared),
			fx.NopLogger,
			fx.Supply(logr.Discard(), volume.Options{Mounter: tc.given}),
			fx.Invoke(func(o volume.Options, _ logr.Logger) { got = o }),
		)...)
		if err := app.Err(); err != nil {
			t.Fatal(err)
		}
		if got.Mounter != tc.want {
			t.Errorf("volume manager's mounter %p given %p, want %p", got.Mounter, tc.given, tc.want)
		}
	}
}
