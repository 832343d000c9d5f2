package podstatus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/timers"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/ticks"
)

// defaultSyncPeriod is how often the Manager checks every cached status
// against the API server, the kubelet status manager's syncPeriod.
const defaultSyncPeriod = 10 * time.Second

// defaultPendingWriteDelay is how long the first status of a pod that is
// still Pending waits before it is written, by default.
const defaultPendingWriteDelay = time.Second

// defaultWriters is how many pods' statuses the Manager writes at once by
// default. nodebench's 100-pod burst on fakecri (docs/performance.md)
// measured 8 and 32 in alternating runs: with 8, a Running status waited
// 100-260 ms (p50) for a free writer while the API server answered each
// PATCH in ~40 ms; with 32 the agent's internal p99 fell from ~990 to
// 190-480 ms and bound → Running p99 from ~710 to 300-470 ms, each PATCH
// taking ~100 ms at the API server instead.
const defaultWriters = 32

// PodGetter gives the pods as the agent's sources last saw them; the
// returned pods are read-only and the methods must not block.
// podsource's *Config is one.
type PodGetter interface {
	// GetPodByUID returns the latest version of a pod by UID, and whether
	// there is one.
	GetPodByUID(uid types.UID) (*v1.Pod, bool)
	// MirrorPodFor returns the mirror pod (the API object of a static pod,
	// see podsource.IsMirrorPod) with the namespace and name of staticPod,
	// whatever its config hash, and whether there is one.
	MirrorPodFor(staticPod *v1.Pod) (*v1.Pod, bool)
}

// Options configures a Manager.
type Options struct {
	// Client writes pod statuses and deletes finished pods. nil keeps the
	// statuses only in the Manager, for a node without an API server (a
	// standalone agent): GetPodStatus serves them (say, to the node API's
	// /pods) and Run writes nothing.
	Client kubernetes.Interface
	// Clock sets condition transition times and start times and paces the
	// periodic sync; default clock.RealClock{}.
	Clock clock.Clock
	// Align moves the periodic sync's rounds to the node's shared ticks
	// (package ticks; nil waits the sync period exactly). Held-back first
	// statuses keep their own deadlines.
	Align ticks.Align
	// Registerer receives the manager's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Pods, when set, gives the pods as the agent's sources see them. The
	// periodic sync then rewrites a status someone else changed on the API
	// server (for a static pod: on its mirror pod), and deletes a finished
	// pod whose deletion came after its last status write; a static pod's
	// status waits, without a request, until the sources show its current
	// mirror pod, and the status of a pod the sources no longer show (its
	// API object is gone, so the Node authorizer would refuse even reading
	// it) is not written, without a request, until RemovePod forgets it.
	// Without it, that happens on the next SetPodStatus or TerminatePod, a
	// static pod's status is written after a GET of its mirror pod, and a
	// removed pod's status is read from the API server until RemovePod.
	Pods PodGetter
	// SyncPeriod is the period of the full sync; default 10 s.
	SyncPeriod time.Duration
	// Writers is how many pods' statuses are written at once (default
	// 32); one pod's writes never overlap. A status goes to
	// the first free writer as soon as it is set, whatever the others are
	// writing. The kubelet writes one at a time, so a burst of pods waits
	// for each round trip in turn; the client's rate limit still bounds the
	// request rate.
	Writers int
	// PendingWriteDelay is how long the first status of a pod that is still
	// Pending (and not being deleted) may wait for a newer one before it is
	// written (default 1 s; negative: no wait). A pod
	// that starts within it is written once, carrying Running, instead of
	// once as ContainerCreating and again as Running; a pod that takes
	// longer shows its Pending status that much later than the kubelet's.
	PendingWriteDelay time.Duration
	// Logger logs what the methods without a context do; default klog's.
	Logger logr.Logger
}

