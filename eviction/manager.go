package eviction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/ticks"
)

// Defaults, as the kubelet's.
const (
	// DefaultPressureTransitionPeriod is evictionPressureTransitionPeriod's
	// default.
	DefaultPressureTransitionPeriod = 5 * time.Minute
	// DefaultMonitoringInterval is the kubelet's evictionMonitoringPeriod.
	DefaultMonitoringInterval = 10 * time.Second
	// DefaultMemoryCgroupDir is where the cgroup v1 memory controller is
	// mounted.
	DefaultMemoryCgroupDir = "/sys/fs/cgroup/memory"

	// podCleanupTimeout bounds the wait for an evicted pod's cleanup, polled
	// every podCleanupPollFreq.
	podCleanupTimeout  = 30 * time.Second
	podCleanupPollFreq = time.Second
	// immediateGracePeriodSeconds is the grace period of a hard eviction
	// and of a local storage eviction.
	immediateGracePeriodSeconds = 1
	// notifierRefreshInterval is how often memcg thresholds are re-armed
	// from fresh stats.
	notifierRefreshInterval = 10 * time.Second
)

// SummaryFunc returns fresh node and pod stats (the kubelet's summary API).
// The manager reads the summary and never modifies or retains it past one
// pass.
type SummaryFunc func(ctx context.Context) (*statsapi.Summary, error)

// ActivePodsFunc returns the pods admitted to the node and not yet
// terminated, with their allocated resources. The manager sorts a copy of
// the slice and never modifies the pods.
type ActivePodsFunc func() []*v1.Pod

// KillPodFunc stops pod's containers with gracePeriodOverride (seconds)
// and returns when they are stopped or the kill failed or timed out (the
// kubelet's killPodFunc gives up after 1.5 × the grace period, at least 10
// s). Before the pod's final status is written, statusFn must be applied to
// it: it sets phase Failed, reason Evicted, the message and the
// DisruptionTarget condition. The pod must not be restarted.
type KillPodFunc func(ctx context.Context, pod *v1.Pod, gracePeriodOverride *int64, statusFn func(*v1.PodStatus)) error

// PodCleanedUpFunc reports whether an evicted pod's resources are released
// (containers removed, volumes unmounted, cgroup gone), the kubelet's
// PodIsFinished. It must be cheap and must not block.
type PodCleanedUpFunc func(uid types.UID) bool

// DiskLayoutFunc reports the disk layout (see DiskLayout). It is asked
// once, on the first pass; an error fails that pass and it is asked again.
type DiskLayoutFunc func(ctx context.Context) (DiskLayout, error)

