package runtime

import (
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/tools/record"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
)

// Module provides a *Client built from the Options in the graph, and its
// cri.RuntimeService and cri.ImageManagerService. The Client is closed when
// the application stops.
var Module = fx.Module("runtime", fx.Provide(provide))

// Params are the dependencies of Module. Options.Registerer and
// Options.Clock, when zero, are taken from the graph's Registerer and Clock.
type Params struct {
	fx.In

	Options    Options
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Lifecycle  fx.Lifecycle
}

// Result is what Module provides.
type Result struct {
	fx.Out

	Client         *Client
	RuntimeService cri.RuntimeService
	ImageService   cri.ImageManagerService
}

func provide(p Params) (Result, error) {
	opts := p.Options
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	c, err := New(opts)
	if err != nil {
		return Result{}, err
	}
	p.Lifecycle.Append(fx.StopHook(c.Close))
	return Result{Client: c, RuntimeService: c.RuntimeService(), ImageService: c.ImageService()}, nil
}

// PodsModule provides the pod runtime: a *PodManager built from the
// PodManagerOptions in the graph, a *PLEG built from the PLEGOptions in the
// graph (optional; the zero value has the kubelet's defaults) watching it,
// and the PLEG's *PodCache; it runs the PLEG from start to stop. Options
// fields the graph can fill are taken from it when zero: the CRI services
// from the *Client (Module provides it), the record.EventRecorder, the
// clock.Clock and the prometheus.Registerer. To swap the runtime side of
// pod syncing, leave PodsModule out and provide these yourself.
var PodsModule = fx.Module("runtime-pods", fx.Provide(providePods))

// PodsParams are the dependencies of PodsModule.
type PodsParams struct {
	fx.In

	Options     PodManagerOptions
	PLEGOptions PLEGOptions `optional:"true"`
	Client      *Client
	Recorder    record.EventRecorder  `optional:"true"`
	Registerer  prometheus.Registerer `optional:"true"`
	Clock       clock.Clock           `optional:"true"`
	Logger      logr.Logger           `optional:"true"`
	Lifecycle   fx.Lifecycle
	Shutdowner  fx.Shutdowner
}

// PodsResult is what PodsModule provides.
type PodsResult struct {
	fx.Out

	PodManager *PodManager
	PLEG       *PLEG
	Cache      *PodCache
}

func providePods(p PodsParams) (PodsResult, error) {
	opts := p.Options
	if opts.Runtime == nil {
		opts.Runtime = p.Client.RuntimeService()
	}
	if opts.Images == nil {
		opts.Images = p.Client.ImageService()
	}
	if opts.Recorder == nil {
		opts.Recorder = p.Recorder
	}
	if opts.Clock == nil {
		opts.Clock = p.Clock
	}
	if opts.Registerer == nil {
		opts.Registerer = p.Registerer
	}
	pm, err := NewPodManager(opts)
	if err != nil {
		return PodsResult{}, err
	}
	popts := p.PLEGOptions
	if popts.Pods == nil {
		popts.Pods = pm
	}
	if popts.Runtime == nil {
		popts.Runtime = opts.Runtime
	}
	if popts.Clock == nil {
		popts.Clock = p.Clock
	}
	if popts.Registerer == nil {
		popts.Registerer = p.Registerer
	}
	pleg, err := NewPLEG(popts)
	if err != nil {
		return PodsResult{}, err
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "pleg", pleg.Run)
	return PodsResult{PodManager: pm, PLEG: pleg, Cache: pleg.Cache()}, nil
}
