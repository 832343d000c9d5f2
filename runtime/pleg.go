package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodekit/nodekit/internal/timers"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/ticks"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults of PLEGOptions, the kubelet's generic PLEG's.
const (
	DefaultRelistPeriod    = time.Second
	DefaultRelistThreshold = 3 * time.Minute
	DefaultPLEGCapacity    = 1000
	// DefaultEventedRelistPeriod is the pause between relists while the
	// runtime streams container events.
	DefaultEventedRelistPeriod = time.Minute
	// maxEventStreamBackOff caps the wait before reopening a failed
	// container event stream.
	maxEventStreamBackOff = 30 * time.Second
)

// hintCapacity is the queue of pods the runtime's container events name,
// waiting for the PLEG to read them. A hint that does not fit brings a
// relist instead, which finds every change, so the queue need not hold a
// node's worth of pods (a buffered channel allocates all of its capacity
// up front: the events channel's 1000 are the kubelet's). The statuses the
// syncs hand over (Observe) queue in as many; one that does not fit brings a
// relist too.
const hintCapacity = 64

// PodLister is what the PLEG reads the runtime with; *PodManager is one.
type PodLister interface {
	ListPods(ctx context.Context, all bool) ([]podstate.RunningPod, error)
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*podstate.PodStatus, error)
}

// PLEGOptions configures a PLEG. Pods is required.
type PLEGOptions struct {
	Pods PodLister
	// Runtime, if set, is asked for a GetContainerEvents stream: each event
	// makes the PLEG read its pod at once instead of at the next relist
	// (but see SyncsObserved). A runtime without the RPC (containerd 1.6)
	// answers Unimplemented and the PLEG relists only; a broken stream is
	// reopened with back-off.
	Runtime cri.RuntimeService
	// SyncsObserved says that whoever creates and starts the pods'
	// containers hands the PLEG the status it reads after each sync
	// (Observe; Backend does): the PLEG then reads a pod only on the
	// stream's stopped and deleted events, not on created and started ones,
	// which are the agent's own doing, as the kubelet's evented PLEG asks
	// for a relist on container stops only (its pod workers ask for one
	// after each sync). PodsModule sets it.
	SyncsObserved bool
	// RelistPeriod is the pause between relists of all pods while the
	// runtime does not stream container events (default
	// DefaultRelistPeriod).
	RelistPeriod time.Duration
	// EventedRelistPeriod is the pause between relists while the event
	// stream is up, the safety net of the stream (default
	// DefaultEventedRelistPeriod; the kubelet's evented PLEG uses 5
	// minutes). Meanwhile, while a pod worker waits for a fresher status
	// (PodCache.GetNewerThan), the cache is marked fresh every RelistPeriod
	// without a CRI call, once the events received are read: the stream
	// reports every change. While nobody waits, the PLEG sleeps (up to
	// RelistThreshold/2). The stream (re)connecting, or an event that did
	// not fit the queue, brings a relist at once.
	EventedRelistPeriod time.Duration
	// RelistThreshold is how long relisting may stall before Healthy
	// reports the PLEG unhealthy (default DefaultRelistThreshold).
	RelistThreshold time.Duration
	// Capacity is the events channel's buffer; events that do not fit are
	// dropped and counted (default DefaultPLEGCapacity).
	Capacity int
	// Cache receives the statuses; nil means a new one (see PLEG.Cache).
	Cache *PodCache
	// Clock paces relists and measures health (default clock.RealClock{}).
	Clock clock.Clock
	// Align moves each relist of EventedRelistPeriod onto the node's
	// shared ticks (package ticks; nil relists exactly EventedRelistPeriod
	// after the last one). The relists without the event stream keep
	// their own RelistPeriod.
	Align ticks.Align
	// Registerer registers the kubelet's PLEG metrics
	// (kubelet_pleg_relist_duration_seconds and friends); nil registers
	// nothing.
	Registerer prometheus.Registerer
}

