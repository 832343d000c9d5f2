package agent

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/eviction"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/status"
)

// DeleteUnusedContainersFunc removes every container the node no longer
// needs, the kubelet's DeleteAllUnusedContainers: the eviction manager runs
// it to reclaim disk before it evicts pods for a disk signal. Optional in
// the graph; without one the eviction manager runs the pod loop's
// pods.Controller.DeleteAllUnusedContainers, which on a CRI node also
// removes the stopped containers of pods that terminated but are still
// known (an evicted pod's, before its API object is deleted). It blocks
// until done.
type DeleteUnusedContainersFunc func(ctx context.Context) error

// DeleteUnusedImagesFunc removes every image no container uses, the
// kubelet's image garbage collection's DeleteUnusedImages: the eviction
// manager runs it to reclaim image filesystem space before it evicts pods.
// Optional in the graph (RuntimeGC provides the image garbage collector's);
// without one no images are reclaimed (the agent logs it at start). It
// blocks until done.
type DeleteUnusedImagesFunc func(ctx context.Context) error

// Eviction runs the kubelet's node-pressure eviction manager
// (eviction.Module) from the *Config in the graph: it reads a fresh stats
// summary (stats.Provider.FreshSummary) every 10 s, sets the MemoryPressure, DiskPressure and
// PIDPressure node conditions (status.PressureFuncs), rejects pods at
// admission under pressure (the pods.AdmitEviction handler, before
// GeneralPredicates) and evicts pods through the pod loop
// (pods.Controller.KillPod), ranking the active pods of the pods.Store. Its
// metrics (kubelet_evictions, kubelet_eviction_stats_age_seconds) go to
// the agent's registry.
//
// It needs a *stats.Provider, a *pods.Store and a *pods.Controller in the
// graph (CRI and Core provide them); CRI includes it. The manager's inputs
// are in the graph to replace with fx.Decorate: eviction.Options (derived
// by Config.EvictionOptions), eviction.SummaryFunc,
// eviction.ActivePodsFunc, eviction.KillPodFunc, eviction.PodCleanedUpFunc;
// add signals with eviction.AsSignal. Reclaim comes from
// the optional DeleteUnusedContainersFunc and DeleteUnusedImagesFunc.
var Eviction = fx.Options(
	fx.Provide(
		newPodLoopRef,
		provideEvictionOptions,
		// Fresh stats on every pass, as the kubelet's manager asks for
		// them: passes come early after a memcg notification or an
		// eviction, when a cached summary would show the node as it was.
		func(p *stats.Provider) eviction.SummaryFunc { return p.FreshSummary },
		func(s *pods.Store) eviction.ActivePodsFunc { return s.Active },
		func(l *podLoopRef) eviction.KillPodFunc { return l.killPod },
		func(l *podLoopRef) eviction.PodCleanedUpFunc { return l.podTerminated },
		func(m *eviction.Manager) status.PressureFuncs {
			return status.PressureFuncs{Memory: m.IsUnderMemoryPressure, Disk: m.IsUnderDiskPressure, PID: m.IsUnderPIDPressure}
		},
	),
	pods.AsDefaultAdmitHandler(pods.AdmitEviction, pods.OrderEviction, evictionAdmitHandler),
	// The Controller admits pods through the eviction manager, so the
	// manager cannot take the Controller as a dependency: it gets it here,
	// once both are built and before either runs.
	fx.Invoke(func(l *podLoopRef, c *pods.Controller) { l.c.Store(c) }),
	eviction.Module,
)

// EvictionOptions returns the eviction manager's options from the
// KubeletConfiguration: the thresholds (evictionHard, evictionSoft,
// evictionSoftGracePeriod, evictionMinimumReclaim, enforceNodeAllocatable),
// evictionMaxPodGracePeriod, evictionPressureTransitionPeriod,
// kernelMemcgNotification and localStorageCapacityIsolation. The loop's
// funcs (Summary, ActivePods, KillPod, PodCleanedUp), the reclaim funcs,
// PodCgroupRoot and the recorder, clock and registerer are the caller's (or
// Eviction's) to fill.
//
// evictionHard is taken as final, exactly as the node status subtracts it
// from allocatable: whatever loaded the configuration has already put the
// kubelet's defaults in it (when a configuration file sets none) or merged
// them in (mergeDefaultEvictionSettings). A nil evictionHard means no hard
// thresholds, as the kubelet run from flags alone.
func (cfg *Config) EvictionOptions() eviction.Options {
	kc := &cfg.Kubelet
	hard := kc.EvictionHard
	if hard == nil {
		hard = map[string]string{}
	}
	return eviction.Options{
		NodeName: cfg.NodeName,
		Thresholds: eviction.ThresholdConfig{
			Hard:                   hard,
			Soft:                   kc.EvictionSoft,
			SoftGracePeriod:        kc.EvictionSoftGracePeriod,
			MinimumReclaim:         kc.EvictionMinimumReclaim,
			EnforceNodeAllocatable: kc.EnforceNodeAllocatable,
		},
		MaxPodGracePeriodSeconds:        int64(kc.EvictionMaxPodGracePeriod),
		PressureTransitionPeriod:        kc.EvictionPressureTransitionPeriod.Duration,
		NoLocalStorageCapacityIsolation: kc.LocalStorageCapacityIsolation != nil && !*kc.LocalStorageCapacityIsolation,
		KernelMemcgNotification:         kc.KernelMemcgNotification,
	}
}

