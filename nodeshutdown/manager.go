package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// Reasons and messages, as the kubelet's graceful node shutdown sets them.
const (
	// ReasonNotAdmitted is the reason of a pod rejected at admission while
	// the node shuts down.
	ReasonNotAdmitted = "NodeShutdown"
	// MessageNotAdmitted is the message of a pod rejected at admission
	// while the node shuts down.
	MessageNotAdmitted = "Pod was rejected as the node is shutting down."
	// ReasonTerminated is the status reason of a pod the manager killed.
	ReasonTerminated = "Terminated"
	// MessageTerminated is the status message (and the DisruptionTarget
	// condition's) of a pod the manager killed.
	MessageTerminated = "Pod was terminated in response to imminent node shutdown."
	// EventReason is the reason of the events on the Node.
	EventReason = "NodeShutdown"
	// StateFileName is the kubelet's name of the file, in its root
	// directory, that records when the last shutdown started and ended.
	StateFileName = "graceful_node_shutdown_state"
)

// Priorities of the two groups shutdownGracePeriod and
// shutdownGracePeriodCriticalPods make, as the kubelet's: pods below
// system-cluster-critical (2000000000) are regular pods, the others
// critical.
const (
	regularPriority  = 0
	criticalPriority = 2000000000
)

// ErrShuttingDown is what ShutdownStatus returns while the node shuts
// down; its text is the node's Ready message then.
var ErrShuttingDown = errors.New("node is shutting down")

// ActivePodsFunc returns the pods admitted to the node and not yet
// terminated. The manager never modifies them.
type ActivePodsFunc func() []*v1.Pod

// KillPodFunc stops pod's containers with gracePeriodOverride (seconds),
// applies statusFn to the pod's final status before it is written, never
// restarts the pod, and returns once the pod is stopped or the kill failed
// or timed out (pods.Controller.KillPod). It is called concurrently for the
// pods of one priority group.
type KillPodFunc func(ctx context.Context, pod *v1.Pod, gracePeriodOverride *int64, statusFn func(*v1.PodStatus)) error

// Options configures a Manager. ActivePods and KillPod are required when a
// grace period is set; the rest is optional.
type Options struct {
	// GracePeriod is shutdownGracePeriod: how long the node waits for its
	// pods in all. GracePeriodCriticalPods (shutdownGracePeriodCriticalPods)
	// of it are reserved for critical pods, which are killed after the
	// others. Both are ignored when GracePeriodByPodPriority is set.
	GracePeriod             time.Duration
	GracePeriodCriticalPods time.Duration
	// GracePeriodByPodPriority (shutdownGracePeriodByPodPriority) gives a
	// grace period per priority range: a pod belongs to the range of the
	// highest Priority not above its own (the lowest range when below all).
	// Ranges are killed from the lowest priority up, one after the other.
	GracePeriodByPodPriority []kubeletconfig.ShutdownGracePeriodByPodPriority

	// Sources signal the shutdown. They are watched only when a grace
	// period is set. None is a valid choice: the shutdown then comes only
	// from Handle. No signal is caught unless a SignalSource is given (a
	// stray SIGPWR must not kill the node's pods unasked).
	Sources []Source
	// ActivePods lists the pods to kill.
	ActivePods ActivePodsFunc
	// KillPod kills one pod.
	KillPod KillPodFunc
	// Gate receives whether the node shuts down, for readers that cannot
	// depend on the Manager (admission and the Ready condition: the pod
	// loop and the status reporter the Manager acts through read it). nil:
	// a Gate of the Manager's own.
	Gate *Gate
	// SyncNodeStatus, when set, is called (without waiting for it) as soon
	// as the shutdown starts or is cancelled, so the Node's Ready condition
	// tells without waiting for the next status update.
	SyncNodeStatus func()

	// NodeName names the Node the events are about.
	NodeName string
	// NodeRef, when set, returns the reference of the Node's events at
	// the time of each event (agent.NodeEventRef: with the Node's UID once
	// known); default apiVersion v1, kind Node, named NodeName.
	NodeRef func() *v1.ObjectReference
	// Recorder receives the NodeShutdown events; none without one.
	Recorder record.EventRecorder
	// StateFile, when set, records the start and end of the last shutdown
	// (the kubelet's <root-dir>/graceful_node_shutdown_state); the metrics
	// are restored from it when Run starts.
	StateFile string
	// Clock times the groups; default the real clock.
	Clock clock.Clock
	// Registerer receives kubelet_graceful_shutdown_start_time_seconds and
	// kubelet_graceful_shutdown_end_time_seconds; none without one.
	Registerer prometheus.Registerer
	// RetryPeriod is how long the manager waits before watching a Source
	// again once its Watch failed; it doubles up to a minute. Default 1 s
	// (the kubelet's D-Bus reconnect period).
	RetryPeriod time.Duration
}