// Manager is the source of truth of the node's pod statuses, the kubelet's
// status manager: the agent sets a pod's status after every sync, the
// Manager keeps it, versioned, and writes it to the API server from Run
// (without a Client, it only keeps it).
//
// Writes are strategic merge patches of the status subresource with the
// pod's UID as precondition (a pod deleted and recreated under the same
// name is left alone and its status forgotten), sent only when the status
// differs from the API server's. The patch carries only the kubelet's
// condition types; conditions others own are left as they are, as are the
// resource claim statuses. A pod does not turn Succeeded or Failed on the
// API server before TerminatePod says its containers stopped, and a
// terminal phase never changes again. Once a pod being deleted is terminal
// and finished, the Manager deletes its API object with grace period 0 and
// the UID precondition, as the kubelet does, and forgets its status.
//
// A status that failed to be written is retried with the next write of
// any pod, and at least every SyncPeriod. Statuses of several pods are
// written concurrently (Options.Writers). All methods are safe for
// concurrent use; only Run talks to the API server.
type Manager struct {
	client     kubernetes.Interface
	clock      clock.Clock
	pods       PodGetter
	syncPeriod time.Duration
	align      ticks.Align
	writers    int
	firstDelay time.Duration
	logger     logr.Logger
	metrics    *metrics

	mu       sync.RWMutex
	statuses map[types.UID]*versionedStatus
	// deleted holds the pods this Manager deleted from the API server
	// until RemovePod: no status of theirs is kept, there is no object
	// left to write it to.
	deleted map[types.UID]struct{}
	// signal has a pending write when it holds a value.
	signal chan struct{}
	// seen is, per pod, when the agent first saw it (PodSeen), until its
	// first status showing every container started is written.
	seen map[types.UID]time.Time

	// writeMu guards synced, written and writtenFrom, which only Run and
	// the writers it waits for touch.
	writeMu sync.Mutex
	// synced is, per pod UID, the version last written.
	synced map[types.UID]uint64
	// written is, per pod UID, the pod as the API server answered the last
	// patch (or as read when nothing needed writing), and writtenFrom the
	// resourceVersion that patch was computed from. See currentPod.
	written     map[types.UID]*v1.Pod
	writtenFrom map[types.UID]string
	// force is, per pod UID, a write the periodic sync asked for although
	// the pod's version is written (its finished pod is to be deleted).
	force   map[types.UID]bool
	running atomic.Bool
}

// versionedStatus is one pod's cached status. The Manager replaces entries,
// never modifies one in place, so a snapshot may be read without the lock.
type versionedStatus struct {
	status    v1.PodStatus
	version   uint64
	name      string
	namespace string
	// at is when the oldest unwritten change was set, zero when written.
	at time.Time
	// finished: TerminatePod was called; the pod's containers stopped.
	finished bool
	// deleting: the pod had a deletion timestamp when the status was set.
	deleting bool
	// static pods write their status to their mirror pod, the API pod
	// whose mirror annotation is their config hash.
	static bool
	hash   string
}

// NewManager validates opts, applies defaults and registers the metrics
// when opts.Registerer is set. It makes no API calls.
func NewManager(opts Options) (*Manager, error) {
	switch {
	case opts.SyncPeriod < 0:
		return nil, fmt.Errorf("podstatus: SyncPeriod %v must not be negative", opts.SyncPeriod)
	case opts.SyncPeriod == 0:
		opts.SyncPeriod = defaultSyncPeriod
	}
	switch {
	case opts.Writers < 0:
		return nil, fmt.Errorf("podstatus: Writers %d must not be negative", opts.Writers)
	case opts.Writers == 0:
		opts.Writers = defaultWriters
	}
	switch {
	case opts.PendingWriteDelay == 0:
		opts.PendingWriteDelay = defaultPendingWriteDelay
	case opts.PendingWriteDelay < 0:
		opts.PendingWriteDelay = 0
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = klog.Background()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Manager{
		client:      opts.Client,
		clock:       opts.Clock,
		pods:        opts.Pods,
		syncPeriod:  opts.SyncPeriod,
		align:       opts.Align,
		writers:     opts.Writers,
		firstDelay:  opts.PendingWriteDelay,
		logger:      opts.Logger.WithName("podstatus"),
		metrics:     m,
		statuses:    make(map[types.UID]*versionedStatus),
		deleted:     make(map[types.UID]struct{}),
		seen:        make(map[types.UID]time.Time),
		signal:      make(chan struct{}, 1),
		synced:      make(map[types.UID]uint64),
		written:     make(map[types.UID]*v1.Pod),
		writtenFrom: make(map[types.UID]string),
		force:       make(map[types.UID]bool),
	}, nil
}

// GetPodStatus returns a copy of the pod's cached status (the caller owns
// it) and whether there is one. It does not block on the API server.
func (m *Manager) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.statuses[uid]
	if !ok {
		return v1.PodStatus{}, false
	}
	return *e.status.DeepCopy(), true
}

// SetPodStatus caches status as the pod's latest and queues its write; it
// returns at once. Neither argument is kept or modified. The Manager sets
// the condition transition times (kept while a condition's status stays),
// the start time (the first one stays), the observed generation, and
// rounds times to seconds as the API server stores them. A status equal to
// the cached one (for the kubelet's fields) is dropped, unless the pod is
// being deleted. A status that would move a container out of a terminated
// state its restart policy does not restart is refused and logged, and a
// terminal phase, once set, stays.
func (m *Manager) SetPodStatus(pod *v1.Pod, status v1.PodStatus) {
	if pod == nil {
		m.logger.Error(nil, "SetPodStatus called without a pod")
		return
	}
	status = *status.DeepCopy()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updateLocked(pod, status, pod.DeletionTimestamp != nil, false)
}

