package status

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/ticks"
)

// SetterGroup is the fx value group of OrderedSetter the Reporter runs.
const SetterGroup = "node_status_setters"

// HealthCheckGroup is the fx value group of HealthCheck that gate Ready.
const HealthCheckGroup = "node_health_checks"

// Module provides the default setters into the "node_status_setters" group
// and a *Reporter that runs from the application's start to its stop. The
// graph must supply Options and SetterOptions (the agent builds both from
// its configuration) and the runtime funcs RuntimeVersionFunc and
// RuntimeHealthFunc unless SetterOptions carries them; a
// kubernetes.Interface is optional: without one (and with a local
// *NodeWatch, or none) the Reporter is standalone (see Options.Client); an
// optional VolumesInUseFuncs adds the VolumesInUse setter. The Reporter's
// Client, Clock, Align and Registerer left zero in Options are filled from
// the graph's optional values.
// See the package documentation for what an embedder can add or replace.
var Module = fx.Options(
	fx.Provide(
		fx.Annotated{Group: SetterGroup + ",flatten", Target: provideDefaultSetters},
		provideReporter,
	),
	fx.Invoke(func(*Reporter) {}),
)

// setterParams are what the default setters take from the graph. Fields of
// Config left nil are filled from the matching optional values.
type setterParams struct {
	fx.In

	Options Options
	Config  SetterOptions

	RuntimeVersion  RuntimeVersionFunc  `optional:"true"`
	RuntimeHealth   RuntimeHealthFunc   `optional:"true"`
	RuntimeHandlers RuntimeHandlersFunc `optional:"true"`
	RuntimeFeatures RuntimeFeaturesFunc `optional:"true"`
	ListImages      ListImagesFunc      `optional:"true"`
	VolumesInUse    VolumesInUseFuncs   `optional:"true"`
	Pressure        PressureFuncs       `optional:"true"`
	HealthChecks    []HealthCheck       `group:"node_health_checks"`

	Recorder record.EventRecorder `optional:"true"`
	Clock    clock.Clock          `optional:"true"`
}

func provideDefaultSetters(p setterParams) ([]OrderedSetter, error) {
	c := p.Config
	if c.Hostname == "" {
		c.Hostname = p.Options.Hostname
	}
	if c.Hostname == "" {
		c.Hostname = p.Options.NodeName
	}
	if c.RuntimeVersion == nil {
		c.RuntimeVersion = p.RuntimeVersion
	}
	if c.RuntimeHealth == nil {
		c.RuntimeHealth = p.RuntimeHealth
	}
	if c.RuntimeHandlers == nil {
		c.RuntimeHandlers = p.RuntimeHandlers
	}
	if c.RuntimeFeatures == nil {
		c.RuntimeFeatures = p.RuntimeFeatures
	}
	if c.ListImages == nil {
		c.ListImages = p.ListImages
	}
	if c.VolumesInUse.Synced == nil && c.VolumesInUse.InUse == nil {
		c.VolumesInUse = p.VolumesInUse
	}
	if c.Pressure.Memory == nil {
		c.Pressure.Memory = p.Pressure.Memory
	}
	if c.Pressure.Disk == nil {
		c.Pressure.Disk = p.Pressure.Disk
	}
	if c.Pressure.PID == nil {
		c.Pressure.PID = p.Pressure.PID
	}
	c.HealthChecks = append(append([]HealthCheck(nil), c.HealthChecks...), p.HealthChecks...)
	if c.Recorder == nil {
		c.Recorder = p.Recorder
	}
	if c.Clock == nil && p.Clock != nil {
		c.Clock = p.Clock
	}
	return DefaultSetters(c)
}

// params are what the Reporter takes from the graph. Options fields left
// zero (Client, Clock, Registerer) are filled from the graph's values; the
// group's setters are added to Options.Setters.
type params struct {
	fx.In

	Options Options
	Setters []OrderedSetter      `group:"node_status_setters"`
	Client  kubernetes.Interface `optional:"true"`
	// Node, when the graph has one, is the node watch the Reporter reads
	// (Options.Node wins); it is run by whoever provides it.
	Node       *NodeWatch            `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Align      ticks.Align           `optional:"true"`
	runner.Deps
}

func provideReporter(p params) (*Reporter, error) {
	o := p.Options
	if o.Client == nil {
		o.Client = p.Client
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
	if o.Node == nil {
		o.Node = p.Node
	}
	o.Setters = append(append([]OrderedSetter(nil), o.Setters...), p.Setters...)
	return runner.Start(p.Deps, "status", New, o)
}