// unmergedDefaults returns the default hard thresholds evictionHard lacks
// although mergeDefaultEvictionSettings asks for them: the configuration
// was completed without merging them.
func unmergedDefaults(cfg *Config) []string {
	kc := &cfg.Kubelet
	if kc.MergeDefaultEvictionSettings == nil || !*kc.MergeDefaultEvictionSettings || kc.EvictionHard == nil {
		return nil
	}
	var missing []string
	for k := range DefaultEvictionHard {
		if _, ok := kc.EvictionHard[k]; !ok {
			missing = append(missing, k)
		}
	}
	return missing
}

type evictionParams struct {
	fx.In

	Config  *Config
	Loop    *podLoopRef
	Cgroups *cgroupdriver.Manager `optional:"true"`
	Driver  cgroupdriver.Driver   `optional:"true"`
	Logger  logr.Logger           `optional:"true"`

	DeleteUnusedContainers DeleteUnusedContainersFunc `optional:"true"`
	DeleteUnusedImages     DeleteUnusedImagesFunc     `optional:"true"`
}

// provideEvictionOptions completes Config.EvictionOptions from the graph:
// the kubepods cgroup for the memcg notifier, and the reclaim funcs.
func provideEvictionOptions(p evictionParams) eviction.Options {
	o := p.Config.EvictionOptions()
	logger := p.Logger.WithName("eviction")
	if p.Cgroups != nil && p.Driver != nil {
		o.PodCgroupRoot = p.Driver.Literal(p.Cgroups.QOSCgroups().Guaranteed)
	}
	if p.DeleteUnusedContainers != nil {
		o.DeleteUnusedContainers = eviction.ReclaimFunc(p.DeleteUnusedContainers)
	} else {
		o.DeleteUnusedContainers = p.Loop.deleteAllUnusedContainers
	}
	if p.DeleteUnusedImages != nil {
		o.DeleteUnusedImages = eviction.ReclaimFunc(p.DeleteUnusedImages)
	} else {
		logger.Info("No DeleteUnusedImagesFunc in the graph: the eviction manager reclaims no images under disk pressure before evicting pods")
	}
	if missing := unmergedDefaults(p.Config); len(missing) > 0 {
		logger.Info("mergeDefaultEvictionSettings is set but the default hard thresholds were not merged into evictionHard when the configuration was loaded; evictionHard is used as it is", "missing", missing)
	}
	return o
}

// podLoopRef hands the pod lifecycle loop to the eviction manager's funcs:
// the loop admits pods through the manager, so the manager cannot depend on
// it; Eviction's fx.Invoke sets it before anything runs.
type podLoopRef struct {
	c atomic.Pointer[pods.Controller]
}

func newPodLoopRef() *podLoopRef { return &podLoopRef{} }

func (l *podLoopRef) killPod(ctx context.Context, pod *v1.Pod, grace *int64, statusFn func(*v1.PodStatus)) error {
	c := l.c.Load()
	if c == nil {
		return fmt.Errorf("evict pod %s/%s: the pod lifecycle loop is not built", pod.Namespace, pod.Name)
	}
	return c.KillPod(ctx, pod, grace, statusFn)
}

func (l *podLoopRef) podTerminated(uid types.UID) bool {
	c := l.c.Load()
	return c != nil && c.PodTerminated(uid)
}

func (l *podLoopRef) deleteAllUnusedContainers(ctx context.Context) error {
	c := l.c.Load()
	if c == nil {
		return nil
	}
	return c.DeleteAllUnusedContainers(ctx)
}

// evictionAdmitHandler is the eviction manager's pressure check, the first
// of the pod admit handlers as in the kubelet.
func evictionAdmitHandler(m *eviction.Manager) pods.AdmitHandler {
	return pods.AdmitFunc(func(a pods.AdmitAttributes) pods.AdmitResult {
		ok, reason, message := m.Admit(a.Pod)
		return pods.AdmitResult{Admit: ok, Reason: reason, Message: message}
	})
}