// TerminatePod marks the pod finished: its containers stopped and will not
// run again (the kubelet's SyncTerminatedPod). Call it after the last
// SetPodStatus of a pod that is terminal or being deleted. A container that
// is not terminated in the cached status is reported terminated with
// reason ContainerStatusUnknown and exit code 137, and a pod that is not
// Succeeded or Failed becomes Failed (static pods keep their phase). The
// status is then written even if unchanged; a pod with a deletion
// timestamp is deleted once the API server shows it terminal. Calling it
// again (say, when the pod's deletion comes after it finished) is allowed.
func (m *Manager) TerminatePod(pod *v1.Pod) {
	if pod == nil {
		m.logger.Error(nil, "TerminatePod called without a pod")
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	status := pod.Status.DeepCopy()
	if e, ok := m.statuses[pod.UID]; ok {
		status = e.status.DeepCopy()
	}

	unknown := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		Reason:   containerStatusUnknown,
		Message:  "The container could not be located when the pod was terminated",
		ExitCode: 137,
	}}
	// Once the pod initialized, a regular container without a final state
	// failed; before, it never ran.
	if hasPodInitialized(pod) {
		for i := range status.ContainerStatuses {
			if status.ContainerStatuses[i].State.Terminated == nil {
				status.ContainerStatuses[i].State = *unknown.DeepCopy()
			}
		}
	}
	// Init containers that attempted to start and have no final state
	// failed.
	for i := range startedInitContainers(status.InitContainerStatuses) {
		if status.InitContainerStatuses[i].State.Terminated == nil {
			status.InitContainerStatuses[i].State = *unknown.DeepCopy()
		}
	}
	if !podsource.IsStaticPod(pod) && !isTerminal(status.Phase) {
		m.logger.V(3).Info("Marking terminated pod as failed", "pod", klog.KObj(pod), "podUID", pod.UID, "oldPhase", status.Phase)
		status.Phase = v1.PodFailed
	}
	m.updateLocked(pod, *status, true, true)
}

// RemovePod forgets the pod's status: the pod is gone from every source.
// A write in progress may still complete. A pod the Manager deleted from
// the API server takes no status until RemovePod (its UID is kept until
// then, so call it for every pod its sources removed).
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.statuses, uid)
	delete(m.deleted, uid)
	delete(m.seen, uid)
}

// StartObserver is implemented by a status manager that measures pod
// starts from when the agent first saw a pod; *Manager does. The pod
// loop calls PodSeen once for every pod that had not started when it was
// first seen.
type StartObserver interface {
	PodSeen(uid types.UID, at time.Time)
}

var _ StartObserver = (*Manager)(nil)

// MirrorObserver is implemented by a status manager that waits for the
// mirror pod of a static pod before writing the static pod's status;
// *Manager does. The pod loop calls MirrorPodsChanged when the sources
// show a static pod's mirror pod appear or change (podsource.OpMirror).
type MirrorObserver interface {
	MirrorPodsChanged()
}

var _ MirrorObserver = (*Manager)(nil)

// MirrorPodsChanged writes now the statuses not written yet, among them
// those of static pods that waited for their mirror pod, instead of at the
// next periodic sync (up to SyncPeriod later). It does not block.
func (m *Manager) MirrorPodsChanged() {
	select {
	case m.signal <- struct{}{}:
	default:
	}
}

// PodSeen records when the agent first saw the pod uid, which had not
// started yet: when the API server accepts the first status write that
// shows every regular container started (AllContainersStarted), the time
// from then to the write's PATCH being sent goes into
// nodekit_pod_start_internal_duration_seconds, the agent's internal share
// of the pod's start (admission, volumes, runtime calls, status
// generation, waiting for a free writer; image pulls included), and the
// PATCH's round trip (the client's rate limiter and the API server) into
// nodekit_pod_start_status_patch_duration_seconds. RemovePod forgets it.
// It does not block.
func (m *Manager) PodSeen(uid types.UID, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.seen[uid]; !ok {
		m.seen[uid] = at
	}
}

// traceStart returns a trace for a status PATCH of the pod uid when its
// start is being measured (PodSeen, not yet written started), else nil:
// the PATCH that ends the start has its phases recorded, no other request
// pays for hooks.
func (m *Manager) traceStart(uid types.UID) *patchTrace {
	m.mu.RLock()
	_, ok := m.seen[uid]
	m.mu.RUnlock()
	if !ok {
		return nil
	}
	return &patchTrace{clock: m.clock}
}

