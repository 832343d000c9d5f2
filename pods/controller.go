package pods

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/internal/timers"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/resources/allocation"
	"github.com/nodekit/nodekit/status/podstatus"
	"github.com/nodekit/nodekit/ticks"
)

// Options configures a Controller. Sources, Runtime, Statuses and Node are
// required.
type Options struct {
	// Sources delivers the pods to run.
	Sources Sources
	// Runtime runs them.
	Runtime Runtime
	// Statuses keeps and writes the pods' API status. When it is a
	// podstatus.StartObserver too (*podstatus.Manager is), it is told when
	// each pod that had not started was first seen.
	Statuses podstatus.Interface
	// Store receives the active pods; nil makes a Store of the
	// Controller's own (see Controller.Store).
	Store *Store
	// Node returns the node as last seen, for admission; false before it is
	// known, and Run handles no pod update until it is.
	// status.Reporter.NodeAnyWay fits best: it gives the node before it is
	// registered too, so static pods run without an API server, as the
	// kubelet's getNodeAnyWay (status.NodeWatch.Node admits nothing before
	// the node is registered).
	Node func() (*v1.Node, bool)
	// Admit are the admission checks, in order; a pod the first of them
	// rejects is failed and never started. GeneralPredicates is the
	// kubelet's first one; see AdmitHandlerGroup for the fx way.
	Admit []AdmitHandler
	// CPUManagerPolicy and MemoryManagerPolicy are the node's
	// cpuManagerPolicy and memoryManagerPolicy: under "static" ("Static")
	// an in-place resize of a Guaranteed pod's CPU (memory) is Infeasible,
	// as on the kubelet while InPlacePodVerticalScalingExclusiveCPUs
	// (ExclusiveMemory) is off. "" is the kubelet's "none" ("None").
	CPUManagerPolicy, MemoryManagerPolicy string
	// AllowedUnsafeSysctls are the unsafe sysctls (names, or prefixes
	// ending in *) the Module's Sysctls admit handler lets pods set
	// (kubelet allowedUnsafeSysctls); New ignores it.
	AllowedUnsafeSysctls []string
	// Allocations records the resources allocated to admitted pods, for
	// in-place resize (see Allocations); nil keeps them in memory only
	// (allocation.New without a root directory), so a restarted agent
	// allocates what the specs then ask for.
	Allocations Allocations
	// Prober, when set, probes the pods' containers; its readiness and
	// startup results go into the pods' statuses and its changes sync the
	// pod. nil means no probes: running containers are ready.
	Prober Prober
	// ResourceHealth report, in order, the health of the devices
	// allocated to the pods' containers in their statuses
	// (allocatedResourcesStatus); their changes sync the pod. Empty
	// reports none, and so does the ResourceHealthStatus gate off.
	ResourceHealth []ResourceHealthProvider
	// Features are the node's feature gates (nil: the kubelet's
	// defaults). The Controller reads ResourceHealthStatus,
	// InPlacePodLevelResourcesVerticalScaling (off: a resize of pod-level
	// resources is Infeasible) and the exclusive CPU and memory resize
	// gates (see CPUManagerPolicy); Module's DeclaredFeatures admit handler
	// the gates of the node features.
	Features *features.Gates
	// HostIPs returns the node's IPs, reported as the pods' hostIPs; nil
	// reports none.
	HostIPs func() []net.IP
	// QOSClass classifies pods for their status; nil leaves the status
	// generator's default (the class the API server set).
	QOSClass func(*v1.Pod) v1.PodQOSClass
	// SyncFrequency is the longest a pod goes without a sync (kubelet
	// syncFrequency, default 1m; each resync is jittered by up to half of
	// it).
	SyncFrequency time.Duration
	// HousekeepingPeriod is how often pods the runtime runs but no source
	// knows are looked for (default 2s, the kubelet's housekeeping period).
	// While the node holds nothing (no pod known, none in the runtime, no
	// orphaned mirror pod) housekeeping looks every idleHousekeepingPeriod
	// instead, on the 10 s loops' tick, until the next pod update or
	// runtime event brings it back to HousekeepingPeriod.
	HousekeepingPeriod time.Duration
	// Recorder receives the pod events the controller records (rejections).
	Recorder record.EventRecorder
	// Mirrors, when set, keeps the mirror pods of static pods in the API
	// server (see MirrorClient): every sync of a running static pod
	// creates or replaces its mirror pod, an OpMirror update syncs the
	// static pods it carries, the static pods are synced once the node is
	// first known, and housekeeping deletes mirror pods whose static pod is
	// gone. Sources must then be MirrorSources too. nil (a standalone node)
	// makes no mirror pods.
	Mirrors MirrorClient
	// Clock paces requeues and housekeeping (default clock.RealClock{}).
	Clock clock.Clock
	// Align moves the rounds of housekeeping and container GC to the
	// node's shared ticks (package ticks; agent gives the node's); nil
	// waits each period exactly.
	Align ticks.Align
	// Registerer receives the kubelet's pod lifecycle metrics,
	// kubelet_pod_start_duration_seconds,
	// kubelet_pod_start_sli_duration_seconds,
	// kubelet_pod_start_total_duration_seconds and
	// kubelet_pod_worker_duration_seconds{operation_type},
	// kubelet_restarted_pods_total{static} (pods added again with the same
	// UID while they stopped: "true" for static pods, "" for others), and
	// nodekit_pod_start_agent_duration_seconds (the agent's own share of a
	// pod's start, with buckets from 1 ms); nil registers nothing.
	Registerer prometheus.Registerer
}

// Default periods of the Controller, the kubelet's.
const (
	DefaultSyncFrequency      = time.Minute
	DefaultHousekeepingPeriod = 2 * time.Second
	// syncErrorBackOff is when a pod whose sync failed is tried again,
	// jittered by up to half of it (the kubelet's workerBackOffPeriod).
	syncErrorBackOff = 10 * time.Second
	// gcPeriod is how often dead containers of live pods are removed (the
	// kubelet's ContainerGCPeriod).
	gcPeriod = time.Minute
	// jitterFactor spreads resyncs and retries, as the kubelet's pod
	// workers.
	jitterFactor = 0.5
	// idleHousekeepingPeriod is how often housekeeping looks while the node
	// holds nothing and no pod update or runtime event came since: what
	// could turn up then without either (a foreign mirror pod, a sandbox
	// the PLEG reports no event of) is found within it rather than within
	// HousekeepingPeriod, and an idle agent does not wake every 2 s for
	// rounds with nothing to do.
	idleHousekeepingPeriod = 10 * time.Second
	// minSyncLoopStall is the shortest time without a housekeeping round
	// after which SyncLoopHealthy fails (the kubelet's 5 minutes, or twice
	// the sync frequency when that is longer).
	minSyncLoopStall = 5 * time.Minute
)