// Options configure a Manager. Summary, ActivePods and KillPod are
// required.
type Options struct {
	// NodeName names the node in EvictionThresholdMet events.
	NodeName string
	// Thresholds are the eviction thresholds as the KubeletConfiguration
	// spells them; New parses them with ParseThresholds (nil Hard means the
	// kubelet's defaults).
	Thresholds ThresholdConfig
	// MaxPodGracePeriodSeconds is evictionMaxPodGracePeriod: a pod evicted
	// for a soft threshold gets min(this, its terminationGracePeriodSeconds)
	// as the kubelet computes it: 0, the default, gives 0 and a negative
	// value gives itself, which the runtime raises to its 2 s minimum.
	MaxPodGracePeriodSeconds int64
	// PressureTransitionPeriod is evictionPressureTransitionPeriod: how long
	// a pressure condition stays after its signal cleared. Default 5m.
	PressureTransitionPeriod time.Duration
	// MonitoringInterval is the time between passes. Default 10s.
	MonitoringInterval time.Duration
	// NoLocalStorageCapacityIsolation is localStorageCapacityIsolation=false:
	// emptyDir size limits and ephemeral-storage limits are not enforced.
	NoLocalStorageCapacityIsolation bool

	// Summary returns the node's stats. Required.
	Summary SummaryFunc
	// ActivePods returns the pods to rank. Required.
	ActivePods ActivePodsFunc
	// KillPod evicts one pod. Required.
	KillPod KillPodFunc
	// PodCleanedUp, when set, is polled (every second, up to 30 s) after an
	// eviction before the next pass; without it the manager waits one
	// MonitoringInterval.
	PodCleanedUp PodCleanedUpFunc
	// DeleteUnusedContainers and DeleteUnusedImages reclaim disk before
	// pods are evicted for a disk signal (which of them runs for which
	// signal follows the disk layout, as the kubelet). Optional.
	DeleteUnusedContainers, DeleteUnusedImages ReclaimFunc
	// DiskLayout tells which runtime filesystems are separate; when nil the
	// manager infers it from the summary (InferDiskLayout).
	DiskLayout DiskLayoutFunc
	// PodsMemoryLimit returns the pods' memory limit (the kubepods cgroup's:
	// node allocatable plus the hard memory.available threshold). It is
	// used for allocatableMemory.available only when the summary's "pods"
	// system container has no AvailableBytes. Optional.
	PodsMemoryLimit func() (bytes int64, ok bool)
	// Signals adds signals to the built-in ones, or replaces the built-in
	// signal of the same Name. Their names are valid in Thresholds.
	Signals []Signal

	// KernelMemcgNotification is kernelMemcgNotification: on cgroup v1, arm
	// memory.usage_in_bytes thresholds through cgroup.event_control so a
	// crossed memory threshold starts a pass at once instead of at the next
	// interval. Unsupported kernels (cgroup v2) are logged and ignored.
	KernelMemcgNotification bool
	// MemoryCgroupDir is the cgroup v1 memory controller's mount. Default
	// DefaultMemoryCgroupDir.
	MemoryCgroupDir string
	// PodCgroupRoot is the pods' cgroup (e.g. "/kubepods") under
	// MemoryCgroupDir, watched for allocatableMemory.available.
	PodCgroupRoot string

	// Recorder records EvictionThresholdMet on the node and Evicted on
	// pods. Default: events are dropped.
	Recorder record.EventRecorder
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Align moves the monitoring rounds to the node's shared ticks
	// (package ticks; nil waits MonitoringInterval exactly).
	Align ticks.Align
	// Registerer, when set, gets the manager's metrics.
	Registerer prometheus.Registerer
	// Pressure receives the pressure conditions the Manager observes, for
	// readers that cannot depend on the Manager (admission: the pod loop
	// the Manager evicts through admits pods by it). nil: a Pressure of the
	// Manager's own.
	Pressure *Pressure
}

// resolved is a threshold whose signal is known: sig indexes
// Manager.signals.
type resolved struct {
	Threshold
	sig int
}

// observed is a signal's observation in one pass; ok is false when the
// summary had none.
type observed struct {
	Observation
	ok bool
}

// Manager is the node-pressure eviction manager: it watches eviction
// signals, reports pressure conditions, reclaims node resources and evicts
// pods, as the kubelet's. Its methods are safe for concurrent use; Run must
// be called once.
type Manager struct {
	opts     Options
	clock    clock.Clock
	recorder record.EventRecorder
	nodeRef  *v1.ObjectReference
	metrics  *metrics
	config   []Threshold

	// Loop state, touched only by Run's goroutine.
	layoutFixed      bool
	layoutBuilt      bool
	layout           DiskLayout
	signals          []Signal
	thresholds       []resolved
	firstObserved    []time.Time // per threshold; zero: not met
	met              []int       // thresholds met with grace, not yet reclaimed
	condLastObserved map[v1.NodeConditionType]time.Time
	lastObs          []observed
	memcg            *memcgNotifiers

	// Pressure holds the conditions Run sets; its methods (Admit,
	// IsUnderMemoryPressure, UnderPressure, Conditions, ...) are the
	// Manager's.
	*Pressure

	// trigger starts a pass before the interval ends (memcg notifications).
	trigger chan struct{}
}