// observeWritten records the start of a pod whose first status showing
// every container started the API server just accepted; its PATCH was sent
// at sent and answered at answered, traced by trace (nil: not traced).
func (m *Manager) observeWritten(uid types.UID, status *v1.PodStatus, sent, answered time.Time, trace *patchTrace) {
	if !AllContainersStarted(status) {
		return
	}
	m.mu.Lock()
	seen, ok := m.seen[uid]
	delete(m.seen, uid)
	m.mu.Unlock()
	if !ok {
		return
	}
	// The phases first: a reader that sees the start's round trip
	// recorded sees its phases too.
	if trace != nil {
		if phases, ok := trace.phases(sent, answered); ok {
			m.metrics.startPhases(phases)
		}
	}
	m.metrics.started(sent.Sub(seen), answered.Sub(sent))
}

// AllContainersStarted reports whether status shows the pod not finished
// and every regular container (at least one) running with a start time:
// the kubelet's definition of a started pod (hasPodStartedSLO).
func AllContainersStarted(status *v1.PodStatus) bool {
	if isTerminal(status.Phase) || len(status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() {
			return false
		}
	}
	return true
}

// updateLocked caches status for pod, the kubelet's updateStatusInternal.
// The caller holds mu and no longer uses status.
func (m *Manager) updateLocked(pod *v1.Pod, status v1.PodStatus, force, finished bool) {
	if _, gone := m.deleted[pod.UID]; gone {
		m.logger.V(5).Info("Ignoring the status of a pod already deleted from the API server", "pod", klog.KObj(pod), "podUID", pod.UID)
		return
	}
	now := m.clock.Now()
	status.ObservedGeneration = pod.Generation
	cached, isCached := m.statuses[pod.UID]
	old := &pod.Status
	var version uint64
	at := now
	if isCached {
		old = &cached.status
		version = cached.version
		finished = finished || cached.finished
		if !cached.at.IsZero() {
			at = cached.at
		}
	}
	logger := m.logger.WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	if err := checkContainerStateTransition(old, &status, &pod.Spec); err != nil {
		logger.Error(err, "Status update on pod aborted")
		return
	}
	for _, terminalPhase := range []v1.PodPhase{pod.Status.Phase, old.Phase} {
		if isTerminal(terminalPhase) && status.Phase != terminalPhase {
			logger.Error(nil, "Pod attempted illegal phase transition", "phase", terminalPhase, "newPhase", status.Phase)
			status.Phase = terminalPhase
			break
		}
	}
	stamp := metav1.NewTime(now).Rfc3339Copy()
	for _, t := range kubeletConditions {
		setTransitionTime(&status, old, t, stamp)
	}
	setTransitionTime(&status, old, v1.DisruptionTarget, stamp)
	switch {
	case old.StartTime != nil && !old.StartTime.IsZero():
		status.StartTime = old.StartTime.DeepCopy()
	case status.StartTime == nil || status.StartTime.IsZero():
		t := metav1.NewTime(now)
		status.StartTime = &t
	}
	if len(status.VolumeHealth) == 0 && len(old.VolumeHealth) > 0 {
		for i := range old.VolumeHealth {
			status.VolumeHealth = append(status.VolumeHealth, *old.VolumeHealth[i].DeepCopy())
		}
	}
	if old.ObservedGeneration > status.ObservedGeneration {
		status.ObservedGeneration = old.ObservedGeneration
	}
	normalize(pod, &status)
	m.metrics.countTerminations(old, &status)

	if isCached && statusEqual(&cached.status, &status) && !force {
		logger.V(5).Info("Ignoring same status for pod")
		return
	}
	m.statuses[pod.UID] = &versionedStatus{
		status:    status,
		version:   version + 1,
		name:      pod.Name,
		namespace: pod.Namespace,
		at:        at,
		finished:  finished,
		deleting:  pod.DeletionTimestamp != nil,
		static:    podsource.IsStaticPod(pod),
		hash:      pod.Annotations[podsource.ConfigHashAnnotationKey],
	}
	select {
	case m.signal <- struct{}{}:
	default:
	}
}