// Controller is the node's pod lifecycle loop: it admits the pods its
// sources deliver, runs one worker per pod that brings the runtime in line
// with the pod's spec and reports its status, stops pods that are deleted
// or finish, and removes what the runtime holds of pods nobody knows, as the
// kubelet's syncLoop, pod workers and housekeeping do.
type Controller struct {
	opts    Options
	clock   clock.Clock
	store   *Store
	workers *podWorkers

	// runCtx is Run's context, for the workers KillPod starts.
	runCtx context.Context
	// mirrorSources is Sources' view of mirror pods, with Mirrors.
	mirrorSources MirrorSources
	// orphanMirrors is set while orphaned mirror pods are being deleted.
	orphanMirrors atomic.Bool
	// handledSources are the sources whose first update the loop has
	// handled; only the loop's goroutine touches it. The Store's
	// SourcesReady is set once it holds every one of Sources.Names.
	handledSources map[string]bool

	mu   sync.Mutex
	pods map[types.UID]*podRecord
	// orphans are the pods no source knows that are being stopped.
	orphans map[types.UID]bool
	// stopped are KillPod's waiters, by pod, told once the pod stopped; a
	// waiter that gives up removes itself.
	stopped map[types.UID][]chan struct{}
	// terminateRetries are the back-offs of pods whose stop or removal
	// failed; a pod's goes once it stopped or was removed.
	terminateRetries map[types.UID]*terminateRetry
	// static orders the starts of static pods of one name.
	static staticStarts
	// restarts are pods added again, with the same UID, while their worker
	// still stops them after they left their sources (a static pod's
	// manifest moved out and back): each gets a new worker once the old
	// one ends, as the kubelet's restartRequested.
	restarts map[types.UID]*v1.Pod
	// background tracks housekeeping's goroutines.
	background sync.WaitGroup
	// housekeepingKick receives a value (one slot) at every pod update
	// and runtime event the loop handles, and when a pod worker ends:
	// housekeeping goes back to HousekeepingPeriod if it was idle.
	housekeepingKick chan struct{}

	metrics *controllerMetrics
	// loopEntry is when the latest housekeeping round began; zero before
	// Run.
	loopEntry atomic.Pointer[time.Time]
	// gcMu serializes garbage collection runs (the periodic one and
	// GarbageCollect's).
	gcMu sync.Mutex
}

// podRecord is what the controller remembers of one pod.
type podRecord struct {
	pod *v1.Pod
	// rejected pods were failed by admission and never start.
	rejected bool
	// statusFn, set by KillPod, amends the pod's final status (an
	// eviction's reason and condition).
	statusFn func(*v1.PodStatus)
	// firstSeen is when the controller first saw the pod; started is set
	// once its start was recorded in kubelet_pod_start_duration_seconds.
	firstSeen time.Time
	started   bool
	// trackStart: the pod had not started when first seen, so its start
	// is recorded in kubelet_pod_start_sli_duration_seconds once the
	// source shows it (startObserved).
	trackStart, startObserved bool
	// terminated is set once the pod's containers are stopped and its
	// final status is set; it never goes back.
	terminated bool
	// resizePending is the resize the node did not allocate (at
	// resizePendingGeneration), nil when none; resizing is set while the
	// status says PodResizeInProgress.
	resizePending           *podstatus.ResizePending
	resizePendingGeneration int64
	resizing                bool
	// unflushed: admission recorded the pod's allocation in memory only
	// (allocationRecorder); its first sync stores it before the runtime
	// acts.
	unflushed bool
}