// PLEG is the pod lifecycle event generator: it watches the runtime, keeps
// the latest status of every pod in its cache and sends an event for each
// change. It relists all pods every RelistPeriod and, where the runtime
// streams container events, reads a pod as soon as one of its containers
// changes.
type PLEG struct {
	opts    PLEGOptions
	events  chan *podstate.PodLifecycleEvent
	cache   *PodCache
	clock   clock.Clock
	metrics *plegMetrics

	relistTime atomic.Pointer[time.Time]
	// records and reinspect belong to the Run goroutine.
	records   map[types.UID]*podRecord
	reinspect map[types.UID]bool
	hints     chan podHint
	// observed are the statuses the agent's own syncs read (Observe).
	observed chan *podstate.PodStatus
	// streaming is set while the container event stream is up; resync asks
	// Run for a relist at once (the stream connected, or a hint was
	// dropped).
	streaming atomic.Bool
	resync    chan struct{}

	// snapshotMu guards snapshot: every pod's latest record, for Pods,
	// RunningPods and HasPods.
	snapshotMu sync.Mutex
	snapshot   map[types.UID]podstate.RunningPod
}

type podRecord struct {
	old, current *podstate.RunningPod
	// seen is when current was read: a status the agent read before it
	// (Observe) is stale.
	seen time.Time
}

// podHint asks for one pod to be read, from the event stream.
type podHint struct {
	uid             types.UID
	name, namespace string
}

// NewPLEG returns a PLEG for opts, applying defaults. It does no I/O.
func NewPLEG(opts PLEGOptions) (*PLEG, error) {
	if opts.Pods == nil {
		return nil, errors.New("pleg: a pod lister is required")
	}
	if opts.RelistPeriod == 0 {
		opts.RelistPeriod = DefaultRelistPeriod
	}
	if opts.RelistThreshold == 0 {
		opts.RelistThreshold = DefaultRelistThreshold
	}
	if opts.EventedRelistPeriod == 0 {
		opts.EventedRelistPeriod = DefaultEventedRelistPeriod
	}
	if opts.RelistPeriod < 0 || opts.RelistThreshold < 0 || opts.EventedRelistPeriod < 0 {
		return nil, fmt.Errorf("pleg: relist period %v and threshold %v must be positive", opts.RelistPeriod, opts.RelistThreshold)
	}
	if opts.Capacity <= 0 {
		opts.Capacity = DefaultPLEGCapacity
	}
	if opts.Cache == nil {
		opts.Cache = NewPodCache()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	p := &PLEG{
		opts:      opts,
		events:    make(chan *podstate.PodLifecycleEvent, opts.Capacity),
		cache:     opts.Cache,
		clock:     opts.Clock,
		records:   map[types.UID]*podRecord{},
		reinspect: map[types.UID]bool{},
		hints:     make(chan podHint, hintCapacity),
		observed:  make(chan *podstate.PodStatus, hintCapacity),
		resync:    make(chan struct{}, 1),
		snapshot:  map[types.UID]podstate.RunningPod{},
	}
	m, err := newPLEGMetrics(opts.Registerer, p.lastSeen)
	if err != nil {
		return nil, err
	}
	p.metrics = m
	return p, nil
}

// Events returns the channel of pod lifecycle events. It is never closed;
// a consumer that falls behind loses events (counted in
// kubelet_pleg_discard_events), which the next status it reads covers.
func (p *PLEG) Events() <-chan *podstate.PodLifecycleEvent { return p.events }

// Cache returns the cache the PLEG keeps up to date.
func (p *PLEG) Cache() *PodCache { return p.cache }

// Healthy reports whether relisting works: false with "PLEG is not
// healthy: ..." (the text of the kubelet's Ready condition) before the
// first successful relist and when the last one started more than
// RelistThreshold ago.
func (p *PLEG) Healthy() (bool, error) {
	last := p.relistTime.Load()
	if last == nil {
		return false, errors.New("PLEG is not healthy: pleg has yet to be successful")
	}
	if elapsed := p.clock.Since(*last); elapsed > p.opts.RelistThreshold {
		return false, fmt.Errorf("PLEG is not healthy: pleg was last seen active %v ago; threshold is %v", elapsed, p.opts.RelistThreshold)
	}
	return true, nil
}

func (p *PLEG) lastSeen() float64 {
	if last := p.relistTime.Load(); last != nil {
		return float64(last.UnixNano()) / 1e9
	}
	return 0
}

// Run relists until ctx is done, then returns nil. It must be called once.
func (p *PLEG) Run(ctx context.Context) error {
	if p.opts.Runtime != nil {
		streamDone := make(chan struct{})
		defer func() { <-streamDone }()
		streamCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer close(streamDone)
			p.watchEvents(streamCtx)
		}()
	}
	for {
		p.relist(ctx)
		lastFresh := p.clock.Now()
		relistAt := lastFresh.Add(p.opts.Align.Wait(p.opts.EventedRelistPeriod))
		for {
			relist, ok := p.wait(ctx, relistAt, lastFresh)
			if !ok {
				return nil
			}
			if relist {
				break
			}
			p.markFresh(ctx)
			lastFresh = p.clock.Now()
		}
	}
}

