package runtime

import (
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/tools/record"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/ticks"
)

// Module provides a *Client built from the Options in the graph, and its
// cri.RuntimeService and cri.ImageManagerService. The Client is closed when
// the application stops.
var Module = fx.Options(fx.Provide(provide))

// Params are the dependencies of Module. Options.Registerer, Options.Clock
// and Options.Logger, when zero, are taken from the graph's Registerer,
// Clock and Logger.
type Params struct {
	fx.In

	Options    Options
	Registerer prometheus.Registerer `optional:"true"`
	Clock      clock.Clock           `optional:"true"`
	Logger     logr.Logger           `optional:"true"`
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
	if opts.Logger.GetSink() == nil {
		opts.Logger = p.Logger
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
// the PLEG's *PodCache, and the *Backend that runs pods for the pod
// lifecycle loop, also as pods.Runtime; it runs the PLEG from start to
// stop. Options fields the graph can fill are taken from it when zero: the
// CRI services (cri.RuntimeService and cri.ImageManagerService, so a
// decorator of either reaches pod syncing), the record.EventRecorder, the
// clock.Clock and the prometheus.Registerer. The Backend takes the optional
// PodCgroups, SecretGetter, ProbeResults and VolumeManager of the graph
// (without a VolumeManager only pods that mount no volume start), and the
// PodManager the optional DynamicResources (the DRA manager) and
// UserNamespaces (the user namespace manager). To swap the
// runtime side of pod syncing, leave PodsModule out and provide a
// pods.Runtime yourself.
var PodsModule = fx.Options(fx.Provide(
	providePodCache,
	providePods,
	func(b *Backend) pods.Runtime { return b },
))

// PodsParams are the dependencies of PodsModule.
type PodsParams struct {
	fx.In

	Options        PodManagerOptions
	PLEGOptions    PLEGOptions `optional:"true"`
	Cache          *PodCache
	RuntimeService cri.RuntimeService
	ImageService   cri.ImageManagerService
	Cgroups        PodCgroups            `optional:"true"`
	PullSecrets    SecretGetter          `optional:"true"`
	Probes         ProbeResults          `optional:"true"`
	Volumes        VolumeManager         `optional:"true"`
	Dynamic        DynamicResources      `optional:"true"`
	UserNamespaces UserNamespaces        `optional:"true"`
	Recorder       record.EventRecorder  `optional:"true"`
	Registerer     prometheus.Registerer `optional:"true"`
	Clock          clock.Clock           `optional:"true"`
	Align          ticks.Align           `optional:"true"`
	Logger         logr.Logger           `optional:"true"`
	Lifecycle      fx.Lifecycle
	Shutdowner     fx.Shutdowner
}

// PodsResult is what PodsModule provides.
type PodsResult struct {
	fx.Out

	PodManager *PodManager
	PLEG       *PLEG
	Backend    *Backend
}

// providePodCache is the PLEG's cache: PLEGOptions.Cache, or a new one. It
// is a value of its own in the graph, so what only reads it (the volume
// manager's HasPod) need not depend on the Backend.
func providePodCache(p struct {
	fx.In
	PLEG PLEGOptions `optional:"true"`
}) *PodCache {
	if p.PLEG.Cache != nil {
		return p.PLEG.Cache
	}
	return NewPodCache()
}

func providePods(p PodsParams) (PodsResult, error) {
	opts := p.Options
	if opts.Runtime == nil {
		opts.Runtime = p.RuntimeService
	}
	if opts.Images == nil {
		opts.Images = p.ImageService
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
	if opts.DynamicResources == nil {
		opts.DynamicResources = p.Dynamic
	}
	if opts.UserNamespaces == nil {
		opts.UserNamespaces = p.UserNamespaces
	}
	pm, err := NewPodManager(opts)
	if err != nil {
		return PodsResult{}, err
	}
	popts := p.PLEGOptions
	popts.Cache = p.Cache
	if popts.Pods == nil {
		popts.Pods = pm
	}
	if popts.Runtime == nil {
		popts.Runtime = opts.Runtime
	}
	if popts.Clock == nil {
		popts.Clock = p.Clock
	}
	if popts.Align == nil {
		popts.Align = p.Align
	}
	if popts.Registerer == nil {
		popts.Registerer = p.Registerer
	}
	// The Backend below reports what its syncs created and started.
	popts.SyncsObserved = true
	pleg, err := NewPLEG(popts)
	if err != nil {
		return PodsResult{}, err
	}
	backend, err := NewBackend(BackendOptions{
		Pods: pm, PLEG: pleg, Cgroups: p.Cgroups, PullSecrets: p.PullSecrets, Probes: p.Probes, Volumes: p.Volumes, Clock: p.Clock,
	})
	if err != nil {
		return PodsResult{}, err
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "pleg", pleg.Run)
	return PodsResult{PodManager: pm, PLEG: pleg, Backend: backend}, nil
}
