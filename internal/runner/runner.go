// Package runner ties a module's long-running Run(ctx) method to an fx
// lifecycle. It is internal: embedders use the modules' own Run methods when
// they build without fx.
package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Hook appends an fx hook to lc that starts run in its own goroutine on
// OnStart and cancels it and waits for it to return on OnStop.
//
// run receives a context that carries logger (klog's when logger is the zero
// value, as an optional fx dependency is when nobody provides one) named
// after the component, so it logs with klog.FromContext. A run that returns an error other than
// context.Canceled before the application stops is logged and, when sd is
// not nil, shuts the application down with exit code 1: a component that
// cannot do its job must not leave a half-working agent behind. When sd is
// a *Failures, the component's name and error are recorded in it first, so
// the application can say why it stopped. Once the component is stopping,
// its logger drops error lines about cancelled calls (the stop itself). A run that panics is stopped the
// same way, the panic and its stack in the error, even while the
// application stops. Hook does not block.
func Hook(lc fx.Lifecycle, sd fx.Shutdowner, logger logr.Logger, name string, run func(ctx context.Context) error) {
	var (
		cancel context.CancelFunc
		done   chan struct{}
	)
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	logger = logger.WithName(name)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			ctx = klog.NewContext(ctx, quietOnStop(ctx, logger))
			done = make(chan struct{})
			go func() {
				defer close(done)
				err := runRecovering(ctx, run)
				var panicked *panicError
				if err == nil || ((errors.Is(err, context.Canceled) || ctx.Err() != nil) && !errors.As(err, &panicked)) {
					return
				}
				logger.Error(err, "Component stopped unexpectedly")
				if f, ok := sd.(*Failures); ok {
					f.record(name, err)
				}
				if sd != nil {
					_ = sd.Shutdown(fx.ExitCode(1))
				}
			}()
			return nil
		},
		OnStop: func(stopCtx context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-stopCtx.Done():
				return stopCtx.Err()
			}
		},
	})
}

// Deps are what Hook needs from an fx graph, to embed in a module's fx.In
// parameters: the optional logger, the lifecycle and the shutdowner.
type Deps struct {
	fx.In

	Logger     logr.Logger `optional:"true"`
	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
}

// Start is a module's provide-and-run: it builds a component with
// newFn(opts) and, when that succeeds, runs the component's Run under name
// for the application's lifetime (Hook on d). It returns newFn's answer.
func Start[O any, T interface{ Run(context.Context) error }](d Deps, name string, newFn func(O) (T, error), opts O) (T, error) {
	t, err := newFn(opts)
	if err != nil {
		return t, err
	}
	Hook(d.Lifecycle, d.Shutdowner, d.Logger, name, t.Run)
	return t, nil
}

// Failures is an fx.Shutdowner that remembers the first component whose Run
// failed (see Hook) before it shuts the application down through the
// Shutdowner it wraps. An application decorates fx.Shutdowner with it
// (fx.Decorate) and asks First after Wait returns. It is safe for
// concurrent use.
type Failures struct {
	fx.Shutdowner

	mu        sync.Mutex
	component string
	err       error
}

// NewFailures wraps sd.
func NewFailures(sd fx.Shutdowner) *Failures { return &Failures{Shutdowner: sd} }

func (f *Failures) record(component string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.component, f.err = component, err
	}
}

// First returns the name of the first component that failed and its
// error; err is nil when none did.
func (f *Failures) First() (component string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.component, f.err
}

// runRecovering calls run, turning a panic into an error that carries the
// panic's value and stack: the component stops the application (exit code
// 1) with a log line naming it, rather than the process dying without the
// component's name, or a goroutine dying with a lock held.
func runRecovering(ctx context.Context, run func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{fmt.Sprintf("panic: %v\n%s", r, debug.Stack())}
		}
	}()
	return run(ctx)
}

// panicError is a run's panic, reported even while the application stops.
type panicError struct{ msg string }

func (e *panicError) Error() string { return e.msg }

// quietOnStop returns logger, except that once ctx is done (the component
// stops) an error line whose error is a cancellation (the context's, or a
// gRPC call's canceled with it) is dropped: what a call cut short by the
// stop reports is the stop itself, not an error. Other error lines stay.
func quietOnStop(ctx context.Context, logger logr.Logger) logr.Logger {
	sink := logger.GetSink()
	if sink == nil {
		return logger
	}
	return logger.WithSink(quietSink{LogSink: sink, ctx: ctx})
}

type quietSink struct {
	logr.LogSink
	ctx context.Context
}

// Init does nothing: the wrapped sink, shared, was initialized with its
// own logger (initializing it again would race with its users).
func (quietSink) Init(logr.RuntimeInfo) {}

func (q quietSink) Error(err error, msg string, kv ...any) {
	if q.ctx.Err() != nil && isCancellation(err) {
		return
	}
	q.LogSink.Error(err, msg, kv...)
}

func (q quietSink) WithValues(kv ...any) logr.LogSink {
	return quietSink{LogSink: q.LogSink.WithValues(kv...), ctx: q.ctx}
}

func (q quietSink) WithName(name string) logr.LogSink {
	return quietSink{LogSink: q.LogSink.WithName(name), ctx: q.ctx}
}

// isCancellation reports whether err is a context's cancellation, directly
// or as a gRPC status (which does not wrap it).
func isCancellation(err error) bool {
	return err != nil && (errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled ||
		strings.Contains(err.Error(), context.Canceled.Error()))
}

// ServeGRPC serves srv on lis in the caller's goroutine until ctx is done,
// then stops srv (grpc.Server.Stop, from ctx's context.AfterFunc: no
// goroutine waits for ctx meanwhile) and returns nil once it stopped. When
// Serve fails on its own, ServeGRPC stops srv and returns Serve's error.
func ServeGRPC(ctx context.Context, srv *grpc.Server, lis net.Listener) error {
	stop := context.AfterFunc(ctx, srv.Stop)
	err := srv.Serve(lis)
	stop()
	// Serve returns once a Stop completed; Stop again is a no-op then, and
	// closes the connections when Serve failed by itself.
	srv.Stop()
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}