// Manager is the kubelet's graceful node shutdown: when a Source signals
// that the node shuts down it reports the node NotReady (ShutdownStatus),
// rejects new pods (Admit) and kills the active pods by priority group,
// each within its group's grace period, with the kubelet's final status.
// Its methods are safe for concurrent use.
type Manager struct {
	opts    Options
	periods []kubeletconfig.ShutdownGracePeriodByPodPriority
	metrics *metrics

	// Gate holds whether the node shuts down; its ShutdownStatus and
	// Admit are the Manager's.
	*Gate
	// process serializes shutdowns: a second signal waits for the first.
	process sync.Mutex
}

// New validates opts, applies defaults and returns a Manager. It does no
// I/O. A Manager without any grace period is disabled: it admits every pod
// and its Run only waits for ctx.
func New(opts Options) (*Manager, error) {
	periods, err := GracePeriods(opts.GracePeriod, opts.GracePeriodCriticalPods, opts.GracePeriodByPodPriority)
	if err != nil {
		return nil, err
	}
	if len(periods) > 0 && (opts.ActivePods == nil || opts.KillPod == nil) {
		return nil, errors.New("node shutdown: ActivePods and KillPod are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.RetryPeriod <= 0 {
		opts.RetryPeriod = time.Second
	}
	if opts.Gate == nil {
		opts.Gate = &Gate{}
	}
	m := &Manager{Gate: opts.Gate, opts: opts, periods: periods}
	if m.metrics, err = newMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	return m, nil
}

// GracePeriods returns the priority groups of a configuration, lowest
// priority first, as New makes them: byPriority when set, else the two
// groups of total (shutdownGracePeriod) and critical
// (shutdownGracePeriodCriticalPods), else none (graceful node shutdown is
// disabled). It fails on a negative grace period or a critical share larger
// than the total.
func GracePeriods(total, critical time.Duration, byPriority []kubeletconfig.ShutdownGracePeriodByPodPriority) ([]kubeletconfig.ShutdownGracePeriodByPodPriority, error) {
	periods := slices.Clone(byPriority)
	if len(periods) == 0 {
		var err error
		if periods, err = twoGroups(total, critical); err != nil {
			return nil, err
		}
	}
	for _, p := range periods {
		if p.ShutdownGracePeriodSeconds < 0 {
			return nil, fmt.Errorf("node shutdown: priority %d has a negative grace period %ds", p.Priority, p.ShutdownGracePeriodSeconds)
		}
	}
	sort.SliceStable(periods, func(i, j int) bool { return periods[i].Priority < periods[j].Priority })
	return periods, nil
}

// PeriodRequested is the sum of the groups' grace periods: how long the
// node's shutdown must be delayed for all of them.
func PeriodRequested(periods []kubeletconfig.ShutdownGracePeriodByPodPriority) time.Duration {
	var sum int64
	for _, p := range periods {
		sum += p.ShutdownGracePeriodSeconds
	}
	return time.Duration(sum) * time.Second
}

// twoGroups turns shutdownGracePeriod and shutdownGracePeriodCriticalPods
// into two priority groups, as the kubelet does: none when the grace period
// is 0.
func twoGroups(total, critical time.Duration) ([]kubeletconfig.ShutdownGracePeriodByPodPriority, error) {
	if total == 0 {
		return nil, nil
	}
	if total < 0 || critical < 0 || critical > total {
		return nil, fmt.Errorf("node shutdown: shutdownGracePeriodCriticalPods (%v) must be between 0 and shutdownGracePeriod (%v)", critical, total)
	}
	return []kubeletconfig.ShutdownGracePeriodByPodPriority{
		{Priority: regularPriority, ShutdownGracePeriodSeconds: int64((total - critical) / time.Second)},
		{Priority: criticalPriority, ShutdownGracePeriodSeconds: int64(critical / time.Second)},
	}, nil
}

// Enabled reports whether a grace period is set: only then does the
// Manager watch its Sources.
func (m *Manager) Enabled() bool { return len(m.periods) > 0 }

// Periods returns the priority groups, lowest priority first. The slice is
// the caller's.
func (m *Manager) Periods() []kubeletconfig.ShutdownGracePeriodByPodPriority {
	return slices.Clone(m.periods)
}

// PeriodRequested is the sum of the groups' grace periods (see the
// function PeriodRequested).
func (m *Manager) PeriodRequested() time.Duration { return PeriodRequested(m.periods) }

// Run watches every Source until ctx is done, restarting a Watch that
// failed after RetryPeriod (doubling up to a minute), and handles their
// signals, and returns nil when ctx is done. A disabled Manager, or one
// without a Source (a shutdown is then seen only through Handle), has
// nothing to watch: its Run returns nil at once, so it holds no
// goroutine.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if !m.Enabled() {
		return nil
	}
	m.restoreMetrics(logger)
	if len(m.opts.Sources) == 0 {
		logger.Info("Node shutdown manager has no source: a node shutdown is seen only when Handle is called", "shutdownGracePeriodByPodPriority", m.periods)
		return nil
	}
	logger.Info("Node shutdown manager watching for node shutdown", "shutdownGracePeriodByPodPriority", m.periods, "sources", len(m.opts.Sources))
	var wg sync.WaitGroup
	for _, src := range m.opts.Sources {
		wg.Go(func() { m.watch(ctx, src) })
	}
	wg.Wait()
	return nil
}