// Run writes cached statuses to the API server until ctx is done: at once
// when one changed, and every SyncPeriod all of them that differ from what
// was written or from what the API server shows (with Options.Pods). Without
// a Client it only waits. It returns nil when ctx is done; it may be called
// once at a time.
func (m *Manager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("podstatus: Manager is already running")
	}
	defer m.running.Store(false)
	logger := klog.FromContext(ctx)
	if m.client == nil {
		logger.Info("No API server: pod statuses are kept locally")
		<-ctx.Done()
		return nil
	}
	logger.V(2).Info("Starting to sync pod status with the API server", "syncPeriod", m.syncPeriod)
	queue := newWriteQueue(ctx, m.writers, m.write)
	defer queue.wait()
	timer := m.clock.NewTimer(m.align.Wait(m.syncPeriod))
	defer timer.Stop()
	// deferred fires when the earliest held-back first status is due.
	var deferred clock.Timer
	var deferredC <-chan time.Time
	defer func() {
		if deferred != nil {
			deferred.Stop()
		}
	}()
	// queueWrites queues the writes and arms deferred. A held-back status whose
	// time came since syncBatch read the clock is queued at once: a fake
	// clock's timer armed for a passed time fires only at its next step.
	queueWrites := func(all bool) {
		for {
			due := m.syncBatch(ctx, queue, all)
			if due.IsZero() {
				if deferred != nil {
					timers.Stop(deferred)
				}
				deferredC = nil
				return
			}
			var passed bool
			if deferred, passed = timers.Arm(m.clock, deferred, due, time.Millisecond); !passed {
				deferredC = deferred.C()
				return
			}
			all = false
		}
	}
	for {
		select {
		case <-ctx.Done():
			logger.V(2).Info("Stopped syncing pod status")
			return nil
		case <-m.signal:
			queueWrites(false)
		case <-deferredC:
			queueWrites(false)
		case <-timer.C():
			queueWrites(true)
			timer.Reset(m.align.Wait(m.syncPeriod))
		}
	}
}

// syncBatch queues for the writers the pods whose status is not written
// yet; with all, also those that differ from the API server's or belong to
// a pod to delete. It does not wait for the writes. A first status held
// back (see Options.PendingWriteDelay) is not queued; the earliest time one
// is due is returned, zero when none is held back.
func (m *Manager) syncBatch(ctx context.Context, queue *writeQueue, all bool) (due time.Time) {
	now := m.clock.Now()
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.mu.RLock()
	defer m.mu.RUnlock()
	if all {
		for uid := range m.synced {
			if _, ok := m.statuses[uid]; !ok {
				delete(m.synced, uid)
			}
		}
	}
	for uid, e := range m.statuses {
		written, ok := m.synced[uid]
		switch {
		case !ok && m.holdFirst(e, now):
			if at := e.at.Add(m.firstDelay); due.IsZero() || at.Before(due) {
				due = at
			}
		case !ok || written < e.version:
			queue.add(uid)
		case !all:
		case m.needsDeletion(uid, e):
			m.force[uid] = true
			queue.add(uid)
		case m.needsReconcile(ctx, uid, e):
			delete(m.synced, uid)
			queue.add(uid)
		}
	}
	return due
}

// writeQueue hands queued pods to up to limit writers, started when there is
// work and gone when there is none (an idle node keeps no writer
// goroutine): a status set while other pods are being written goes out as
// soon as a writer is free, not after the slowest write of a batch. One
// pod is never written by two writers at once; a pod queued while being
// written is written again after that write. Pods are taken in the order
// they were queued. Safe for concurrent use.
type writeQueue struct {
	ctx   context.Context
	limit int
	write func(context.Context, types.UID)

	mu sync.Mutex
	// order are the queued pods, oldest first; queued is its set.
	order  []types.UID
	queued map[types.UID]bool
	// busy are the pods being written, again those queued meanwhile.
	busy, again map[types.UID]bool
	active      int
	writers     sync.WaitGroup
}

func newWriteQueue(ctx context.Context, limit int, write func(context.Context, types.UID)) *writeQueue {
	return &writeQueue{ctx: ctx, limit: limit, write: write, queued: map[types.UID]bool{}, busy: map[types.UID]bool{}, again: map[types.UID]bool{}}
}

// add queues the pod and starts a writer if one is free. It does not
// block.
func (q *writeQueue) add(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.busy[uid]:
		q.again[uid] = true
		return
	case q.queued[uid]:
		return
	}
	q.queued[uid] = true
	q.order = append(q.order, uid)
	if q.active < q.limit {
		q.active++
		q.writers.Add(1)
		go q.run()
	}
}

// run writes queued pods until there are none left or ctx is done.
func (q *writeQueue) run() {
	defer q.writers.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) > 0 && q.ctx.Err() == nil {
		uid := q.order[0]
		q.order = q.order[1:]
		delete(q.queued, uid)
		q.busy[uid] = true
		q.mu.Unlock()
		q.write(q.ctx, uid)
		q.mu.Lock()
		delete(q.busy, uid)
		if q.again[uid] {
			delete(q.again, uid)
			q.queued[uid] = true
			q.order = append(q.order, uid)
		}
	}
	q.active--
}

// wait blocks until every writer has returned; after ctx is done, none
// starts another write.
func (q *writeQueue) wait() { q.writers.Wait() }