// New validates opts and applies defaults. It does no I/O.
func New(opts Options) (*Controller, error) {
	if opts.Sources == nil || opts.Runtime == nil || opts.Statuses == nil {
		return nil, errors.New("pod controller: Sources, Runtime and Statuses are required")
	}
	if opts.Node == nil {
		return nil, errors.New("pod controller: Node is required for admission")
	}
	if opts.SyncFrequency <= 0 {
		opts.SyncFrequency = DefaultSyncFrequency
	}
	if opts.HousekeepingPeriod <= 0 {
		opts.HousekeepingPeriod = DefaultHousekeepingPeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Store == nil {
		opts.Store = NewStore()
	}
	if opts.Allocations == nil {
		opts.Allocations = allocation.New(allocation.Options{})
	}
	if !opts.Features.Enabled(features.ResourceHealthStatus) {
		// As the kubelet with the gate off: no device's health in the
		// pods' statuses, and no sync on its changes.
		opts.ResourceHealth = nil
	}
	m, err := newControllerMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	c := &Controller{opts: opts, clock: opts.Clock, store: opts.Store, pods: map[types.UID]*podRecord{}, orphans: map[types.UID]bool{}, stopped: map[types.UID][]chan struct{}{}, terminateRetries: map[types.UID]*terminateRetry{}, restarts: map[types.UID]*v1.Pod{}, runCtx: context.Background(), metrics: m, housekeepingKick: make(chan struct{}, 1)}
	c.static = newStaticStarts()
	c.handledSources = map[string]bool{}
	if len(opts.Sources.Names()) == 0 {
		c.store.sourcesReady.Store(true)
	}
	if opts.Mirrors != nil {
		ms, ok := opts.Sources.(MirrorSources)
		if !ok {
			return nil, fmt.Errorf("pod controller: with Mirrors, Sources (%T) must be MirrorSources", opts.Sources)
		}
		c.mirrorSources = ms
	}
	c.workers = newPodWorkers(c.syncPodRecovering, opts.Clock, m.observeWorker)
	c.workers.track = func(uid types.UID, running bool) { c.store.setKnown(uid, knownWorker, running) }
	c.workers.finished = c.workerFinished
	return c, nil
}

// Store returns the store of active pods the Controller writes.
func (c *Controller) Store() *Store { return c.store }

// ActivePods returns the admitted pods that have not terminated, as the
// kubelet's GetActivePods (see Store.Active).
func (c *Controller) ActivePods() []*v1.Pod { return c.store.Active() }

// Run handles pod updates, runtime events and probe results until ctx is
// done, with housekeeping and garbage collection in goroutines of their
// own, then waits for the pod workers and housekeeping to return. It
// blocks.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	c.runCtx = ctx
	c.mu.Unlock()
	now := c.clock.Now()
	c.loopEntry.Store(&now)
	defer c.loopEntry.Store(nil)
	defer c.background.Wait()
	defer c.workers.wait()
	c.background.Go(func() { c.runHousekeeping(ctx) })
	if c.opts.Mirrors != nil {
		c.background.Go(func() { c.runNodeKnown(ctx) })
	}
	if gc, ok := c.opts.Runtime.(GarbageCollector); ok {
		c.background.Go(func() { c.runGC(ctx, gc) })
	}
	var probes <-chan types.UID
	if c.opts.Prober != nil {
		probes = c.opts.Prober.Updates()
	}
	health := make(chan types.UID)
	if len(c.opts.ResourceHealth) > 0 {
		// One goroutine forwards every source's updates (an agent has
		// several: device plugins, DRA), not one per source.
		c.background.Go(func() { forwardHealth(ctx, c.opts.ResourceHealth, health) })
	}
	if !c.waitForNode(ctx) {
		return nil
	}
	updates, events := c.opts.Sources.Updates(), c.opts.Runtime.Events()
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-updates:
			if !ok {
				return errors.New("pod controller: the pod sources stopped")
			}
			c.handle(ctx, u)
			c.sourceHandled(u.Source)
			c.kickHousekeeping()
		case ev := <-events:
			if ev.Type != podstate.ContainerChanged {
				c.workers.poke(ev.ID)
			}
			c.kickHousekeeping()
		case uid := <-probes:
			c.workers.poke(uid)
		case uid := <-health:
			c.workers.poke(uid)
		}
	}
}

// sourceHandled records that the loop handled an update of source: once
// it has handled one of every source, SourcesReady turns true. Called by
// the loop only, after handle returned.
func (c *Controller) sourceHandled(source string) {
	if c.store.SourcesReady() || c.handledSources[source] {
		return
	}
	c.handledSources[source] = true
	for _, name := range c.opts.Sources.Names() {
		if !c.handledSources[name] {
			return
		}
	}
	c.store.sourcesReady.Store(true)
}

// SourcesReady is Store.SourcesReady of the Controller's Store.
func (c *Controller) SourcesReady() bool { return c.store.SourcesReady() }

// updateVerbosity is the verbosity at which an update of op is logged, the
// kubelet's sync loop's: a reconcile (a status change, most often the
// agent's own status write coming back on the watch: one or two per pod
// start) at 4, the others at 2.
func updateVerbosity(op podsource.Op) int {
	if op == podsource.OpReconcile {
		return 4
	}
	return 2
}

func (c *Controller) handle(ctx context.Context, u podsource.Update) {
	logger := klog.FromContext(ctx)
	logger.V(updateVerbosity(u.Op)).Info("Pod update", "op", u.Op.String(), "source", u.Source, "pods", klog.KObjSlice(u.Pods))
	switch u.Op {
	case podsource.OpAdd:
		// Admit in creation order, so pods that ran before a restart keep
		// their place, as the kubelet does.
		pods := slices.Clone(u.Pods)
		slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
			return a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time)
		})
		for _, pod := range pods {
			c.add(ctx, pod)
		}
	case podsource.OpUpdate, podsource.OpDelete:
		for _, pod := range u.Pods {
			c.update(ctx, pod, u.Op == podsource.OpDelete)
		}
	case podsource.OpRemove:
		for _, pod := range u.Pods {
			c.remove(ctx, pod)
		}
	case podsource.OpReconcile:
		for _, pod := range u.Pods {
			c.mu.Lock()
			if r, ok := c.pods[pod.UID]; ok {
				r.pod = pod
				c.observeStartLocked(r)
			}
			c.mu.Unlock()
			alloc, _ := c.allocatedPod(ctx, pod)
			c.store.update(alloc)
			// The sync generates the status from the pod it is given:
			// the worker gets this object, with the gate conditions
			// another writer just set, as the kubelet's
			// HandlePodReconcile updates its pod worker.
			if podstatus.NeedsReadinessSync(pod) {
				c.workers.reconcile(pod)
			}
		}
	case podsource.OpMirror:
		// Their mirror pods changed or went: the sync puts them back. A
		// status that waited for its mirror pod is written now.
		if o, ok := c.opts.Statuses.(podstatus.MirrorObserver); ok {
			o.MirrorPodsChanged()
		}
		for _, pod := range u.Pods {
			c.workers.poke(pod.UID)
		}
	}
}