func (m *Manager) watch(ctx context.Context, src Source) {
	logger := klog.FromContext(ctx)
	wait := m.opts.RetryPeriod
	for {
		started := m.opts.Clock.Now()
		err := src.Watch(ctx, m.Handle)
		if ctx.Err() != nil {
			return
		}
		if m.opts.Clock.Since(started) > time.Minute {
			wait = m.opts.RetryPeriod
		}
		logger.Error(err, "Unable to watch the node for shutdown events; retrying", "source", fmt.Sprint(src), "after", wait)
		t := m.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		wait = min(2*wait, time.Minute)
	}
}

// Handle is what a Source calls for each signal. shuttingDown true: the node
// reports the shutdown, rejects new pods and Handle kills the active pods
// group by group; it returns when they are stopped or the groups' grace
// periods are up, or ctx is done — the Source may then let the shutdown
// proceed. shuttingDown false: a shutdown was cancelled; the node is Ready
// and admits pods again. Calls are serialized.
func (m *Manager) Handle(ctx context.Context, shuttingDown bool) {
	logger := klog.FromContext(ctx)
	if !m.Enabled() {
		return
	}
	m.process.Lock()
	defer m.process.Unlock()
	m.set(shuttingDown)
	what := "Shutdown manager detected shutdown cancellation"
	if shuttingDown {
		what = "Shutdown manager detected shutdown event"
	}
	logger.Info(what)
	if m.opts.Recorder != nil {
		m.opts.Recorder.Event(m.nodeRef(), v1.EventTypeNormal, EventReason, what)
	}
	if m.opts.SyncNodeStatus != nil {
		go m.opts.SyncNodeStatus()
	}
	if !shuttingDown {
		return
	}
	start := m.opts.Clock.Now()
	m.recordState(logger, start, time.Time{})
	m.killPods(ctx, m.opts.ActivePods())
	end := m.opts.Clock.Now()
	m.recordState(logger, start, end)
	logger.Info("Shutdown manager completed processing shutdown event, node will shutdown shortly", "took", end.Sub(start))
}