// write writes the pod's latest status if it still needs writing: it
// changed since the last write (and is not a first status held back), or
// the periodic sync asked for it. A pod removed since it was queued has no
// object left to write to (and the Node authorizer refuses reading it).
func (m *Manager) write(ctx context.Context, uid types.UID) {
	m.mu.RLock()
	e, tracked := m.statuses[uid]
	m.mu.RUnlock()
	m.writeMu.Lock()
	written, ok := m.synced[uid]
	force := m.force[uid]
	delete(m.force, uid)
	m.writeMu.Unlock()
	switch {
	case !tracked:
	case !ok && m.holdFirst(e, m.clock.Now()):
	case !ok || written < e.version || force:
		m.syncPod(ctx, uid, e)
	}
}

// holdFirst reports whether a pod's first status, never written, waits
// for a newer one: it is Pending, the pod is not being stopped, and it was
// set less than PendingWriteDelay ago.
func (m *Manager) holdFirst(e *versionedStatus, now time.Time) bool {
	return m.firstDelay > 0 && !e.finished && !e.deleting && e.status.Phase == v1.PodPending &&
		!e.at.IsZero() && now.Sub(e.at) < m.firstDelay
}

// needsDeletion reports whether the sources show the pod deleted and
// terminal while its status is finished.
func (m *Manager) needsDeletion(uid types.UID, e *versionedStatus) bool {
	if m.pods == nil {
		return false
	}
	pod, ok := m.pods.GetPodByUID(uid)
	return ok && canBeDeleted(pod, e)
}

// needsReconcile reports whether the API status the sources last saw
// differs from the cached one (for a static pod: its current mirror pod's):
// someone else wrote it.
func (m *Manager) needsReconcile(ctx context.Context, uid types.UID, e *versionedStatus) bool {
	pod, ok := m.sourcePod(uid, e)
	if !ok {
		return false
	}
	apiStatus := pod.Status.DeepCopy()
	normalize(pod, apiStatus)
	if statusEqual(apiStatus, &e.status) {
		return false
	}
	klog.FromContext(ctx).V(3).Info("Pod status is inconsistent with the cached status, writing it again",
		"pod", klog.KObj(pod), "podUID", uid)
	return true
}

// syncPod writes one status: GET the pod, merge, PATCH when it differs,
// DELETE when finished.
func (m *Manager) syncPod(ctx context.Context, uid types.UID, e *versionedStatus) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(e.namespace, e.name), "podUID", uid)
	pods := m.client.CoreV1().Pods(e.namespace)
	pod, err := m.currentPod(ctx, uid, e)
	if errors.Is(err, errNoMirrorPod) {
		// Written once the sources show the mirror pod: the periodic sync
		// tries again.
		logger.V(4).Info("Static pod has no current mirror pod yet, not writing its status")
		return
	}
	if errors.Is(err, errNotInSources) {
		// Its API object is gone; RemovePod follows.
		logger.V(4).Info("Pod is no longer in the sources, not writing its status")
		return
	}
	if apierrors.IsNotFound(err) {
		logger.V(3).Info("Pod does not exist on the API server")
		return
	}
	if err != nil {
		m.metrics.patch(resultFailed)
		logger.Error(err, "Failed to get pod for its status update")
		return
	}
	if pod.UID != uid && !(e.static && isMirrorOf(pod, e.hash)) {
		logger.V(2).Info("Pod was deleted and then recreated, skipping its status update", "newPodUID", pod.UID)
		m.forget(uid, e.version)
		return
	}

	base := pod.ResourceVersion
	merged := mergePodStatus(pod, pod.Status, e.status, !e.finished, metav1.NewTime(m.clock.Now()).Rfc3339Copy())
	patch, unchanged, err := preparePatch(pod.UID, pod.Status, merged)
	if err != nil {
		m.metrics.patch(resultFailed)
		logger.Error(err, "Failed to prepare the status patch")
		return
	}
	if unchanged {
		m.metrics.patch(resultUnchanged)
		logger.V(4).Info("Pod status is up to date", "version", e.version)
	} else {
		patchCtx, trace := ctx, m.traceStart(uid)
		if trace != nil {
			patchCtx = trace.trace(ctx)
		}
		sent := m.clock.Now()
		updated, err := pods.Patch(patchCtx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		answered := m.clock.Now()
		if apierrors.IsNotFound(err) {
			logger.V(3).Info("Pod does not exist on the API server")
			return
		}
		if err != nil {
			m.metrics.patch(resultFailed)
			logger.Error(err, "Failed to patch pod status", "patch", string(patch))
			return
		}
		m.metrics.patch(resultPatched)
		m.observeWritten(uid, &updated.Status, sent, answered, trace)
		logger.V(3).Info("Patched pod status", "version", e.version, "phase", updated.Status.Phase, "patch", string(patch))
		pod = updated
	}
	m.writeMu.Lock()
	m.written[uid], m.writtenFrom[uid] = pod, base
	m.writeMu.Unlock()
	if !e.at.IsZero() {
		m.metrics.synced(m.clock.Since(e.at))
	}

	if canBeDeleted(pod, e) {
		err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			// Never delete a pod recreated under the same name.
			Preconditions: metav1.NewUIDPreconditions(string(pod.UID)),
		})
		if apierrors.IsNotFound(err) {
			// Not proof that the pod is gone: the API server's
			// NodeRestriction admission reads the pod from its informer
			// cache, which can lag behind a pod created a moment ago, and
			// answers NotFound. As the kubelet, keep the status: the next
			// sync deletes again while the sources show the pod, and
			// RemovePod drops it once they do not.
			m.metrics.deletion(resultFailed)
			logger.V(2).Info("Deleting the finished pod found no pod, deleting again at the next sync", "err", err)
			return
		}
		if err != nil {
			m.metrics.deletion(resultFailed)
			logger.Error(err, "Failed to delete finished pod")
			return
		}
		m.metrics.deletion(resultDeleted)
		logger.V(3).Info("Pod fully terminated and removed from the API server")
		m.forgetDeleted(uid)
		return
	}
	m.writeMu.Lock()
	m.synced[uid] = e.version
	m.writeMu.Unlock()
	m.mu.Lock()
	if cur, ok := m.statuses[uid]; ok && cur.version == e.version && !cur.at.IsZero() {
		written := *cur
		written.at = time.Time{}
		m.statuses[uid] = &written
	}
	m.mu.Unlock()
}