// wait serves the pods the event stream names and the statuses the agent
// observed until the next relist (true) or the next time to mark the cache
// fresh (false) has come; ok is false once ctx is done. Without the event
// stream it relists every RelistPeriod. With it, the cache is marked fresh
// every RelistPeriod, counted from lastFresh, only while a pod worker
// waits for a fresher status than it holds: an idle node does not wake up
// each second for nobody. It still does every RelistThreshold/2, so
// Healthy and kubelet_pleg_last_seen_seconds stay current, and relists
// at relistAt (EventedRelistPeriod after the last relist, on the node's
// ticks).
func (p *PLEG) wait(ctx context.Context, relistAt, lastFresh time.Time) (relist, ok bool) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var idle <-chan struct{}
		next := lastFresh.Add(p.opts.RelistPeriod)
		if p.streaming.Load() {
			if now := p.clock.Now(); now.After(next) {
				// Back to the grid of lastFresh: a waiter that just came
				// waits as long as it would have had the ticks gone on.
				next = next.Add((now.Sub(next)/p.opts.RelistPeriod + 1) * p.opts.RelistPeriod)
			}
			if !p.cache.hasWaiters() {
				next = timers.Earliest(relistAt, lastFresh.Add(p.opts.RelistThreshold/2))
				idle = p.cache.waiting
			}
		}
		var due bool
		if timer, due = timers.Arm(p.clock, timer, next, time.Millisecond); due {
			if ctx.Err() != nil {
				return false, false
			}
			return p.relistDue(relistAt), true
		}
		select {
		case <-ctx.Done():
			return false, false
		case <-timer.C():
			return p.relistDue(relistAt), true
		case <-p.resync:
			return true, true
		case h := <-p.hints:
			p.relistPods(ctx, h)
			p.observeSnapshot()
		case st := <-p.observed:
			p.observe(ctx, st)
			p.observeSnapshot()
		case <-idle:
			// A pod worker waits: the timer moves to the grid.
		}
	}
}

// relistDue reports whether the time that came for wait is a relist's
// (true) or only for marking the cache fresh (false).
func (p *PLEG) relistDue(relistAt time.Time) bool {
	return !p.streaming.Load() || !p.clock.Now().Before(relistAt)
}

// markFresh reads the pods of the events received so far, then marks the
// cache fresh as of now without asking the runtime: while the event stream
// is up, a pod without an event did not change.
func (p *PLEG) markFresh(ctx context.Context) {
	select {
	case h := <-p.hints:
		p.relistPods(ctx, h)
	default:
	}
	now := p.clock.Now()
	p.relistTime.Store(&now)
	p.cache.UpdateTime(now)
	p.observeSnapshot()
}

// observeSnapshot sets the running pods and containers gauges from the
// latest records, as a relist sets them.
func (p *PLEG) observeSnapshot() {
	p.metrics.observeRunning(p.Pods())
}

// RunningPods returns the pods with a running container or a ready
// sandbox as of the latest relist or event, without asking the runtime:
// the kubelet's runtime cache (GetPods without the exited). A pod's
// Containers are its running ones; its Sandboxes all of them. A pod whose
// containers all exited and whose sandbox is stopped is not here (HasPods
// still counts it). The caller owns the returned slice, not the pods'
// sandbox slices. Safe for concurrent use.
func (p *PLEG) RunningPods() []podstate.RunningPod {
	p.snapshotMu.Lock()
	defer p.snapshotMu.Unlock()
	out := make([]podstate.RunningPod, 0, len(p.snapshot))
	for _, rp := range p.snapshot {
		if rp, ok := runningOnly(rp); ok {
			out = append(out, rp)
		}
	}
	return out
}