func (m *Manager) nodeRef() *v1.ObjectReference {
	if m.opts.NodeRef != nil {
		return m.opts.NodeRef()
	}
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: m.opts.NodeName}
}

// group is one priority range and its pods.
type group struct {
	kubeletconfig.ShutdownGracePeriodByPodPriority
	pods []*v1.Pod
}

// groupByPriority puts each pod in the range of the highest Priority not
// above its own, or the lowest range.
func groupByPriority(periods []kubeletconfig.ShutdownGracePeriodByPodPriority, pods []*v1.Pod) []group {
	groups := make([]group, len(periods))
	for i, p := range periods {
		groups[i].ShutdownGracePeriodByPodPriority = p
	}
	for _, pod := range pods {
		var prio int32
		if pod.Spec.Priority != nil {
			prio = *pod.Spec.Priority
		}
		// The first range above the pod's priority; the pod's is the one
		// before it.
		i := sort.Search(len(groups), func(i int) bool { return groups[i].Priority > prio })
		i = max(i-1, 0)
		groups[i].pods = append(groups[i].pods, pod)
	}
	return groups
}

// killPods kills the groups one after the other, lowest priority first:
// each group's pods at once with the group's grace period (or the pod's
// own when shorter), moving on when they are stopped or the group's grace
// period is up.
func (m *Manager) killPods(ctx context.Context, active []*v1.Pod) {
	logger := klog.FromContext(ctx)
	for _, g := range groupByPriority(m.periods, active) {
		if ctx.Err() != nil {
			return
		}
		if len(g.pods) == 0 {
			continue
		}
		var wg sync.WaitGroup
		for _, pod := range g.pods {
			grace := g.ShutdownGracePeriodSeconds
			if tgps := pod.Spec.TerminationGracePeriodSeconds; tgps != nil && *tgps < grace {
				grace = *tgps
			}
			wg.Go(func() {
				logger.V(1).Info("Shutdown manager killing pod with gracePeriod", "pod", klog.KObj(pod), "gracePeriod", grace)
				if err := m.opts.KillPod(ctx, pod, &grace, m.statusFn(pod)); err != nil {
					logger.Info("Shutdown manager failed killing pod", "pod", klog.KObj(pod), "err", err)
					return
				}
				logger.V(1).Info("Shutdown manager finished killing pod", "pod", klog.KObj(pod))
			})
		}
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		t := m.opts.Clock.NewTimer(time.Duration(g.ShutdownGracePeriodSeconds) * time.Second)
		select {
		case <-done:
			logger.V(1).Info("Done waiting for all pods in group to terminate", "gracePeriod", g.ShutdownGracePeriodSeconds, "priority", g.Priority)
		case <-t.C():
			logger.V(1).Info("Shutdown manager pod killing time out", "gracePeriod", g.ShutdownGracePeriodSeconds, "priority", g.Priority)
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// statusFn sets a killed pod's final status as the kubelet's: phase Failed
// (unless it Succeeded), reason Terminated, the shutdown message and a
// DisruptionTarget condition with reason TerminationByKubelet.
func (m *Manager) statusFn(pod *v1.Pod) func(*v1.PodStatus) {
	now := metav1.NewTime(m.opts.Clock.Now())
	return func(st *v1.PodStatus) {
		if st.Phase != v1.PodSucceeded {
			st.Phase = v1.PodFailed
		}
		st.Reason = ReasonTerminated
		st.Message = MessageTerminated
		c := v1.PodCondition{
			Type:               v1.DisruptionTarget,
			ObservedGeneration: pod.Generation,
			Status:             v1.ConditionTrue,
			Reason:             v1.PodReasonTerminationByKubelet,
			Message:            MessageTerminated,
			LastTransitionTime: now,
		}
		for i := range st.Conditions {
			if st.Conditions[i].Type == c.Type {
				if st.Conditions[i].Status == c.Status {
					c.LastTransitionTime = st.Conditions[i].LastTransitionTime
				}
				st.Conditions[i] = c
				return
			}
		}
		st.Conditions = append(st.Conditions, c)
	}
}