// errNoMirrorPod: the sources show no current mirror pod of a static pod,
// so there is nothing to write its status to yet.
var errNoMirrorPod = errors.New("no current mirror pod")

// errNotInSources: the sources no longer show a (non-static) pod, so its
// API object is gone and there is nothing to write its status to.
var errNotInSources = errors.New("pod not in the sources")

// sourcePod returns the API pod the status of the pod uid goes to as the
// sources last saw it: the pod itself, or for a static pod its mirror pod
// when it is current (its mirror annotation is the static pod's hash).
// false without Options.Pods or when the sources have no such pod.
func (m *Manager) sourcePod(uid types.UID, e *versionedStatus) (*v1.Pod, bool) {
	if m.pods == nil {
		return nil, false
	}
	if e.static {
		ref := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.namespace, Name: e.name}}
		mirror, ok := m.pods.MirrorPodFor(ref)
		return mirror, ok && isMirrorOf(mirror, e.hash)
	}
	p, ok := m.pods.GetPodByUID(uid)
	return p, ok && p.UID == uid
}

// currentPod returns the pod to compute a status patch against, saving the
// GET the kubelet makes before every patch where the Manager knows the
// pod's current version: of the sources' copy (for a static pod, of its
// mirror pod) and the last patch's answer, the newer by resourceVersion
// (the API server's are comparable integers: resourceversion.
// CompareResourceVersion). The sources' copy is newer when someone wrote
// the pod after the Manager did, above all the API server marking it
// deleted: without this, every graceful deletion cost a GET beside the
// final PATCH and DELETE, a third more requests under the client's rate
// limit (1,000 pods deleted in 60 s at kubeAPIQPS 50 instead of 40). The
// answer is newer while the watch has not caught up with the write. Where
// the versions do not compare (an API server whose resourceVersions are
// not integers), the sources' copy serves when it is the version this
// Manager last wrote (or the Manager has not written the pod yet), the
// last answer when the sources' copy is the version that patch was
// computed from. With Options.Pods, a static pod whose current mirror
// pod the sources do not show gets errNoMirrorPod, without a request: there
// is nothing to write to until the pod loop created it; any other pod the
// sources do not show gets errNotInSources, without a request: the agent
// only sets statuses of pods its sources gave it, so the pod was deleted
// from the API server (a GET would be refused by the Node authorizer, the
// pod being no longer bound to the node; the kubelet makes that GET and
// relies on RemoveOrphanedStatuses to stop). Otherwise, and
// without Options.Pods, it reads the pod from the API server. A copy that
// misses someone else's later write can only leave that write as it is; the
// periodic sync then sees the difference and reads the API. The returned
// pod is read-only, not copied (syncPod only reads it, and keeps it as the
// last answer): the sources' object (PodGetter's pods are read-only), the
// last answer, or the GET's.
func (m *Manager) currentPod(ctx context.Context, uid types.UID, e *versionedStatus) (*v1.Pod, error) {
	if m.pods != nil {
		p, ok := m.sourcePod(uid, e)
		switch {
		case !ok && e.static:
			return nil, errNoMirrorPod
		case !ok:
			return nil, errNotInSources
		}
		m.writeMu.Lock()
		last, wrote := m.written[uid]
		from := m.writtenFrom[uid]
		m.writeMu.Unlock()
		if !wrote {
			return p, nil
		}
		if newer, err := resourceversion.CompareResourceVersion(p.ResourceVersion, last.ResourceVersion); err == nil {
			if newer >= 0 {
				return p, nil
			}
			return last, nil
		}
		switch p.ResourceVersion {
		case last.ResourceVersion:
			return p, nil
		case from:
			return last, nil
		}
	}
	return m.client.CoreV1().Pods(e.namespace).Get(ctx, e.name, metav1.GetOptions{})
}