func (c *Controller) add(ctx context.Context, pod *v1.Pod) {
	c.mu.Lock()
	// Added again while its worker still stops it for leaving its
	// sources: the worker cannot go back, so the pod starts anew once it
	// ends (workerFinished), as the kubelet's pod workers restart a pod
	// whose UID is created again while it terminates.
	if _, pending := c.restarts[pod.UID]; pending || c.workers.removing(pod.UID) {
		c.restarts[pod.UID] = pod
		c.mu.Unlock()
		klog.FromContext(ctx).Info("Pod is terminating but has been requested to restart with same UID, will be restarted once it stopped", "pod", klog.KObj(pod), "podUID", pod.UID)
		return
	}
	if _, ok := c.pods[pod.UID]; ok {
		c.mu.Unlock()
		c.update(ctx, pod, pod.DeletionTimestamp != nil)
		return
	}
	r := &podRecord{pod: pod, firstSeen: c.clock.Now(), trackStart: pod.Status.StartTime == nil && !isUnschedulable(pod)}
	c.pods[pod.UID] = r
	c.store.setKnown(pod.UID, knownRecord, true)
	if o, ok := c.opts.Statuses.(podstatus.StartObserver); ok && r.trackStart {
		o.PodSeen(pod.UID, r.firstSeen)
	}
	// A finished or deleted pod is not admitted: its worker only makes sure
	// it is stopped.
	terminate := pod.DeletionTimestamp != nil || isTerminal(pod.Status.Phase)
	if !terminate {
		// A pod allocated before the agent restarted is admitted with its
		// allocation; a resize since is decided at its first sync.
		alloc, _ := c.allocatedPod(ctx, pod)
		if res := c.admit(alloc); !res.Admit {
			r.rejected = true
			c.mu.Unlock()
			c.reject(ctx, pod, res)
			return
		}
		if rec, ok := c.opts.Allocations.(allocationRecorder); ok {
			// Stored by the pod's first sync: a burst's admissions, one
			// at a time, do not wait for the disk in turn.
			if err := rec.Record(alloc); err != nil {
				klog.FromContext(ctx).Error(err, "Cannot record the pod's allocated resources", "pod", klog.KObj(pod))
			} else {
				r.unflushed = true
			}
		} else if err := c.opts.Allocations.SetAllocated(alloc); err != nil {
			klog.FromContext(ctx).Error(err, "Cannot record the pod's allocated resources", "pod", klog.KObj(pod))
		}
		c.store.set(alloc)
		c.static.enqueue(pod)
	}
	c.mu.Unlock()
	c.workers.update(ctx, pod, terminate, false, pod.DeletionGracePeriodSeconds)
}

// admit runs the admission checks against the other active pods; c.mu held
// so that admissions are decided one at a time.
func (c *Controller) admit(pod *v1.Pod) AdmitResult {
	node, ok := c.opts.Node()
	if !ok {
		node = nil
	}
	others := slices.DeleteFunc(c.store.Active(), func(p *v1.Pod) bool { return p.UID == pod.UID })
	attrs := AdmitAttributes{Pod: pod, OtherPods: others, Node: node}
	for i, h := range c.opts.Admit {
		if res := c.callAdmit(i, h, attrs); !res.Admit {
			return res
		}
	}
	return AdmitResult{Admit: true}
}

// unexpectedAdmissionError is the kubelet's rejection reason for an
// admission that failed rather than decided.
const unexpectedAdmissionError = "UnexpectedAdmissionError"

// callAdmit asks admit handler i; a handler that panics rejects the pod
// with UnexpectedAdmissionError, logged at error level with the handler and
// its stack, and the loop goes on.
func (c *Controller) callAdmit(i int, h AdmitHandler, attrs AdmitAttributes) (res AdmitResult) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("admit handler %d (%T) panicked: %v", i, h, r)
			klog.FromContext(c.runCtx).Error(err, "Admit handler failed; rejecting the pod", "pod", klog.KObj(attrs.Pod), "stack", string(debug.Stack()))
			res = AdmitResult{Admit: false, Reason: unexpectedAdmissionError, Message: "Unexpected error while attempting to admit the pod: " + err.Error()}
		}
	}()
	return h.Admit(attrs)
}

// reject fails a pod admission refused, as the kubelet's rejectPod: a
// warning event and a Failed status with the reason, written at once.
func (c *Controller) reject(ctx context.Context, pod *v1.Pod, res AdmitResult) {
	klog.FromContext(ctx).Info("Pod rejected by admission", "pod", klog.KObj(pod), "reason", res.Reason, "message", res.Message)
	if c.opts.Recorder != nil {
		c.opts.Recorder.Event(pod, v1.EventTypeWarning, res.Reason, res.Message)
	}
	st := *pod.Status.DeepCopy()
	st.Phase = v1.PodFailed
	st.Reason = res.Reason
	st.Message = "Pod was rejected: " + res.Message
	c.opts.Statuses.SetPodStatus(pod, st)
	c.opts.Statuses.TerminatePod(pod)
}

func (c *Controller) update(ctx context.Context, pod *v1.Pod, deleted bool) {
	c.mu.Lock()
	if _, pending := c.restarts[pod.UID]; pending && !deleted {
		c.restarts[pod.UID] = pod
		c.mu.Unlock()
		return
	}
	r, ok := c.pods[pod.UID]
	if ok {
		r.pod = pod
		c.observeStartLocked(r)
	}
	rejected := ok && r.rejected
	c.mu.Unlock()
	if !ok {
		c.add(ctx, pod)
		return
	}
	if rejected {
		return
	}
	alloc, _ := c.allocatedPod(ctx, pod)
	c.store.update(alloc)
	c.workers.update(ctx, pod, deleted || pod.DeletionTimestamp != nil, false, pod.DeletionGracePeriodSeconds)
}

func (c *Controller) remove(ctx context.Context, pod *v1.Pod) {
	c.mu.Lock()
	delete(c.restarts, pod.UID)
	r, ok := c.pods[pod.UID]
	rejected := ok && r.rejected
	if rejected {
		delete(c.pods, pod.UID)
		c.store.setKnown(pod.UID, knownRecord, false)
	}
	c.mu.Unlock()
	if rejected {
		c.opts.Statuses.RemovePod(pod.UID)
		return
	}
	// The worker stops whatever still runs, then forgets the pod.
	c.workers.update(ctx, pod, true, true, pod.DeletionGracePeriodSeconds)
}

// workerFinished starts the pod with uid again when it was added back
// while its worker stopped it (see restarts), counting it in
// kubelet_restarted_pods_total.
func (c *Controller) workerFinished(ctx context.Context, uid types.UID) {
	c.kickHousekeeping()
	c.mu.Lock()
	pod, ok := c.restarts[uid]
	delete(c.restarts, uid)
	c.mu.Unlock()
	if !ok {
		return
	}
	klog.FromContext(ctx).V(2).Info("Restarting the pod added again while it stopped", "pod", klog.KObj(pod), "podUID", pod.UID)
	c.metrics.observeRestart(podsource.IsStaticPod(pod))
	c.add(ctx, pod)
}

func isTerminal(phase v1.PodPhase) bool {
	return phase == v1.PodSucceeded || phase == v1.PodFailed
}