// New validates opts, parses the thresholds and returns a Manager. It does
// no I/O.
func New(opts Options) (*Manager, error) {
	if opts.Summary == nil || opts.ActivePods == nil || opts.KillPod == nil {
		return nil, errors.New("eviction: Options.Summary, ActivePods and KillPod are required")
	}
	names := make([]string, 0, len(opts.Signals))
	for _, s := range opts.Signals {
		if s.Name == "" || s.Observe == nil || s.Resource == "" {
			return nil, fmt.Errorf("eviction: signal %q: Name, Resource and Observe are required", s.Name)
		}
		if slices.Contains(names, s.Name) {
			return nil, fmt.Errorf("eviction: signal %q given twice", s.Name)
		}
		names = append(names, s.Name)
	}
	thresholds, err := ParseThresholds(opts.Thresholds, names...)
	if err != nil {
		return nil, fmt.Errorf("eviction: thresholds: %w", err)
	}
	if opts.PressureTransitionPeriod == 0 {
		opts.PressureTransitionPeriod = DefaultPressureTransitionPeriod
	}
	if opts.MonitoringInterval <= 0 {
		opts.MonitoringInterval = DefaultMonitoringInterval
	}
	if opts.MemoryCgroupDir == "" {
		opts.MemoryCgroupDir = DefaultMemoryCgroupDir
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	rec := opts.Recorder
	if rec == nil {
		rec = &record.FakeRecorder{}
	}
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	if opts.Pressure == nil {
		opts.Pressure = &Pressure{}
	}
	return &Manager{
		Pressure: opts.Pressure,
		opts:     opts,
		clock:    opts.Clock,
		recorder: rec,
		// The kubelet's node reference: the UID is the node's name.
		nodeRef:          &v1.ObjectReference{Kind: "Node", Name: opts.NodeName, UID: types.UID(opts.NodeName)},
		metrics:          met,
		config:           thresholds,
		condLastObserved: map[v1.NodeConditionType]time.Time{},
		trigger:          make(chan struct{}, 1),
	}, nil
}

// Thresholds returns the parsed thresholds (before the containerfs ones
// derived from the disk layout). The caller owns the slice.
func (m *Manager) Thresholds() []Threshold { return slices.Clone(m.config) }

// Run watches the signals every MonitoringInterval (sooner when a memcg
// threshold fires) and acts on them until ctx is done; it then returns nil.
// After evicting a pod it waits for the pod's cleanup before the next pass.
// Call Run once per Manager.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	logger.Info("Eviction manager: starting control loop")
	defer m.memcg.closeAll()
	for {
		if ctx.Err() != nil {
			return nil
		}
		evicted, err := m.synchronize(ctx)
		if err == nil && len(evicted) > 0 {
			logger.Info("Eviction manager: pods evicted, waiting for pod to be cleaned up", "pods", klog.KObjSlice(evicted))
			m.waitForCleanup(ctx, evicted)
			continue
		}
		if err != nil {
			logger.Error(err, "Eviction manager: failed to synchronize")
		}
		t := m.clock.NewTimer(m.opts.Align.Wait(m.opts.MonitoringInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		case <-m.trigger:
			t.Stop()
			logger.V(2).Info("Eviction manager: memory threshold crossed, synchronizing early")
		}
	}
}

// waitForCleanup waits until every pod is cleaned up, podCleanupTimeout at
// most (one MonitoringInterval without PodCleanedUp).
func (m *Manager) waitForCleanup(ctx context.Context, pods []*v1.Pod) {
	logger := klog.FromContext(ctx)
	if m.opts.PodCleanedUp == nil {
		t := m.clock.NewTimer(m.opts.MonitoringInterval)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		return
	}
	timeout := m.clock.NewTimer(podCleanupTimeout)
	defer timeout.Stop()
	for {
		poll := m.clock.NewTimer(podCleanupPollFreq)
		select {
		case <-ctx.Done():
			poll.Stop()
			return
		case <-timeout.C():
			poll.Stop()
			logger.Info("Eviction manager: timed out waiting for pods to be cleaned up", "pods", klog.KObjSlice(pods))
			return
		case <-poll.C():
		}
		done := true
		for _, p := range pods {
			if !m.opts.PodCleanedUp(p.UID) {
				done = false
				break
			}
		}
		if done {
			logger.Info("Eviction manager: pods successfully cleaned up", "pods", klog.KObjSlice(pods))
			return
		}
	}
}

// resolveLayout learns the disk layout (once it is known for sure) and
// builds the signals and thresholds for it.
func (m *Manager) resolveLayout(ctx context.Context, summary *statsapi.Summary) error {
	if m.layoutFixed {
		return nil
	}
	var layout DiskLayout
	if m.opts.DiskLayout != nil {
		l, err := m.opts.DiskLayout(ctx)
		if err != nil {
			return fmt.Errorf("eviction manager: get disk layout: %w", err)
		}
		layout, m.layoutFixed = l, true
	} else {
		layout, m.layoutFixed = InferDiskLayout(summary)
	}
	if m.layoutBuilt && layout == m.layout {
		return nil
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Eviction manager: disk layout", "dedicatedImageFs", layout.DedicatedImageFs, "splitContainerFs", layout.SplitContainerFs, "final", m.layoutFixed)
	m.layout, m.layoutBuilt = layout, true

	m.signals = builtinSignals(layout, m.opts.PodsMemoryLimit, m.opts.DeleteUnusedContainers, m.opts.DeleteUnusedImages)
	for _, s := range m.opts.Signals {
		if i := slices.IndexFunc(m.signals, func(b Signal) bool { return b.Name == s.Name }); i >= 0 {
			m.signals[i] = s
		} else {
			m.signals = append(m.signals, s)
		}
	}
	thresholds, replaced := withContainerFs(m.config, layout)
	if replaced {
		logger.Info("Eviction manager: containerfs thresholds are derived from nodefs or imagefs by the disk layout; the configured ones are ignored")
	}
	m.thresholds = m.thresholds[:0]
	for _, t := range thresholds {
		i := slices.IndexFunc(m.signals, func(s Signal) bool { return s.Name == t.Signal })
		m.thresholds = append(m.thresholds, resolved{Threshold: t, sig: i})
	}
	// Thresholds are tracked by index: start over, and re-arm the memcg
	// notifiers for the new indexes on this pass.
	m.firstObserved = make([]time.Time, len(m.thresholds))
	m.met = nil
	m.lastObs = nil
	if m.memcg != nil {
		m.memcg.closeAll()
		m.memcg.last = time.Time{}
	}
	return nil
}

// observe reads every signal from summary.
func (m *Manager) observe(summary *statsapi.Summary) []observed {
	obs := make([]observed, len(m.signals))
	for i := range m.signals {
		o, ok := m.signals[i].Observe(summary)
		obs[i] = observed{Observation: o, ok: ok}
	}
	return obs
}

// thresholdsMet returns those of candidates (threshold indexes) whose
// signal is below the threshold; with enforceMinReclaim, below threshold
// plus minimum reclaim.
func (m *Manager) thresholdsMet(logger klog.Logger, candidates []int, obs []observed, enforceMinReclaim bool) []int {
	var out []int
	for _, i := range candidates {
		t := &m.thresholds[i]
		o := obs[t.sig]
		if !o.ok {
			logger.V(4).Info("Eviction manager: no observation found for eviction signal", "signal", t.Signal)
			continue
		}
		q := t.Value.Amount(o.Capacity)
		if enforceMinReclaim && t.MinReclaim != nil {
			q += t.MinReclaim.Amount(o.Capacity)
		}
		if q > o.Available {
			out = append(out, i)
		}
	}
	return out
}

func (m *Manager) allThresholds() []int {
	all := make([]int, len(m.thresholds))
	for i := range all {
		all[i] = i
	}
	return all
}

// conditionOrder sorts conditions: the kubelet's three first, then others
// by name.
func conditionOrder(a, b v1.NodeConditionType) int {
	rank := func(c v1.NodeConditionType) int {
		switch c {
		case v1.NodeMemoryPressure:
			return 0
		case v1.NodeDiskPressure:
			return 1
		case v1.NodePIDPressure:
			return 2
		}
		return 3
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra - rb
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// statsIndex returns a PodStatsFunc over summary's pods by UID.
func statsIndex(summary *statsapi.Summary) PodStatsFunc {
	byUID := make(map[types.UID]*statsapi.PodStats, len(summary.Pods))
	for i := range summary.Pods {
		byUID[types.UID(summary.Pods[i].PodRef.UID)] = &summary.Pods[i]
	}
	return func(pod *v1.Pod) (*statsapi.PodStats, bool) {
		s, ok := byUID[pod.UID]
		return s, ok
	}
}

// synchronize is one pass of the kubelet's control loop. It returns the
// pods it evicted.
func (m *Manager) synchronize(ctx context.Context) ([]*v1.Pod, error) {
	logger := klog.FromContext(ctx)
	localStorage := !m.opts.NoLocalStorageCapacityIsolation
	if len(m.config) == 0 && !localStorage {
		return nil, nil
	}
	activePods := m.opts.ActivePods()
	summary, err := m.opts.Summary(ctx)
	if err == nil && summary == nil {
		err = errors.New("no summary")
	}
	if err != nil {
		logger.Error(err, "Eviction manager: failed to get summary stats")
		return nil, nil
	}
	if err := m.resolveLayout(ctx, summary); err != nil {
		return nil, err
	}
	if m.opts.KernelMemcgNotification {
		m.refreshMemcg(ctx, summary)
	}

	obs := m.observe(summary)
	stats := statsIndex(summary)

	// Thresholds met now, ignoring grace periods, plus those met before
	// whose minimum reclaim is not yet achieved.
	met := m.thresholdsMet(logger, m.allThresholds(), obs, false)
	if len(m.met) > 0 {
		for _, i := range m.thresholdsMet(logger, m.met, obs, true) {
			if !slices.Contains(met, i) {
				met = append(met, i)
			}
		}
	}

	now := m.clock.Now()
	firstObserved := make([]time.Time, len(m.thresholds))
	for _, i := range met {
		if at := m.firstObserved[i]; !at.IsZero() {
			firstObserved[i] = at
		} else {
			firstObserved[i] = now
		}
	}

	// Conditions: those of the thresholds met now, and those met within
	// the transition period.
	for _, i := range met {
		if c := m.signals[m.thresholds[i].sig].Condition; c != "" {
			m.condLastObserved[c] = now
		}
	}
	var conditions []v1.NodeConditionType
	for c, at := range m.condLastObserved {
		if now.Sub(at) < m.opts.PressureTransitionPeriod {
			conditions = append(conditions, c)
		} else {
			delete(m.condLastObserved, c)
		}
	}
	slices.SortFunc(conditions, conditionOrder)

	// Thresholds whose grace period has passed.
	var graceMet []int
	for i, at := range firstObserved {
		if at.IsZero() {
			continue
		}
		if d := now.Sub(at); d < m.thresholds[i].GracePeriod {
			logger.V(2).Info("Eviction manager: eviction criteria not yet met", "threshold", m.thresholds[i].Threshold.String(), "duration", d)
			continue
		}
		graceMet = append(graceMet, i)
	}

	m.set(conditions)
	m.firstObserved = firstObserved
	m.met = graceMet

	// Act only on thresholds whose stats were updated since the last pass.
	var actionable []int
	for _, i := range graceMet {
		sig := m.thresholds[i].sig
		o := obs[sig]
		if !o.ok {
			continue
		}
		if m.lastObs == nil || !m.lastObs[sig].ok || o.Time.IsZero() || o.Time.After(m.lastObs[sig].Time.Time) {
			actionable = append(actionable, i)
		}
	}
	m.lastObs = obs

	if localStorage {
		if evicted := m.localStorageEviction(ctx, activePods, stats); len(evicted) > 0 {
			return evicted, nil
		}
	}
	if len(actionable) == 0 {
		logger.V(3).Info("Eviction manager: no resources are starved")
		return nil, nil
	}

	// Memory first.
	slices.SortStableFunc(actionable, func(a, b int) int {
		return cmpFirst(isMemorySignal(m.thresholds[a].Signal), isMemorySignal(m.thresholds[b].Signal))
	})
	target := &m.thresholds[actionable[0]]
	sig := &m.signals[target.sig]
	logger.Info("Eviction manager: attempting to reclaim", "resourceName", sig.Resource)
	m.recorder.Eventf(m.nodeRef, v1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", sig.Resource)

	if m.reclaimNodeLevel(ctx, sig) {
		logger.Info("Eviction manager: able to reduce resource pressure without evicting pods.", "resourceName", sig.Resource)
		return nil, nil
	}
	logger.Info("Eviction manager: must evict pod(s) to reclaim", "resourceName", sig.Resource)
	if sig.Rank == nil {
		logger.Error(nil, "Eviction manager: no ranking function for signal", "threshold", sig.Name)
		return nil, nil
	}
	if len(activePods) == 0 {
		logger.Error(nil, "Eviction manager: eviction thresholds have been met, but no pods are active to evict")
		return nil, nil
	}
	pods := slices.Clone(activePods)
	sig.Rank(pods, stats)
	logger.Info("Eviction manager: pods ranked for eviction", "pods", klog.KObjSlice(pods))

	for _, i := range actionable {
		s := m.thresholds[i].sig
		if t := obs[s].Time; !t.IsZero() {
			m.metrics.statsAge.WithLabelValues(m.signals[s].Name).Observe(m.clock.Since(t.Time).Seconds())
		}
	}

	// At most one pod per pass.
	for _, pod := range pods {
		grace := int64(immediateGracePeriodSeconds)
		if !target.Hard() {
			grace = m.opts.MaxPodGracePeriodSeconds
			if tgps := pod.Spec.TerminationGracePeriodSeconds; tgps != nil {
				grace = min(grace, *tgps)
			}
		}
		message, annotations := m.evictionMessage(sig.Resource, pod, stats, actionable, obs)
		condition := &v1.PodCondition{
			Type:    v1.DisruptionTarget,
			Status:  v1.ConditionTrue,
			Reason:  v1.PodReasonTerminationByKubelet,
			Message: message,
		}
		if m.evictPod(ctx, pod, grace, message, annotations, condition) {
			m.metrics.evictions.WithLabelValues(sig.Name).Inc()
			return []*v1.Pod{pod}, nil
		}
	}
	logger.Info("Eviction manager: unable to evict any pods from the node")
	return nil, nil
}

func isMemorySignal(name string) bool {
	return name == SignalMemoryAvailable || name == SignalAllocatableMemoryAvailable
}

// reclaimNodeLevel runs the signal's node-level reclaim and reports whether
// fresh stats then show every threshold clear, minimum reclaim included.
func (m *Manager) reclaimNodeLevel(ctx context.Context, sig *Signal) bool {
	if len(sig.Reclaim) == 0 {
		return false
	}
	logger := klog.FromContext(ctx)
	for _, reclaim := range sig.Reclaim {
		if err := reclaim(ctx); err != nil {
			logger.Info("Eviction manager: unexpected error when attempting to reduce resource pressure", "resourceName", sig.Resource, "err", err)
		}
	}
	summary, err := m.opts.Summary(ctx)
	if err == nil && summary == nil {
		err = errors.New("no summary")
	}
	if err != nil {
		logger.Error(err, "Eviction manager: failed to get summary stats after resource reclaim")
		return false
	}
	return len(m.thresholdsMet(logger, m.allThresholds(), m.observe(summary), true)) == 0
}

// evictPod evicts pod unless it is critical: an Evicted event, then KillPod
// with a status that says why. It reports whether the eviction was
// attempted; a KillPod error is logged, as the kubelet, and still counts.
func (m *Manager) evictPod(ctx context.Context, pod *v1.Pod, grace int64, message string, annotations map[string]string, condition *v1.PodCondition) bool {
	logger := klog.FromContext(ctx)
	if IsCriticalPod(pod) {
		logger.Error(nil, "Eviction manager: cannot evict a critical pod", "pod", klog.KObj(pod))
		return false
	}
	m.recorder.AnnotatedEventf(pod, annotations, v1.EventTypeWarning, Reason, "%s", message)
	logger.V(3).Info("Evicting pod", "pod", klog.KObj(pod), "podUID", pod.UID, "message", message)
	now := metav1.NewTime(m.clock.Now())
	err := m.opts.KillPod(ctx, pod, &grace, func(status *v1.PodStatus) {
		status.Phase = v1.PodFailed
		status.Reason = Reason
		status.Message = message
		if condition != nil {
			c := *condition
			c.ObservedGeneration = pod.Generation
			setPodCondition(status, c, now)
		}
	})
	if err != nil {
		logger.Error(err, "Eviction manager: pod failed to evict", "pod", klog.KObj(pod))
	} else {
		logger.Info("Eviction manager: pod is evicted successfully", "pod", klog.KObj(pod))
	}
	return true
}

// setPodCondition adds c to status or replaces the condition of its type,
// keeping the old transition time when the status did not change.
func setPodCondition(status *v1.PodStatus, c v1.PodCondition, now metav1.Time) {
	c.LastTransitionTime = now
	for i := range status.Conditions {
		if status.Conditions[i].Type == c.Type {
			if status.Conditions[i].Status == c.Status {
				c.LastTransitionTime = status.Conditions[i].LastTransitionTime
			}
			status.Conditions[i] = c
			return
		}
	}
	status.Conditions = append(status.Conditions, c)
}
