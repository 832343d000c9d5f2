package pods

import (
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/status/podstatus"
	"github.com/nodekit/nodekit/ticks"
)

// NodeGetter returns the node's API object as last seen, and false before
// it is known; status.NodeWatch is one. The Node is shared and read-only.
type NodeGetter interface {
	Node() (*v1.Node, bool)
}

// Module provides the pod lifecycle loop: a *Store of active pods and the
// *Controller, run from the application's start to its stop. The graph must
// supply the *podsource.Config, a Runtime (the CRI backend's module or
// NewBackendRuntime), the podstatus.Interface and a NodeGetter; optional
// are Options (the agent derives them from its configuration), a Prober, a
// MirrorClient (mirror pods for static pods; none on a standalone node),
// the record.EventRecorder, clock.Clock, ticks.Align, the prometheus.Registerer for the
// Controller's metrics and logr.Logger. Admission runs the
// handlers of the AdmitHandlerGroup by Order: Sysctls, GeneralPredicates,
// AppArmor, PodFeatures and DeclaredFeatures among them.
var Module = fx.Options(
	fx.Provide(
		NewStore,
		provide,
		fx.Annotated{Group: AdmitHandlerGroup, Target: generalPredicates},
		fx.Annotated{Group: AdmitHandlerGroup + ",flatten", Target: podSpecHandlers},
	),
	fx.Invoke(func(*Controller) {}),
)

// Params are Module's dependencies. Options fields left zero are filled
// from them.
type Params struct {
	fx.In

	Options    Options `optional:"true"`
	Sources    *podsource.Config
	Runtime    Runtime
	Statuses   podstatus.Interface
	Store      *Store
	Node       NodeGetter
	Admit      []OrderedAdmitHandler    `group:"pod_admit_handlers"`
	Prober     Prober                   `optional:"true"`
	Health     []ResourceHealthProvider `group:"resource_health_providers"`
	Mirrors    MirrorClient             `optional:"true"`
	Recorder   record.EventRecorder     `optional:"true"`
	Clock      clock.Clock              `optional:"true"`
	Align      ticks.Align              `optional:"true"`
	Registerer prometheus.Registerer    `optional:"true"`
	Logger     logr.Logger              `optional:"true"`
	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
}

func provide(p Params) (*Controller, error) {
	o := p.Options
	if o.Sources == nil {
		o.Sources = p.Sources
	}
	if o.Runtime == nil {
		o.Runtime = p.Runtime
	}
	if o.Statuses == nil {
		o.Statuses = p.Statuses
	}
	if o.Store == nil {
		o.Store = p.Store
	}
	if o.Node == nil {
		o.Node = p.Node.Node
	}
	if o.Prober == nil {
		o.Prober = p.Prober
	}
	if o.ResourceHealth == nil {
		o.ResourceHealth = p.Health
	}
	if o.Mirrors == nil {
		o.Mirrors = p.Mirrors
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
	admit, err := ResolveAdmitHandlers(p.Admit)
	if err != nil {
		return nil, err
	}
	o.Admit = append(append([]AdmitHandler(nil), o.Admit...), admit...)
	c, err := New(o)
	if err != nil {
		return nil, err
	}
	runner.Hook(p.Lifecycle, p.Shutdowner, p.Logger, "pods", c.Run)
	return c, nil
}

// podSpecParams are podSpecHandlers' dependencies.
type podSpecParams struct {
	fx.In

	Options   Options `optional:"true"`
	Runtime   Runtime
	Supported []PodFeature `group:"pod_supported_features"`
}

// podSpecHandlers are the default admit handlers that refuse a pod whose
// spec asks for what the node cannot do: Sysctls (with the Options'
// AllowedUnsafeSysctls), AppArmor, PodFeatures (admitting the features of
// the SupportedPodFeatureGroup) and DeclaredFeatures (the features the
// Runtime supports whose gates the Options' Features enable).
func podSpecHandlers(p podSpecParams) ([]OrderedAdmitHandler, error) {
	sysctls, err := Sysctls(kernelRelease(), p.Options.AllowedUnsafeSysctls)
	if err != nil {
		return nil, fmt.Errorf("allowedUnsafeSysctls: %w", err)
	}
	own, err := NodeDeclaredFeatures(nodekit.KubeletVersion(), SupportedNodeFeatures(p.Runtime), p.Options.Features)
	if err != nil {
		return nil, err
	}
	declared, err := DeclaredFeatures(nodekit.KubeletVersion(), own)
	if err != nil {
		return nil, err
	}
	return []OrderedAdmitHandler{
		defaultAdmitHandler(AdmitSysctls, OrderSysctls, sysctls),
		defaultAdmitHandler(AdmitAppArmor, OrderAppArmor, AppArmor(HostAppArmorEnabled())),
		defaultAdmitHandler(AdmitPodFeatures, OrderPodFeatures, PodFeatures(p.Supported...)),
		defaultAdmitHandler(AdmitDeclaredFeatures, OrderDeclaredFeatures, declared),
	}, nil
}

// kernelRelease is the running kernel's release (uname -r), "" when it
// cannot be read.
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func generalPredicates(logger logr.Logger) OrderedAdmitHandler {
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	return defaultAdmitHandler(AdmitGeneralPredicates, OrderGeneralPredicates, GeneralPredicates(logger))
}