// statusOptions are the inputs of a pod's status besides the runtime's view.
func (c *Controller) statusOptions(pod *v1.Pod, terminal bool) podstatus.GenerateOptions {
	opts := podstatus.GenerateOptions{Terminal: terminal, QOSClass: c.opts.QOSClass}
	if c.opts.HostIPs != nil {
		opts.HostIPs = c.opts.HostIPs()
	}
	if prev, ok := c.opts.Statuses.GetPodStatus(pod.UID); ok {
		opts.Previous = &prev
	}
	if p := c.opts.Prober; p != nil {
		opts.Readiness = p.Ready
		opts.Startup = p.Started
	}
	if hs := c.opts.ResourceHealth; len(hs) > 0 {
		opts.AllocatedResourcesStatus = func(pod *v1.Pod, s *v1.PodStatus) {
			for _, h := range hs {
				h.UpdateAllocatedResourcesStatus(pod, s)
			}
		}
	}
	if !terminal {
		opts.ResizePending = c.resizePendingOf(pod.UID)
	}
	return opts
}

// syncPodRecovering is syncPod, a panic of which (in the Runtime, a
// pod-level backend, a prober) is logged at error level with its stack and
// recorded as a FailedSync warning event on the pod, and the pod synced
// again after the error back-off, instead of taking the agent down.
func (c *Controller) syncPodRecovering(ctx context.Context, w podWork) (requeueAt time.Time, done bool) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("pod sync panicked: %v", r)
			klog.FromContext(ctx).Error(err, "Pod sync failed; will retry", "pod", klog.KObj(w.Pod), "podUID", w.Pod.UID, "stack", string(debug.Stack()))
			if c.opts.Recorder != nil {
				c.opts.Recorder.Event(w.Pod, v1.EventTypeWarning, "FailedSync", "Error syncing pod: "+err.Error())
			}
			requeueAt, done = c.after(c.retryAfterError()), false
		}
	}()
	return c.syncPod(ctx, w)
}

// syncPod is one pod worker sync: report the status the runtime shows,
// then run or stop the pod and report what that did.
func (c *Controller) syncPod(ctx context.Context, w podWork) (time.Time, bool) {
	pod := w.Pod
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	ctx = klog.NewContext(ctx, logger)
	prev, hasPrev := c.opts.Statuses.GetPodStatus(pod.UID)
	if w.Terminate || (hasPrev && isTerminal(prev.Phase)) {
		return c.terminate(ctx, w)
	}
	c.flushAllocation(ctx, pod)
	// The runtime actuates, and the status reports, the allocation.
	pod = c.handleResize(ctx, pod)
	var prevStatus *v1.PodStatus
	if hasPrev {
		prevStatus = &prev
	}
	deadlineLeft, hasDeadline := activeDeadlineLeft(pod, prevStatus, c.clock.Now())
	if hasDeadline && deadlineLeft <= 0 {
		c.killForDeadline(ctx, pod)
		return time.Time{}, false
	}
	if !c.mayStart(ctx, pod) {
		return c.after(c.retryAfterError()), false
	}
	st, err := c.opts.Runtime.PodStatus(ctx, pod, c.statusOptions(pod, false))
	if err != nil {
		logger.Error(err, "Cannot read the pod's runtime status; will retry")
		return c.after(c.retryAfterError()), false
	}
	c.setStatus(pod, st)
	if isTerminal(st.Phase) {
		// Every container finished for good: stop the sandbox next.
		c.workers.update(ctx, pod, true, false, nil)
		return time.Time{}, false
	}
	mirrorRetry := c.syncMirrorPod(ctx, pod)
	// Probes start before the runtime acts, as the kubelet's syncPod: a
	// container the sync starts is probed from its first status on.
	if c.opts.Prober != nil {
		c.opts.Prober.AddPod(pod)
	}

	res := c.opts.Runtime.SyncPod(ctx, pod)
	if res.Err != nil {
		logger.V(2).Info("Pod sync did not complete", "err", res.Err)
	}
	// Report what the sync did at once instead of at the next runtime
	// event: the status a watcher waits for (Running) is known now.
	if st, err := c.opts.Runtime.PodStatus(ctx, pod, c.statusOptions(pod, false)); err == nil {
		c.setStatus(pod, st)
		// With the containers the sync started in the status, the prober
		// runs their readiness probes now instead of a period later.
		if c.opts.Prober != nil && !isTerminal(st.Phase) {
			c.opts.Prober.AddPod(pod)
		}
	}

	now := c.clock.Now()
	requeue := wait.Jitter(c.opts.SyncFrequency, jitterFactor)
	if res.Err != nil || mirrorRetry {
		requeue = min(requeue, c.retryAfterError())
	}
	if hasDeadline {
		// Sync again when the active deadline passes (counted from the
		// start time this sync may just have set).
		if st, ok := c.opts.Statuses.GetPodStatus(pod.UID); ok {
			deadlineLeft, _ = activeDeadlineLeft(pod, &st, now)
		}
		requeue = min(requeue, deadlineLeft)
	}
	return timers.Earliest(now.Add(requeue), res.RetryAt), false
}

// after is the time d from now on the controller's clock.
func (c *Controller) after(d time.Duration) time.Time {
	return c.clock.Now().Add(d)
}

// setStatus hands a running pod's status to the status manager. The first
// time a pod goes from Pending (or no phase) to Running on this agent, it
// records how long that took since the controller first saw the pod in
// kubelet_pod_start_duration_seconds, as the kubelet does. A pod that was
// already running when the agent started is not counted.
func (c *Controller) setStatus(pod *v1.Pod, st v1.PodStatus) {
	if st.Phase == v1.PodRunning && c.metrics != nil {
		prev := pod.Status.Phase
		if cached, ok := c.opts.Statuses.GetPodStatus(pod.UID); ok {
			prev = cached.Phase
		}
		var seen time.Time
		c.mu.Lock()
		if r := c.pods[pod.UID]; r != nil && !r.started {
			r.started = true
			if prev == "" || prev == v1.PodPending {
				seen = r.firstSeen
			}
		}
		c.mu.Unlock()
		if !seen.IsZero() {
			c.metrics.observeStart(c.clock.Since(seen))
		}
	}
	c.observeResize(pod, &st)
	c.opts.Statuses.SetPodStatus(pod, st)
}

