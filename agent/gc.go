package agent

import (
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/tools/record"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/imagepull"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/ticks"
)

// RuntimeGC is a CRI node's housekeeping of images and logs (part of CRI):
// the image garbage collector (runtime.ImageGC from Config.ImageGCOptions,
// every 5 minutes, not run when imageGCHighThresholdPercent is 100 and
// imageMaximumGCAge 0, as the kubelet) and container log rotation
// (runtime.LogRotator from Config.LogRotatorOptions, listing the runtime's
// containers only while the PLEG sees a pod running), both run from start
// to stop. *runtime.ImageGC is in the graph, and its DeleteUnusedImages is
// the eviction manager's DeleteUnusedImagesFunc: under disk pressure unused
// images are removed before pods are evicted, as by the kubelet. After
// each collection the image pull manager (ImagePulls) prunes the records of
// the images that are gone.
// Container garbage collection is the pod lifecycle loop's, with the
// policy of Config.ContainerGCPolicy. Decorate runtime.ImageGCOptions or
// runtime.LogRotatorOptions to change them.
var RuntimeGC = fx.Options(
	fx.Provide(
		func(cfg *Config) runtime.ImageGCOptions { return cfg.ImageGCOptions() },
		logRotatorOptions,
		provideImageGC,
		provideLogRotator,
		func(g *runtime.ImageGC) DeleteUnusedImagesFunc { return g.DeleteUnusedImages },
	),
	fx.Invoke(func(*runtime.ImageGC, *runtime.LogRotator) {}),
)

type runtimeGCParams struct {
	fx.In

	RuntimeService cri.RuntimeService
	ImageService   cri.ImageManagerService
	Recorder       record.EventRecorder
	Registerer     prometheus.Registerer
	Clock          clock.Clock
	Align          ticks.Align
	Logger         logr.Logger
	Lifecycle      fx.Lifecycle
	Shutdowner     fx.Shutdowner
}

// imageGCParams are the image GC's own dependencies; the image pull
// manager is optional (nil with its gate off).
type imageGCParams struct {
	fx.In

	Options runtime.ImageGCOptions
	Mounts  *runtime.ImageMounts
	Pulls   *imagepull.Manager `optional:"true"`
}

func provideImageGC(p runtimeGCParams, q imageGCParams) (*runtime.ImageGC, error) {
	o := q.Options
	if o.ImageMounts == nil {
		o.ImageMounts = q.Mounts
	}
	if q.Pulls != nil {
		o.PostGC = append(o.PostGC, q.Pulls.PruneUnknownRecords)
	}
	if o.Runtime == nil {
		o.Runtime = p.RuntimeService
	}
	if o.Images == nil {
		o.Images = p.ImageService
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
	g, err := runtime.NewImageGC(o)
	if err != nil {
		return nil, err
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "imagegc", g.Run)
	return g, nil
}

// logRotatorOptions are Config.LogRotatorOptions with Running and LogPath
// answered by the PLEG (nil without one): a round lists the runtime only
// while the PLEG's latest relist, event or sync of the agent's own shows a
// pod with a running container or a ready sandbox (PLEG.RunningPods), so
// on a node with no pod log rotation makes no listing call every 10 s; and
// it asks the runtime for no log path the PLEG holds
// (PLEG.ContainerLogPath), so a burst's new containers cost it no
// ContainerStatus call each.
func logRotatorOptions(p plegParams) (runtime.LogRotatorOptions, error) {
	o, err := p.Config.LogRotatorOptions()
	if pleg := p.PLEG; pleg != nil {
		o.Running = func() bool { return len(pleg.RunningPods()) > 0 }
		o.LogPath = pleg.ContainerLogPath
	}
	return o, err
}

func provideLogRotator(p runtimeGCParams, o runtime.LogRotatorOptions) (*runtime.LogRotator, error) {
	if o.Runtime == nil {
		o.Runtime = p.RuntimeService
	}
	if o.Clock == nil {
		o.Clock = p.Clock
	}
	if o.Align == nil {
		o.Align = p.Align
	}
	r, err := runtime.NewLogRotator(o)
	if err != nil {
		return nil, err
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "logrotation", r.Run)
	return r, nil
}
