package agent

import (
	"context"

	"github.com/go-logr/logr"
	"go.uber.org/fx"

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
// graph (CRI and Core provide them); CRI includes it. Admission and the
// node status read the *eviction.Pressure the manager sets, so the loop
// that admits pods does not depend on the manager that evicts through it. The manager's inputs
// are in the graph to replace with fx.Decorate: eviction.Options (derived
// by Config.EvictionOptions), eviction.SummaryFunc,
// eviction.ActivePodsFunc, eviction.KillPodFunc, eviction.PodCleanedUpFunc;
// add signals with eviction.AsSignal. Reclaim comes from
// the optional DeleteUnusedContainersFunc and DeleteUnusedImagesFunc.
var Eviction = fx.Options(
	fx.Provide(
		provideEvictionOptions,
		// Fresh stats on every pass, as the kubelet's manager asks for
		// them: passes come early after a memcg notification or an
		// eviction, when a cached summary would show the node as it was.
		func(p *stats.Provider) eviction.SummaryFunc { return p.FreshSummary },
		func(s *pods.Store) eviction.ActivePodsFunc { return s.Active },
		// Admission and the node status read the manager's conditions
		// from the *eviction.Pressure, not the manager, which evicts
		// through the loop that admits pods.
		func(c *pods.Controller) eviction.KillPodFunc { return c.KillPod },
		func(c *pods.Controller) eviction.PodCleanedUpFunc { return c.PodTerminated },
		func(p *eviction.Pressure) status.PressureFuncs {
			return status.PressureFuncs{Memory: p.IsUnderMemoryPressure, Disk: p.IsUnderDiskPressure, PID: p.IsUnderPIDPressure}
		},
	),
	pods.AsDefaultAdmitHandler(pods.AdmitEviction, pods.OrderEviction, evictionAdmitHandler),
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
	Loop    *pods.Controller
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
		o.DeleteUnusedContainers = p.Loop.DeleteAllUnusedContainers
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

// evictionAdmitHandler is the eviction manager's pressure check, the first
// of the pod admit handlers as in the kubelet.
func evictionAdmitHandler(p *eviction.Pressure) pods.AdmitHandler {
	return pods.AdmitFunc(func(a pods.AdmitAttributes) pods.AdmitResult {
		ok, reason, message := p.Admit(a.Pod)
		return pods.AdmitResult{Admit: ok, Reason: reason, Message: message}
	})
}