// observeStartLocked records the start of a pod whose source (the API
// server's watch) shows all its containers started for the first time, as
// the kubelet's pod startup latency tracker: kubelet_pod_start_total_duration_seconds
// since the pod's creation; kubelet_pod_start_sli_duration_seconds the same
// less image pulls (ImagePullTimer) and init containers' run time, for
// stateless pods only; nodekit_pod_start_agent_duration_seconds since the
// controller first saw it less image pulls. c.mu is held.
func (c *Controller) observeStartLocked(r *podRecord) {
	pod := r.pod
	if c.metrics == nil || !r.trackStart || r.startObserved || r.rejected || !podstatus.AllContainersStarted(&pod.Status) {
		return
	}
	r.startObserved = true
	now := c.clock.Now()
	var pulls time.Duration
	if t, ok := c.opts.Runtime.(ImagePullTimer); ok {
		pulls = t.ImagePullTime(pod.UID)
	}
	total := now.Sub(pod.CreationTimestamp.Time)
	c.metrics.observeStarted(total, total-pulls-initContainersRunTime(pod), now.Sub(r.firstSeen)-pulls, isStateless(pod))
}

// initContainersRunTime sums how long the pod's init containers ran, as
// its status shows them (finished ones; a running sidecar from its start).
func initContainersRunTime(pod *v1.Pod) time.Duration {
	var d time.Duration
	for _, cs := range pod.Status.InitContainerStatuses {
		if t := cs.State.Terminated; t != nil && !t.StartedAt.IsZero() && t.FinishedAt.After(t.StartedAt.Time) {
			d += t.FinishedAt.Sub(t.StartedAt.Time)
		}
	}
	return d
}

// isStateless reports whether the pod's volumes are all of the kinds the
// kubelet's SLI counts as stateless: secret, configMap, downwardAPI,
// emptyDir, projected.
func isStateless(pod *v1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil && v.ConfigMap == nil && v.DownwardAPI == nil && v.EmptyDir == nil && v.Projected == nil {
			return false
		}
	}
	return true
}

// isUnschedulable reports whether the pod's PodScheduled condition is
// False.
func isUnschedulable(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return true
		}
	}
	return false
}

// SyncLoopHealthy returns an error when the loop is not running, or when
// its housekeeping has not begun a round for twice the sync frequency (at
// least 5 minutes): a loop stuck on the runtime. It backs /healthz/syncloop,
// as the kubelet's syncLoop health check. It does not block.
func (c *Controller) SyncLoopHealthy() error {
	entry := c.loopEntry.Load()
	if entry == nil {
		return errors.New("the pod lifecycle loop is not running")
	}
	limit := max(2*c.opts.SyncFrequency, minSyncLoopStall)
	if since := c.clock.Since(*entry); since > limit {
		return fmt.Errorf("sync Loop took longer than expected: no housekeeping round for %v", since.Round(time.Second))
	}
	return nil
}

// retryAfterError is when a pod whose sync failed is synced again.
func (c *Controller) retryAfterError() time.Duration {
	return wait.Jitter(syncErrorBackOff, jitterFactor)
}

// terminate stops the pod's containers with its grace period, reports the
// final status, and once the pod is gone from its source removes what the
// runtime holds of it and forgets it.
func (c *Controller) terminate(ctx context.Context, w podWork) (time.Time, bool) {
	pod, logger := w.Pod, klog.FromContext(ctx)
	// No liveness or startup failure may restart a container while the
	// pod stops; readiness keeps being probed until the containers are
	// stopped, as the kubelet's SyncTerminatingPod.
	if c.opts.Prober != nil {
		c.opts.Prober.StopLivenessAndStartup(pod)
	}
	// A pod removed from its source has no API object left: drop its
	// status now rather than after the runtime removed it (seconds on a
	// busy node), or the status sink keeps trying to write it, each try
	// refused by the Node authorizer (the pod is no longer bound to the
	// node).
	if w.Removed {
		c.opts.Statuses.RemovePod(pod.UID)
	}
	if err := c.opts.Runtime.KillPod(ctx, pod, w.GracePeriod); err != nil {
		return c.after(c.retryTerminate(ctx, pod.UID, "Cannot stop the pod or tear down its volumes; will retry", err)), false
	}
	// A removed pod is gone from its source (its API object deleted): it
	// has no status left to write, and writing one would only be refused.
	var st v1.PodStatus
	if !w.Removed {
		// The final status reports the allocation, as the running pod's did.
		alloc, _ := c.allocatedPod(ctx, pod)
		var err error
		if st, err = c.opts.Runtime.PodStatus(ctx, alloc, c.statusOptions(pod, true)); err != nil {
			return c.after(c.retryTerminate(ctx, pod.UID, "Cannot read the stopped pod's runtime status; will retry", err)), false
		}
	}
	c.mu.Lock()
	if r := c.pods[pod.UID]; r != nil {
		if r.statusFn != nil && !w.Removed {
			r.statusFn(&st)
		}
		r.terminated = true
	}
	waiters := c.stopped[pod.UID]
	delete(c.stopped, pod.UID)
	delete(c.terminateRetries, pod.UID)
	c.mu.Unlock()
	if !w.Removed {
		c.opts.Statuses.SetPodStatus(pod, st)
		c.opts.Statuses.TerminatePod(pod)
	}
	if c.opts.Prober != nil {
		c.opts.Prober.RemovePod(pod)
	}
	c.store.delete(pod.UID)
	if err := c.opts.Allocations.RemovePod(pod.UID); err != nil {
		logger.Error(err, "Cannot forget the stopped pod's allocated resources")
	}
	// Its resources are free: deferred resizes may fit now.
	c.retryDeferredResizes()
	c.staticPodStopped(pod)
	for _, ch := range waiters {
		close(ch)
	}
	if !w.Removed {
		return time.Time{}, false
	}
	if err := c.opts.Runtime.RemovePod(ctx, pod.UID); err != nil {
		return c.after(c.retryTerminate(ctx, pod.UID, "Cannot remove the pod's leftovers; will retry", err)), false
	}
	c.mu.Lock()
	delete(c.pods, pod.UID)
	c.store.setKnown(pod.UID, knownRecord, false)
	delete(c.terminateRetries, pod.UID)
	c.mu.Unlock()
	logger.V(2).Info("Pod removed")
	return time.Time{}, true
}