// forget drops the pod's status unless a newer version came meanwhile.
func (m *Manager) forget(uid types.UID, version uint64) {
	m.writeMu.Lock()
	delete(m.synced, uid)
	delete(m.written, uid)
	delete(m.writtenFrom, uid)
	delete(m.force, uid)
	m.writeMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.statuses[uid]; ok && cur.version == version {
		delete(m.statuses, uid)
	}
}

// forgetDeleted drops the status of a pod this Manager deleted from the
// API server, whatever its version, and ignores any later one until
// RemovePod: the object, and with it the node's right to read or write it,
// is gone for good (a UID is never reused).
func (m *Manager) forgetDeleted(uid types.UID) {
	m.writeMu.Lock()
	delete(m.synced, uid)
	delete(m.written, uid)
	delete(m.writtenFrom, uid)
	m.writeMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.statuses, uid)
	m.deleted[uid] = struct{}{}
}

// canBeDeleted: the pod is being deleted, the API server shows it terminal,
// and its containers stopped. Mirror pods are not deleted here.
func canBeDeleted(pod *v1.Pod, e *versionedStatus) bool {
	if pod.DeletionTimestamp == nil || podsource.IsMirrorPod(pod) {
		return false
	}
	return isTerminal(pod.Status.Phase) && e.finished
}

// isMirrorOf reports whether pod is the mirror pod of the static pod with
// the config hash.
func isMirrorOf(pod *v1.Pod, hash string) bool {
	return hash != "" && podsource.IsMirrorPod(pod) && pod.Annotations[podsource.ConfigMirrorAnnotationKey] == hash
}

// hasPodInitialized reports whether the pod's API status shows it ever
// initialized: no init containers, a regular container that left waiting,
// or a last init container that completed (or, a sidecar, started).
func hasPodInitialized(pod *v1.Pod) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, st := range pod.Status.ContainerStatuses {
		if st.LastTerminationState.Terminated != nil || st.State.Waiting == nil {
			return true
		}
	}
	n := len(pod.Status.InitContainerStatuses)
	if n == 0 {
		return false
	}
	st := pod.Status.InitContainerStatuses[n-1]
	spec := findSpec(pod.Spec.InitContainers, st.Name)
	if spec == nil {
		return false
	}
	if isSidecar(spec) {
		return st.State.Running != nil && st.Started != nil && *st.Started
	}
	for _, s := range []v1.ContainerState{st.LastTerminationState, st.State} {
		if s.Terminated != nil && s.Terminated.ExitCode == 0 {
			return true
		}
	}
	return false
}

// startedInitContainers returns the init container statuses up to the last
// one that attempted to start (left waiting, or terminated before); at
// least the first.
func startedInitContainers(statuses []v1.ContainerStatus) []v1.ContainerStatus {
	for i := len(statuses) - 1; i >= 0; i-- {
		if statuses[i].State.Waiting == nil || statuses[i].LastTerminationState.Terminated != nil {
			return statuses[:i+1]
		}
	}
	if len(statuses) > 0 {
		return statuses[:1]
	}
	return nil
}

// checkContainerStateTransition refuses a status that moves a container out
// of a terminated state its restart policy does not restart.
func checkContainerStateTransition(old, status *v1.PodStatus, spec *v1.PodSpec) error {
	if spec.RestartPolicy == v1.RestartPolicyAlways || podstate.AllContainersCouldRestart(spec) {
		return nil
	}
	check := func(olds, news []v1.ContainerStatus, specs []v1.Container, what string) error {
		for _, o := range olds {
			if o.State.Terminated == nil {
				continue
			}
			c := findSpec(specs, o.Name)
			if c != nil && (isSidecar(c) || containerShouldRestart(c, spec, o.State.Terminated.ExitCode)) {
				continue
			}
			if n := findStatus(news, o.Name); n != nil && n.State.Terminated == nil {
				return fmt.Errorf("terminated %s %q attempted illegal transition to non-terminated state", what, o.Name)
			}
		}
		return nil
	}
	if err := check(old.ContainerStatuses, status.ContainerStatuses, spec.Containers, "container"); err != nil {
		return err
	}
	return check(old.InitContainerStatuses, status.InitContainerStatuses, spec.InitContainers, "init container")
}

// exitCodeLabel is the exit code as a metric label value.
func exitCodeLabel(code int32) string { return strconv.Itoa(int(code)) }
