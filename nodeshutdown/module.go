package nodeshutdown

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/fxgroup"
	"github.com/nodekit/nodekit/internal/runner"
)

// SourceGroup is the fx value group of Source added to Options.Sources.
const SourceGroup = "node_shutdown_sources"

// AsSource returns an fx option that adds a Source, or what an fx
// constructor returns (a Source, optionally with an error), to the
// SourceGroup. A constructor may return a nil Source (a source its
// configuration turns off): Module skips it.
func AsSource(source any) fx.Option {
	return fxgroup.Provide(SourceGroup, source, func(s Source) Source { return s })
}

// Module provides the *Manager, built from the graph's Options, and runs it
// for the application's lifetime, and the *Gate it records a shutdown in:
// admission and the Ready condition read that one, so they need not depend
// on the Manager (which kills pods through the loop that admits by it).
// Options fields left nil are filled from the graph: ActivePods and KillPod
// from the optional ActivePodsFunc and KillPodFunc; Gate from the graph's; Recorder, Clock and Registerer from the optional
// record.EventRecorder, clock.Clock and prometheus.Registerer. Sources in
// the SourceGroup value group (AsSource) are appended to Options.Sources (when both
// are empty, the Manager watches nothing and acts only on Handle). The manager logs with the
// optional logr.Logger (klog's by default) under the name "nodeshutdown".
var Module = fx.Options(
	fx.Provide(NewGate, provide),
	fx.Invoke(func(*Manager) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options    Options
	ActivePods ActivePodsFunc `optional:"true"`
	KillPod    KillPodFunc    `optional:"true"`
	Sources    []Source       `group:"node_shutdown_sources"`
	Gate       *Gate

	Recorder   record.EventRecorder  `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	runner.Deps
}

func provide(p Params) (*Manager, error) {
	o := p.Options
	if o.ActivePods == nil {
		o.ActivePods = p.ActivePods
	}
	if o.KillPod == nil {
		o.KillPod = p.KillPod
	}
	if o.Gate == nil {
		o.Gate = p.Gate
	}
	if len(p.Sources) > 0 {
		o.Sources = append([]Source(nil), o.Sources...)
		for _, s := range p.Sources {
			if s != nil {
				o.Sources = append(o.Sources, s)
			}
		}
	}
	if o.Recorder == nil {
		o.Recorder = p.Recorder
	}
	if o.Clock == nil && p.Clock != nil {
		o.Clock = p.Clock
	}
	if o.Registerer == nil {
		o.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "nodeshutdown", New, o)
}