// Back-off of a pod whose stop or removal fails: the first retry after
// minTerminateBackOff, each next one twice later, up to
// maxTerminateBackOff.
const (
	minTerminateBackOff = time.Second
	maxTerminateBackOff = time.Minute
)

// terminateRetry is the back-off of one pod's failing stop or removal.
type terminateRetry struct {
	delay time.Duration
	// last is the error message last logged at error level.
	last string
}

// retryTerminate returns when a pod whose stop or removal failed with err
// is tried again, backing off exponentially, and logs the failure: at
// error level the first time and whenever the error changes, at V(2)
// otherwise, so a pod that cannot be torn down does not fill the log.
func (c *Controller) retryTerminate(ctx context.Context, uid types.UID, msg string, err error) time.Duration {
	if ctx.Err() != nil {
		return minTerminateBackOff
	}
	c.mu.Lock()
	r := c.terminateRetries[uid]
	if r == nil {
		r = &terminateRetry{}
		c.terminateRetries[uid] = r
	}
	r.delay = min(max(2*r.delay, minTerminateBackOff), maxTerminateBackOff)
	delay, repeated := r.delay, r.last == err.Error()
	r.last = err.Error()
	c.mu.Unlock()
	logger := klog.FromContext(ctx)
	if repeated {
		logger.V(2).Info(msg, "err", err, "retryIn", delay)
	} else {
		logger.Error(err, msg, "retryIn", delay)
	}
	return delay
}

// minKillTimeout is the shortest KillPod waits for a pod to stop.
const minKillTimeout = 10 * time.Second

// KillPod stops an admitted pod for good, as the kubelet's killPodNow (the
// eviction manager's kill): the pod's worker stops its containers with
// gracePeriodOverride (the pod's own grace period when nil), applies
// statusFn to the pod's final status (phase Failed and reason Evicted, say)
// and never runs it again. KillPod blocks until the pod's containers are
// stopped and its final status is set, or for at most the longer of 10s
// and 1.5 × the grace period, or until ctx is done. Safe for concurrent use.
func (c *Controller) KillPod(ctx context.Context, pod *v1.Pod, gracePeriodOverride *int64, statusFn func(*v1.PodStatus)) error {
	c.mu.Lock()
	r, ok := c.pods[pod.UID]
	if !ok || r.rejected {
		c.mu.Unlock()
		return fmt.Errorf("kill pod %s/%s: the pod is not running on this node", pod.Namespace, pod.Name)
	}
	if statusFn != nil {
		r.statusFn = statusFn
	}
	done := make(chan struct{})
	c.stopped[pod.UID] = append(c.stopped[pod.UID], done)
	runCtx, current := c.runCtx, r.pod
	c.mu.Unlock()

	grace := int64(0)
	switch {
	case gracePeriodOverride != nil:
		grace = *gracePeriodOverride
	case current.Spec.TerminationGracePeriodSeconds != nil:
		grace = *current.Spec.TerminationGracePeriodSeconds
	}
	timeout := max(minKillTimeout, time.Duration(grace)*time.Second*3/2)
	c.workers.update(runCtx, current, true, false, gracePeriodOverride)
	t := c.clock.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C():
		c.dropKillWaiter(pod.UID, done)
		return fmt.Errorf("kill pod %s/%s: not stopped within %v", pod.Namespace, pod.Name, timeout)
	case <-ctx.Done():
		c.dropKillWaiter(pod.UID, done)
		return fmt.Errorf("kill pod %s/%s: %w", pod.Namespace, pod.Name, ctx.Err())
	}
}

// dropKillWaiter forgets the KillPod waiter done of pod uid, which gave up
// (a pod that never stops must not collect one per eviction attempt).
func (c *Controller) dropKillWaiter(uid types.UID, done chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	waiters := slices.DeleteFunc(c.stopped[uid], func(ch chan struct{}) bool { return ch == done })
	if len(waiters) == 0 {
		delete(c.stopped, uid)
	} else {
		c.stopped[uid] = waiters
	}
}

// PodTerminated reports whether the pod with uid is done on this node as
// far as the loop is concerned: its containers are stopped and its final
// status is set (after KillPod, a deletion or the pod finishing), it was
// rejected at admission, or the Controller does not know it (never seen, or
// removed). It is the eviction manager's "pod cleaned up" check (the
// kubelet's PodIsFinished); unlike the kubelet, the pod's volumes, cgroup
// and stopped containers stay until the pod is gone from its source
// (Runtime.RemovePod). Cheap, never blocks, safe for concurrent use.
func (c *Controller) PodTerminated(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.pods[uid]
	return !ok || r.terminated || r.rejected
}

// GarbageCollect runs the runtime's container garbage collection now (see
// GarbageCollector), as the periodic one does: dead containers beyond the
// runtime's limits, and everything of stopped pods the Controller no longer
// knows. It does nothing until every pod source has reported, or when the
// Runtime is no GarbageCollector. It blocks until done; runs never overlap.
// The eviction manager calls it to reclaim disk before evicting pods.
func (c *Controller) GarbageCollect(ctx context.Context) error {
	gc, ok := c.opts.Runtime.(GarbageCollector)
	if !ok || !c.SourcesReady() {
		return nil
	}
	c.gcMu.Lock()
	defer c.gcMu.Unlock()
	return gc.GarbageCollect(ctx, c.known)
}

// DeleteAllUnusedContainers removes the dead containers the node no longer
// needs now, as the kubelet's DeleteAllUnusedContainers before it evicts
// pods for a disk signal: with a Runtime that is an
// UnusedContainerDeleter, also those of the pods that terminated (stopped,
// evicted, rejected) but are not deleted yet, whatever the runtime's
// limits; otherwise it is GarbageCollect. It does nothing until every pod
// source has reported. It blocks until done; runs never overlap with
// GarbageCollect's.
func (c *Controller) DeleteAllUnusedContainers(ctx context.Context) error {
	d, ok := c.opts.Runtime.(UnusedContainerDeleter)
	if !ok {
		return c.GarbageCollect(ctx)
	}
	if !c.SourcesReady() {
		return nil
	}
	c.gcMu.Lock()
	defer c.gcMu.Unlock()
	return d.DeleteAllUnusedContainers(ctx, c.known, c.active)
}

