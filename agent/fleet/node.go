package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/fx"
)

// node is one built agent of the fleet: the start and stop hooks its
// modules appended to fx.Lifecycle, which the fleet runs as fx.App runs
// them, in place of the agent's *fx.App. An fx application keeps its dig
// container (every constructor, parameter list and value of the graph,
// about a quarter of an idle agent's heap) for its lifetime, although
// nothing reads it once the graph is built; the fleet keeps the hooks and
// lets the rest go. The node is the agent's fx.Lifecycle and fx.Shutdowner
// (options): the application's own would keep it alive, through every
// component that holds them.
//
// What the application did beyond its hooks the fleet does not need: fx's
// lifecycle events go to the agent's fx logger only at --v=4 (the fleet's
// agents log at the process's verbosity), and nobody waits for an
// application of the fleet to be shut down.
type node struct {
	name string
	log  io.Writer
	// startTimeout and stopTimeout are the application's.
	startTimeout, stopTimeout time.Duration

	// run is held while the node starts or stops.
	run sync.Mutex
	// stopped is closed once stop has run; stopErr is its result.
	stopped chan struct{}
	stopErr error

	mu      sync.Mutex // guards hooks and started
	hooks   []fx.Hook
	started int // hooks whose OnStart succeeded (or had none), in order
}

func newNode(name string, log io.Writer) *node {
	return &node{name: name, log: log, stopped: make(chan struct{})}
}

// options make n the agent's fx.Lifecycle and fx.Shutdowner.
func (n *node) options() fx.Option {
	return fx.Decorate(
		func(fx.Lifecycle) fx.Lifecycle { return n },
		func(fx.Shutdowner) fx.Shutdowner { return n },
	)
}

// Append adds a hook, as fx.Lifecycle's: the agent's modules append theirs
// while it is built. A hook appended while the node starts is not
// started, as with fx.
func (n *node) Append(h fx.Hook) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hooks = append(n.hooks, h)
}

// start runs the OnStart hooks in the order they were appended, as
// fx.App.Start: at the first that fails, or once ctx is done, it stops the
// hooks already started (in reverse order, with ctx) and returns the
// errors.
func (n *node) start(ctx context.Context) error {
	n.run.Lock()
	defer n.run.Unlock()
	n.mu.Lock()
	hooks := n.hooks
	n.mu.Unlock()
	for _, h := range hooks {
		err := ctx.Err()
		if err == nil && h.OnStart != nil {
			err = h.OnStart(ctx)
		}
		if err != nil {
			return errors.Join(err, n.stopStarted(ctx))
		}
		n.mu.Lock()
		n.started++
		n.mu.Unlock()
	}
	return nil
}

// stop runs the OnStop hooks of the started ones in reverse order, as
// fx.App.Stop: each gets ctx, an error does not keep the others from
// running, and ctx done leaves the rest unstopped. It waits for a start
// under way, runs once and returns the first run's errors to every caller.
func (n *node) stop(ctx context.Context) error {
	n.run.Lock()
	defer n.run.Unlock()
	select {
	case <-n.stopped:
	default:
		n.stopErr = n.stopStarted(ctx)
		close(n.stopped)
	}
	return n.stopErr
}

func (n *node) stopStarted(ctx context.Context) error {
	var errs []error
	for {
		n.mu.Lock()
		if n.started == 0 {
			n.mu.Unlock()
			return errors.Join(errs...)
		}
		n.started--
		h := n.hooks[n.started]
		n.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if h.OnStop != nil {
			if err := h.OnStop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
}

// Shutdown is fx.Shutdowner's: a component of the agent failed (it logged
// its error) and asks the application to stop. A kubelet's process would
// exit; the node stops in the background (its Lease is then no longer
// renewed and the node controller marks it NotReady, as a kubelet that
// died), once any start under way has finished. Fleet.Stop reports how
// its stop went. The options (an exit code) have no process to apply to.
func (n *node) Shutdown(...fx.ShutdownOption) error {
	fmt.Fprintf(n.log, "fleet: node %s: a component failed (see its log), stopping the node\n", n.name)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.stopTimeout)
		defer cancel()
		_ = n.stop(ctx) // Fleet.Stop returns the result
	}()
	return nil
}
