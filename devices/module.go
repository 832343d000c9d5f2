package devices

import (
	"context"

	"go.uber.org/fx"
)

// Module provides a *Manager from Options and runs it (Run) from fx's
// OnStart to OnStop.
var Module = fx.Options(fx.Provide(newForFx))

func newForFx(lc fx.Lifecycle, opts Options) (*Manager, error) {
	m, err := New(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() {
				defer close(done)
				_ = m.Run(ctx)
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
	return m, nil
}