// active reports whether the Controller runs a pod: known, not rejected,
// not terminated.
func (c *Controller) active(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.pods[uid]
	return ok && !r.terminated && !r.rejected
}

// known reports whether the Controller knows a pod, for garbage collection.
func (c *Controller) known(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pods[uid]
	return ok
}

// PodKnown is Store.Known of the Controller's Store.
func (c *Controller) PodKnown(uid types.UID) bool { return c.store.Known(uid) }

// runHousekeeping looks for orphans every HousekeepingPeriod, or every
// idleHousekeepingPeriod while a round found the node holding nothing and
// no kick came since, until ctx is done.
func (c *Controller) runHousekeeping(ctx context.Context) {
	t := c.clock.NewTimer(c.opts.Align.Wait(c.opts.HousekeepingPeriod))
	defer t.Stop()
	idle := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.housekeepingKick:
			// A kick while rounds come every HousekeepingPeriod changes
			// nothing: the next round reads the state anew.
			if idle {
				idle = false
				timers.Stop(t)
				t.Reset(c.opts.Align.Wait(c.opts.HousekeepingPeriod))
			}
		case <-t.C():
			now := c.clock.Now()
			c.loopEntry.Store(&now)
			idle = c.housekeeping(ctx)
			period := c.opts.HousekeepingPeriod
			if idle {
				period = max(period, idleHousekeepingPeriod)
			}
			t.Reset(c.opts.Align.Wait(period))
		}
	}
}

// kickHousekeeping tells housekeeping that what it looks at may have
// changed. It does not block.
func (c *Controller) kickHousekeeping() {
	select {
	case c.housekeepingKick <- struct{}{}:
	default:
	}
}

// cleanupProbes stops the probes of every pod that is no longer active (the
// kubelet's housekeeping does the same with the pods that may still run),
// should a RemovePod have been missed. c.mu is held throughout, as a pod
// becomes active under it before its worker can call AddPod: a pod added
// after the snapshot is not cleaned up.
func (c *Controller) cleanupProbes() {
	if c.opts.Prober == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	active := c.store.Active()
	desired := make(map[types.UID]struct{}, len(active))
	for _, p := range active {
		desired[p.UID] = struct{}{}
	}
	c.opts.Prober.CleanupPods(desired)
}

// runGC removes dead containers every gcPeriod once every source has
// reported (before that, a pod not seen yet is not gone).
func (c *Controller) runGC(ctx context.Context, gc GarbageCollector) {
	t := c.clock.NewTimer(c.opts.Align.Wait(gcPeriod))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if c.SourcesReady() {
				c.gcMu.Lock()
				err := gc.GarbageCollect(ctx, c.known)
				c.gcMu.Unlock()
				if err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).Error(err, "Container garbage collection failed")
				}
			}
			t.Reset(c.opts.Align.Wait(gcPeriod))
		}
	}
}

// housekeeping stops and removes what the runtime runs of pods no source
// knows (pods deleted while the agent was down), once every source has
// reported. Each orphan is stopped in its own goroutine, so its grace period
// holds up nothing else. It reports whether the node holds nothing: the
// sources are ready, the loop knows no pod, the runtime holds none and no
// orphaned mirror pod is left.
func (c *Controller) housekeeping(ctx context.Context) (idle bool) {
	c.cleanupProbes()
	if !c.SourcesReady() {
		return false
	}
	mirrors := c.deleteOrphanedMirrorPods(ctx)
	logger := klog.FromContext(ctx)
	if err := c.opts.Allocations.RemoveOrphans(c.known); err != nil {
		logger.Error(err, "Cannot forget the allocated resources of pods no source knows")
	}
	running, err := c.opts.Runtime.RuntimePods(ctx)
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "Housekeeping cannot list the runtime's pods")
		}
		return false
	}
	if len(running) == 0 && mirrors == 0 && c.store.knowsNone() {
		return true
	}
	for _, pod := range running {
		c.mu.Lock()
		_, known := c.pods[pod.UID]
		skip := known || c.orphans[pod.UID] || c.workers.known(pod.UID)
		if !skip {
			c.orphans[pod.UID] = true
			c.store.setKnown(pod.UID, knownOrphan, true)
		}
		c.mu.Unlock()
		if skip {
			continue
		}
		c.background.Go(func() {
			defer func() {
				c.mu.Lock()
				delete(c.orphans, pod.UID)
				c.store.setKnown(pod.UID, knownOrphan, false)
				c.mu.Unlock()
			}()
			log := logger.WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
			logCtx := klog.NewContext(ctx, log)
			log.Info("Stopping a pod no source knows")
			err := c.opts.Runtime.KillPod(ctx, pod, nil)
			if err == nil {
				if err = c.opts.Runtime.RemovePod(ctx, pod.UID); err != nil {
					err = fmt.Errorf("remove: %w", err)
				}
			}
			if err == nil {
				c.mu.Lock()
				delete(c.terminateRetries, pod.UID)
				c.mu.Unlock()
				return
			}
			// Housekeeping finds it again once its back-off passed.
			t := c.clock.NewTimer(c.retryTerminate(logCtx, pod.UID, "Cannot stop or remove a pod no source knows; will retry", err))
			defer t.Stop()
			select {
			case <-ctx.Done():
			case <-t.C():
			}
		})
	}
	return false
}

// forwardHealth sends each pod UID the sources' HealthUpdates deliver to
// out, until ctx is done.
func forwardHealth(ctx context.Context, sources []ResourceHealthProvider, out chan<- types.UID) {
	cases := make([]reflect.SelectCase, 0, len(sources)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, h := range sources {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(h.HealthUpdates())})
	}
	for {
		i, v, ok := reflect.Select(cases)
		if i == 0 {
			return
		}
		if !ok {
			// A closed source sends nothing more: stop selecting it.
			cases[i].Chan = reflect.Value{}
			continue
		}
		select {
		case out <- v.Interface().(types.UID):
		case <-ctx.Done():
			return
		}
	}
}
