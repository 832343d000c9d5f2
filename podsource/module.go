package podsource

import (
	"go.uber.org/fx"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
)

// Module provides the *Config merging every Source in the "pod_sources"
// value group (after Options.Sources) and runs it for the application's
// lifetime under the name "podsource"; nil group values are skipped, so a
// provider of a source that configuration turns off may return nil. Options is optional in the graph;
// its zero Clock and Recorder are filled from the graph's optional
// clock.Clock and record.EventRecorder. The Config logs with the optional
// logr.Logger (klog's by default).
var Module = fx.Options(
	fx.Provide(provide),
	fx.Invoke(func(*Config) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options  Options              `optional:"true"`
	Sources  []Source             `group:"pod_sources"`
	Clock    clock.Clock          `optional:"true"`
	Recorder record.EventRecorder `optional:"true"`
	runner.Deps
}

func provide(p Params) (*Config, error) {
	opts := p.Options
	opts.Sources = append([]Source(nil), opts.Sources...)
	for _, s := range p.Sources {
		// A provider with nothing to contribute (a source turned off by
		// configuration) may give nil.
		if s != nil {
			opts.Sources = append(opts.Sources, s)
		}
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	if opts.Recorder == nil {
		opts.Recorder = p.Recorder
	}
	return runner.Start(p.Deps, "podsource", New, opts)
}
