package runner

import (
	"context"
	"errors"
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