// runningOnly returns rp with its running containers only (a copy of
// the slice when some are not), and whether anything of it runs.
func runningOnly(rp podstate.RunningPod) (podstate.RunningPod, bool) {
	running := 0
	for _, c := range rp.Containers {
		if c.State == podstate.ContainerStateRunning {
			running++
		}
	}
	if running < len(rp.Containers) {
		all := rp.Containers
		rp.Containers = make([]podstate.RunningContainer, 0, running)
		for _, c := range all {
			if c.State == podstate.ContainerStateRunning {
				rp.Containers = append(rp.Containers, c)
			}
		}
	}
	return rp, rp.IsRunning()
}

// Pods returns every pod the runtime held anything of (a sandbox or a
// container, in any state) as of the latest relist or event, without
// asking the runtime, with all its containers and sandboxes. The caller
// owns the returned slice, not the pods' slices. Safe for concurrent use.
func (p *PLEG) Pods() []podstate.RunningPod {
	p.snapshotMu.Lock()
	defer p.snapshotMu.Unlock()
	out := make([]podstate.RunningPod, 0, len(p.snapshot))
	for _, rp := range p.snapshot {
		out = append(out, rp)
	}
	return out
}

// HasPods says whether the runtime held anything of any pod (a sandbox or
// a container, in any state) as of the latest relist or event, without
// asking the runtime: false once the runtime has nothing of a pod left.
// Safe for concurrent use.
func (p *PLEG) HasPods() bool {
	p.snapshotMu.Lock()
	defer p.snapshotMu.Unlock()
	return len(p.snapshot) > 0
}

// ContainerLogPath returns the log path the runtime gave for container id
// of pod uid in the latest status of the pod the PLEG holds (one it read,
// or one the agent read after a sync and handed over with Observe), and
// whether it holds the container; it does not ask the runtime. A
// container's log path does not change while it exists. Safe for
// concurrent use.
func (p *PLEG) ContainerLogPath(uid types.UID, id string) (string, bool) {
	return p.cache.logPath(uid, id)
}

// Forget drops the pod from RunningPods until a relist or an event shows
// it again: its removal from the runtime was just done.
func (p *PLEG) Forget(uid types.UID) {
	p.snapshotMu.Lock()
	defer p.snapshotMu.Unlock()
	delete(p.snapshot, uid)
}

// Observe hands the PLEG a pod's status the agent just read from the
// runtime itself (after a sync that created or started something): the
// PLEG compares it with its record of the pod, as it would a status it
// read, and sends the events of the changes, without asking the runtime
// again; the kubelet asks its PLEG for a relist of the pod after each sync
// instead. A status older than what the PLEG last read of the pod is
// ignored. It does not block (a full queue brings a relist instead); st is
// kept and must not be modified afterwards. Safe for concurrent use.
func (p *PLEG) Observe(st *podstate.PodStatus) {
	select {
	case p.observed <- st:
	default:
		p.requestRelist()
	}
}

// Reinspect asks the PLEG to read the pod at once (the agent could not
// read it after a sync). It does not block (a full queue brings a relist
// instead). Safe for concurrent use.
func (p *PLEG) Reinspect(uid types.UID, name, namespace string) {
	select {
	case p.hints <- podHint{uid: uid, name: name, namespace: namespace}:
	default:
		p.requestRelist()
	}
}

// observe reconciles a pod's record with a status the agent read.
func (p *PLEG) observe(ctx context.Context, st *podstate.PodStatus) {
	r := p.records[st.ID]
	if r != nil && st.TimeStamp.Before(r.seen) {
		return
	}
	if r == nil {
		r = &podRecord{}
		p.records[st.ID] = r
	}
	r.current, r.seen = runningFromStatus(st), st.TimeStamp
	p.reconcile(ctx, st.ID, st.TimeStamp, st)
}

// requestRelist asks Run for a relist at once.
func (p *PLEG) requestRelist() { signal(p.resync) }

// relist reads all pods and reconciles every record.
func (p *PLEG) relist(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if last := p.relistTime.Load(); last != nil {
		p.metrics.observeInterval(p.clock.Since(*last))
	}
	ts := p.clock.Now()
	defer func() { p.metrics.observeDuration(p.clock.Since(ts)) }()
	pods, err := p.opts.Pods.ListPods(ctx, true)
	if err != nil {
		logger.Error(err, "PLEG: cannot list pods")
		return
	}
	p.relistTime.Store(&ts)
	p.metrics.observeRunning(pods)
	for _, r := range p.records {
		r.current = nil
	}
	for i := range pods {
		pod := &pods[i]
		r := p.records[pod.ID]
		if r == nil {
			r = &podRecord{}
			p.records[pod.ID] = r
		}
		r.current = pod
	}
	for _, r := range p.records {
		r.seen = ts
	}
	for uid := range p.records {
		p.reconcile(ctx, uid, ts, nil)
	}
	p.cache.UpdateTime(ts)
}

