package url

import (
	"go.uber.org/fx"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/podsource"
)

// Module adds the URL Source, built from the graph's Options, to the
// podsource.SourceGroup value group, where podsource.Module merges it. An
// Options without URL (no staticPodURL configured) adds nothing. A zero
// Recorder and Clock are filled from the graph's optional
// record.EventRecorder and clock.Clock.
var Module = fx.Options(
	podsource.AsSource(provide),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options  Options
	Recorder record.EventRecorder `optional:"true"`
	Clock    clock.Clock          `optional:"true"`
}

func provide(p Params) (podsource.Source, error) {
	opts := p.Options
	if opts.URL == "" {
		return nil, nil
	}
	if opts.Recorder == nil {
		opts.Recorder = p.Recorder
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	return New(opts)
}
