package runner

import (
	"context"
	"errors"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func TestHookStartsAndStops(t *testing.T) {
	started := make(chan struct{})
	stopped := make(chan struct{})
	app := fxtest.New(t, fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner) {
		Hook(lc, sd, logr.Discard(), "test", func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			close(stopped)
			return ctx.Err()
		})
	}))
	app.RequireStart()
	<-started
	select {
	case <-stopped:
		t.Fatal("run returned before the app stopped")
	default:
	}
	app.RequireStop()
	select {
	case <-stopped:
	default:
		t.Fatal("OnStop returned before run did")
	}
}

func TestHookShutsDownOnError(t *testing.T) {
	app := fxtest.New(t, fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner) {
		Hook(lc, sd, logr.Discard(), "test", func(context.Context) error {
			return errors.New("boom")
		})
	}))
	app.RequireStart()
	select {
	case sig := <-app.Wait():
		if sig.ExitCode != 1 {
			t.Fatalf("exit code = %d, want 1", sig.ExitCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("application was not shut down after run failed")
	}
	app.RequireStop()
}

func TestHookRecordsFailure(t *testing.T) {
	var failures *Failures
	app := fxtest.New(t,
		fx.Decorate(func(sd fx.Shutdowner) fx.Shutdowner {
			failures = NewFailures(sd)
			return failures
		}),
		fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner) {
			Hook(lc, sd, logr.Discard(), "fine", func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			})
			Hook(lc, sd, logr.Discard(), "broken", func(context.Context) error {
				return errors.New("no socket")
			})
		}))
	app.RequireStart()
	select {
	case sig := <-app.Wait():
		if sig.ExitCode != 1 {
			t.Fatalf("exit code = %d, want 1", sig.ExitCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("application was not shut down after run failed")
	}
	app.RequireStop()
	if failures == nil {
		t.Fatal("fx.Shutdowner was not decorated")
	}
	if c, err := failures.First(); c != "broken" || err == nil || err.Error() != "no socket" {
		t.Errorf("First() = %q, %v; want broken, no socket", c, err)
	}
}

func TestFailuresEmptyAfterCleanStop(t *testing.T) {
	f := NewFailures(nil)
	if c, err := f.First(); c != "" || err != nil {
		t.Errorf("First() = %q, %v; want nothing", c, err)
	}
}

// TestHookStopsOnPanic: a component that panics stops the application
// with exit code 1 and is named with the panic in Failures, instead of
// killing the process without a word about which component it was.
func TestHookStopsOnPanic(t *testing.T) {
	var failures *Failures
	app := fxtest.New(t,
		fx.Decorate(func(sd fx.Shutdowner) fx.Shutdowner {
			failures = NewFailures(sd)
			return failures
		}),
		fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner) {
			Hook(lc, sd, logr.Discard(), "panicky", func(context.Context) error {
				var m map[string]int
				m["x"] = 1 // a nil map write
				return nil
			})
		}))
	app.RequireStart()
	select {
	case sig := <-app.Wait():
		if sig.ExitCode != 1 {
			t.Fatalf("exit code = %d, want 1", sig.ExitCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("application was not shut down after run panicked")
	}
	app.RequireStop()
	if c, err := failures.First(); c != "panicky" || err == nil || !strings.Contains(err.Error(), "assignment to entry in nil map") {
		t.Errorf("First() = %q, %v; want panicky and the panic", c, err)
	}
}

// TestHookQuietOnlyAboutTheStop: once a component stops, its error lines
// about cancelled calls are dropped; other errors, and cancellations
// before the stop, are logged.
func TestHookQuietOnlyAboutTheStop(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	logged, stopped := make(chan struct{}), make(chan struct{})
	lc := fxtest.NewLifecycle(t)
	Hook(lc, nil, logger, "c", func(ctx context.Context) error {
		log := logr.FromContextOrDiscard(ctx)
		log.Error(context.Canceled, "before the stop")
		close(logged)
		<-ctx.Done()
		log.Error(status.Error(codes.Canceled, "context canceled"), "cancelled by the stop")
		log.WithValues("k", "v").Error(errors.New("disk full"), "a real error while stopping")
		close(stopped)
		return nil
	})
	lc.RequireStart()
	<-logged
	lc.RequireStop()
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(lines, "\n")
	if !strings.Contains(got, "before the stop") || !strings.Contains(got, "a real error while stopping") || strings.Contains(got, "cancelled by the stop") {
		t.Errorf("log lines:\n%s\nwant the error before the stop and the real one, not the cancellation", got)
	}
}

// component is what Start builds in TestStart: its Run marks it running
// until its context ends.
type component struct{ running, stopped chan struct{} }

func (c *component) Run(ctx context.Context) error {
	close(c.running)
	<-ctx.Done()
	close(c.stopped)
	return nil
}

// TestStart: a module's provide-and-run builds the component from its
// options and runs it from start to stop; a constructor's error is
// returned and nothing is hooked.
func TestStart(t *testing.T) {
	newComponent := func(fail bool) (*component, error) {
		if fail {
			return nil, errors.New("bad options")
		}
		return &component{running: make(chan struct{}), stopped: make(chan struct{})}, nil
	}
	var c *component
	app := fxtest.New(t, fx.Invoke(func(d Deps) error {
		var err error
		c, err = Start(d, "component", newComponent, false)
		return err
	}))
	app.RequireStart()
	<-c.running
	app.RequireStop()
	select {
	case <-c.stopped:
	default:
		t.Error("the component still runs after the app stopped")
	}

	err := fx.New(fx.NopLogger, fx.Invoke(func(d Deps) error {
		_, err := Start(d, "component", newComponent, true)
		return err
	})).Err()
	if err == nil || !strings.Contains(err.Error(), "bad options") {
		t.Errorf("Start with a failing constructor: %v, want its error", err)
	}
}