// relistPods reads the pod of h and of any other hints queued, once each.
func (p *PLEG) relistPods(ctx context.Context, first podHint) {
	hints := map[types.UID]podHint{first.uid: first}
	for more := true; more; {
		select {
		case h := <-p.hints:
			hints[h.uid] = h
		default:
			more = false
		}
	}
	for _, h := range hints {
		p.relistPod(ctx, h)
	}
}

// relistPod reads one pod right away.
func (p *PLEG) relistPod(ctx context.Context, h podHint) {
	name, namespace := h.name, h.namespace
	if r := p.records[h.uid]; r != nil && r.current != nil {
		name, namespace = r.current.Name, r.current.Namespace
	}
	st, err := p.opts.Pods.GetPodStatus(ctx, h.uid, name, namespace)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("PLEG: cannot read pod after a container event", "pod", klog.KRef(namespace, name), "podUID", h.uid, "err", err)
		return
	}
	r := p.records[h.uid]
	if r == nil {
		r = &podRecord{}
		p.records[h.uid] = r
	}
	r.current, r.seen = runningFromStatus(st), st.TimeStamp
	p.reconcile(ctx, h.uid, st.TimeStamp, st)
}

// runningFromStatus returns every sandbox and container of st as a
// RunningPod, or nil if the runtime has nothing of the pod.
func runningFromStatus(st *podstate.PodStatus) *podstate.RunningPod {
	if len(st.Sandboxes) == 0 && len(st.Containers) == 0 {
		return nil
	}
	rp := st.RunningPod()
	rp.Containers = rp.Containers[:0]
	for _, c := range st.Containers {
		rp.Containers = append(rp.Containers, podstate.RunningContainer{ID: c.ID, Name: c.Name, State: c.State, SandboxID: c.SandboxID, CreatedAt: c.CreatedAt})
	}
	return &rp
}

// reconcile compares a pod's previous and current records; on a change (or
// when a previous read failed) it reads the pod's status into the cache
// (st, if already read) and sends the events.
func (p *PLEG) reconcile(ctx context.Context, uid types.UID, ts time.Time, st *podstate.PodStatus) {
	logger := klog.FromContext(ctx)
	r := p.records[uid]
	p.snapshotMu.Lock()
	if r.current == nil {
		delete(p.snapshot, uid)
	} else {
		p.snapshot[uid] = *r.current
	}
	p.snapshotMu.Unlock()
	events := computeEvents(uid, r.old, r.current)
	reinspect := p.reinspect[uid]
	delete(p.reinspect, uid)
	if len(events) == 0 && !reinspect {
		if r.old == nil && r.current == nil {
			delete(p.records, uid)
		}
		return
	}
	if r.current == nil {
		// Nothing of the pod is left in the runtime.
		p.cache.Delete(uid)
	} else {
		if st == nil {
			var err error
			st, err = p.opts.Pods.GetPodStatus(ctx, uid, r.current.Name, r.current.Namespace)
			if err != nil {
				logger.V(2).Info("PLEG: cannot read pod status, will retry", "pod", klog.KRef(r.current.Namespace, r.current.Name), "podUID", uid, "err", err)
				p.cache.Set(uid, nil, err, ts)
				p.reinspect[uid] = true
				return
			}
		}
		p.cache.Set(uid, st, nil, ts)
	}
	if len(events) == 0 {
		events = []podstate.PodLifecycleEvent{{ID: uid, Type: podstate.PodSync}}
	}
	r.old = r.current
	if r.current == nil {
		delete(p.records, uid)
	}
	for _, ev := range events {
		if ev.Type == podstate.ContainerChanged {
			continue
		}
		select {
		case p.events <- &ev:
		default:
			p.metrics.discard()
			logger.Error(nil, "PLEG: event channel is full, dropping an event", "podUID", uid, "event", ev.Type)
		}
	}
}

// plegState is a container's state as the PLEG compares them.
type plegState int

