package eviction

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/fxgroup"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/ticks"
)

// SignalGroup is the fx value group of Signal added to the built-in ones
// (or replacing one by Name), after Options.Signals.
const SignalGroup = "eviction_signals"

// AsSignal returns an fx option that adds a Signal, or what an fx
// constructor returns (a Signal, optionally with an error), to the
// SignalGroup: a new signal, or a replacement of the built-in one of the
// same Name.
func AsSignal(signal any) fx.Option {
	return fxgroup.Provide(SignalGroup, signal, func(s Signal) Signal { return s })
}

// Module provides the *Manager, built from the graph's Options, and runs it
// for the application's lifetime, and the *Pressure it sets its conditions
// in: admission and the node status read that one, so they need not depend
// on the Manager (which evicts through the pod loop that admits by it).
// Options fields left nil are filled from
// the graph: Summary, ActivePods, KillPod and PodCleanedUp from the
// optional SummaryFunc, ActivePodsFunc, KillPodFunc and PodCleanedUpFunc;
// Pressure from the graph's; Recorder, Clock, Align and Registerer from the optional record.EventRecorder,
// clock.Clock, ticks.Align and prometheus.Registerer. Signals in the SignalGroup value
// group (AsSignal) are appended to Options.Signals. The manager logs with the optional
// logr.Logger (klog's by default) under the name "eviction".
var Module = fx.Options(
	fx.Provide(NewPressure, provide),
	fx.Invoke(func(*Manager) {}),
)

// Params are Module's dependencies.
type Params struct {
	fx.In

	Options      Options
	Summary      SummaryFunc      `optional:"true"`
	ActivePods   ActivePodsFunc   `optional:"true"`
	KillPod      KillPodFunc      `optional:"true"`
	PodCleanedUp PodCleanedUpFunc `optional:"true"`
	Signals      []Signal         `group:"eviction_signals"`
	Pressure     *Pressure

	Recorder   record.EventRecorder  `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Align      ticks.Align           `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	runner.Deps
}

func provide(p Params) (*Manager, error) {
	o := p.Options
	if o.Summary == nil {
		o.Summary = p.Summary
	}
	if o.ActivePods == nil {
		o.ActivePods = p.ActivePods
	}
	if o.KillPod == nil {
		o.KillPod = p.KillPod
	}
	if o.PodCleanedUp == nil {
		o.PodCleanedUp = p.PodCleanedUp
	}
	if o.Pressure == nil {
		o.Pressure = p.Pressure
	}
	if len(p.Signals) > 0 {
		o.Signals = append(append([]Signal(nil), o.Signals...), p.Signals...)
	}
	if o.Recorder == nil {
		o.Recorder = p.Recorder
	}
	if o.Clock == nil {
		o.Clock = p.Clock
	}
	if o.Align == nil {
		o.Align = p.Align
	}
	if o.Registerer == nil {
		o.Registerer = p.Registerer
	}
	return runner.Start(p.Deps, "eviction", New, o)
}
