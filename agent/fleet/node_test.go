package fleet

import (
	"context"
	"errors"
	"io"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"weak"

	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/mount-utils"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// events records the hooks' calls in order.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, s)
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// buildNode builds an application whose invokes append a hook per name
// (failing OnStart for failStart) and returns its node.
func buildNode(t *testing.T, ev *events, failStart string, names ...string) *node {
	t.Helper()
	n := newNode("n", io.Discard)
	n.stopTimeout = time.Minute
	opts := []fx.Option{fx.NopLogger, n.options()}
	for _, name := range names {
		opts = append(opts, fx.Invoke(func(lc fx.Lifecycle) {
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error {
					ev.add("start " + name)
					if name == failStart {
						return errors.New(name + " failed")
					}
					return nil
				},
				OnStop: func(context.Context) error { ev.add("stop " + name); return nil },
			})
		}))
	}
	if err := fx.New(opts...).Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNodeRunsTheHooksAsFx: the node starts the hooks the graph appended
// in order and stops them in reverse, once however often it is stopped; a
// start that fails stops what it started, as fx.App does.
func TestNodeRunsTheHooksAsFx(t *testing.T) {
	ctx := context.Background()
	ev := &events{}
	n := buildNode(t, ev, "", "a", "b", "c")
	if err := n.start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := n.stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if got := ev.list(); !reflect.DeepEqual(got, want) {
		t.Errorf("hooks ran %q, want %q", got, want)
	}

	ev = &events{}
	n = buildNode(t, ev, "b", "a", "b", "c")
	if err := n.start(ctx); err == nil || err.Error() != "b failed" {
		t.Errorf("start: %v, want b's error", err)
	}
	if err := n.stop(ctx); err != nil {
		t.Fatal(err)
	}
	want = []string{"start a", "start b", "stop a"}
	if got := ev.list(); !reflect.DeepEqual(got, want) {
		t.Errorf("hooks ran %q, want %q", got, want)
	}
}

// TestNodeStopsOnShutdown: a component's shutdown stops the node, as a
// kubelet's process exits.
func TestNodeStopsOnShutdown(t *testing.T) {
	ev := &events{}
	n := buildNode(t, ev, "", "a")
	if err := n.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(fx.ExitCode(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.stopped:
	case <-time.After(time.Minute):
		t.Fatal("the node did not stop on Shutdown")
	}
	if want := []string{"start a", "stop a"}; !reflect.DeepEqual(ev.list(), want) {
		t.Errorf("hooks ran %q, want %q", ev.list(), want)
	}
}

// TestNodeKeepsNoApplication: a fleet's agent, built and started as Start
// does (on a fake clientset here), turns Ready, and its *fx.App (with its
// dig container) is garbage once built: no component holds it through the
// lifecycle or the shutdowner. It stops cleanly.
func TestNodeKeepsNoApplication(t *testing.T) {
	const name = "keeps-no-app"
	client := fake.NewClientset()
	cri := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
	cfg := agenttest.Config(t, name, inProcessEndpoint+name, "--healthz-port=0")
	cfg.Kubelet.EnableServer = ptr.To(false)
	n := newNode(name, io.Discard)
	app := fx.New(append([]fx.Option{
		fx.Supply(cfg), agent.Core, agent.CRI, fx.NopLogger,
		fx.Replace(&agent.Clients{Client: client, Heartbeat: client}), n.options(),
	}, nodeOptions(Options{Names: []string{name}}, 0, cri, mount.NewFakeMounter(nil))...)...)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	n.startTimeout, n.stopTimeout = app.StartTimeout(), app.StopTimeout()
	built := weak.Make(app)
	app = nil
	ctx := agenttest.Context(t)
	if err := n.start(ctx); err != nil {
		t.Fatal(err)
	}
	node := &agenttest.Node{T: t, Name: name, Client: client}
	node.WaitReady(ctx)
	runtime.GC()
	if built.Value() != nil {
		t.Error("the agent's *fx.App is still reachable once built and started")
	}
	if err := n.stop(ctx); err != nil {
		t.Fatal(err)
	}
}