const (
	plegNonExistent plegState = iota
	plegRunning
	plegExited
	plegUnknown
)

func toPLEGState(s podstate.ContainerState) plegState {
	switch s {
	case podstate.ContainerStateRunning:
		return plegRunning
	case podstate.ContainerStateExited:
		return plegExited
	}
	return plegUnknown // created counts as unknown, as in the kubelet
}

// computeEvents returns the events for the differences between two records
// of a pod, sandboxes counted as containers.
func computeEvents(uid types.UID, old, cur *podstate.RunningPod) []podstate.PodLifecycleEvent {
	states := func(p *podstate.RunningPod) map[string]plegState {
		m := map[string]plegState{}
		if p == nil {
			return m
		}
		for _, c := range p.Containers {
			m[c.ID] = toPLEGState(c.State)
		}
		for _, c := range p.Sandboxes {
			m[c.ID] = toPLEGState(c.State)
		}
		return m
	}
	before, after := states(old), states(cur)
	var ids []string
	for _, p := range []*podstate.RunningPod{old, cur} {
		if p == nil {
			continue
		}
		for _, list := range [][]podstate.RunningContainer{p.Containers, p.Sandboxes} {
			for _, c := range list {
				ids = append(ids, c.ID)
			}
		}
	}
	var events []podstate.PodLifecycleEvent
	done := map[string]bool{}
	for _, id := range ids {
		if done[id] {
			continue
		}
		done[id] = true
		o, n := before[id], after[id]
		if o == n {
			continue
		}
		switch n {
		case plegRunning:
			events = append(events, podstate.PodLifecycleEvent{ID: uid, Type: podstate.ContainerStarted, Data: id})
		case plegExited:
			events = append(events, podstate.PodLifecycleEvent{ID: uid, Type: podstate.ContainerDied, Data: id})
		case plegUnknown:
			events = append(events, podstate.PodLifecycleEvent{ID: uid, Type: podstate.ContainerChanged, Data: id})
		case plegNonExistent:
			if o != plegExited {
				events = append(events, podstate.PodLifecycleEvent{ID: uid, Type: podstate.ContainerDied, Data: id})
			}
			events = append(events, podstate.PodLifecycleEvent{ID: uid, Type: podstate.ContainerRemoved, Data: id})
		}
	}
	return events
}

// watchEvents turns the runtime's container events into immediate reads of
// their pods, reopening the stream with back-off until ctx is done, and
// giving up for good if the runtime does not implement it.
func (p *PLEG) watchEvents(ctx context.Context) {
	logger := klog.FromContext(ctx)
	backOff := time.Second
	for {
		ch := make(chan *runtimeapi.ContainerEventResponse, 100)
		done := make(chan error, 1)
		connected := false
		go func() {
			done <- p.opts.Runtime.GetContainerEvents(ctx, ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) {
				p.metrics.streamConnected()
				// Changes before the stream was up came without events.
				p.streaming.Store(true)
				p.requestRelist()
			})
		}()
		var err error
	forward:
		for {
			select {
			case ev := <-ch:
				connected = true
				md := ev.GetPodSandboxStatus().GetMetadata()
				if md.GetUid() == "" || p.opts.SyncsObserved && !readsPod(ev.GetContainerEventType()) {
					continue
				}
				select {
				case p.hints <- podHint{uid: types.UID(md.GetUid()), name: md.GetName(), namespace: md.GetNamespace()}:
				default: // a relist will see it
					p.requestRelist()
				}
			case err = <-done:
				break forward
			}
		}
		p.streaming.Store(false)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			logger.Info("Container runtime does not stream container events; relisting only", "relistPeriod", p.opts.RelistPeriod)
			return
		}
		p.metrics.streamError()
		if connected {
			backOff = time.Second
		}
		logger.Error(err, "Container event stream failed, reopening", "backOff", backOff)
		t := p.clock.NewTimer(backOff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		backOff = min(2*backOff, maxEventStreamBackOff)
	}
}

// readsPod reports whether a container event makes a PLEG with
// SyncsObserved read its pod: a stop or a deletion, which the runtime (a
// container exiting) or a garbage collection may cause. Creations and
// starts are the agent's own syncs' doing, which report them
// (PLEG.Observe).
func readsPod(t runtimeapi.ContainerEventType) bool {
	return t == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT || t == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
}
