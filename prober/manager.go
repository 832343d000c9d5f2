package prober

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/podstate"
)

// DefaultParallelism is Options.Parallelism's default.
const DefaultParallelism = 64

// Options configure a Manager. PodStatus is required.
type Options struct {
	// PodStatus returns the latest API status the agent generated for a pod
	// (podstatus.Manager.GetPodStatus). Required.
	PodStatus PodStatusFunc
	// Exec runs exec probes' commands (cri-api's RuntimeService satisfies
	// it). Nil leaves exec probes without a runner: each run errors, which
	// records an Unhealthy event and leaves the result unchanged, unless
	// Handlers replaces the exec handler.
	Exec ExecRunner
	// Handlers replace the default handler of their Kind, or add one for a
	// kind the defaults lack. Two handlers of one kind are an error.
	Handlers []Handler
	// Recorder receives the Unhealthy and ProbeWarning events. Nil records
	// none.
	Recorder record.EventRecorder
	// Clock schedules probes and measures initial delays. Default: the real
	// clock.
	Clock clock.Clock
	// Registerer receives prober_probe_total and
	// prober_probe_duration_seconds. The kubelet serves them on
	// /metrics/probes, from a registry of their own. Nil records none.
	Registerer prometheus.Registerer
	// Parallelism is how many probe runs proceed at once before further
	// due runs wait for one to finish; a run that has lasted 100 ms no
	// longer counts, so slow and hung probes delay others by 100 ms at
	// most. It is also how many probe goroutines stay parked between runs.
	// Default DefaultParallelism.
	Parallelism int
}

// Manager runs the probes of the pods it is given and caches their results,
// as the kubelet's prober manager: one logical worker per (pod, container,
// probe type), scheduled by one goroutine and run on a pool of reusable
// goroutines (see the package documentation for the exact semantics).
//
// All methods are safe for concurrent use and never block on a probe.
type Manager struct {
	podStatus PodStatusFunc
	handlers  map[Kind]Handler
	recorder  record.EventRecorder
	clock     clock.Clock
	metrics   *metrics
	start     time.Time

	results  *resultCache
	notifier *notifier
	pool     *pool

	// jitter returns the random initial delay within period; rand by
	// default, fixed in tests.
	jitter func(period time.Duration) time.Duration
	// resolution is how late the scheduler may start a run.
	resolution time.Duration

	mu       sync.Mutex
	workers  map[probeKey]*worker
	heap     workerHeap
	inflight int
	started  bool
	wake     chan struct{}
}

// probeKey identifies a worker.
type probeKey struct {
	uid       types.UID
	container string
	probeType ProbeType
}

// New returns a Manager. It does no I/O and starts nothing: probes run once
// Run is called.
func New(opts Options) (*Manager, error) {
	if opts.PodStatus == nil {
		return nil, errors.New("prober: Options.PodStatus is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = DefaultParallelism
	}
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		podStatus:  opts.PodStatus,
		handlers:   DefaultHandlers(opts.Exec),
		recorder:   opts.Recorder,
		clock:      opts.Clock,
		metrics:    met,
		start:      opts.Clock.Now(),
		results:    newResultCache(),
		notifier:   newNotifier(),
		jitter:     func(p time.Duration) time.Duration { return time.Duration(rand.Float64() * float64(p)) },
		resolution: schedulerResolution,
		workers:    make(map[probeKey]*worker),
		wake:       make(chan struct{}, 1),
	}
	given := make(map[Kind]Handler, len(opts.Handlers))
	for _, h := range opts.Handlers {
		if h == nil {
			continue
		}
		k := h.Kind()
		if k == "" {
			return nil, fmt.Errorf("prober: handler %T has no kind", h)
		}
		if prev, ok := given[k]; ok {
			return nil, fmt.Errorf("prober: two handlers for kind %q: %T and %T", k, prev, h)
		}
		given[k] = h
		m.handlers[k] = h
	}
	m.pool = newPool(opts.Parallelism, opts.Clock, m.execute)
	return m, nil
}

// DefaultHandlers returns a new map of the default handlers by kind: exec
// (running commands with runner), httpGet, tcpSocket and grpc.
func DefaultHandlers(runner ExecRunner) map[Kind]Handler {
	return map[Kind]Handler{
		KindExec:      NewExecHandler(runner),
		KindHTTPGet:   NewHTTPHandler(),
		KindTCPSocket: NewTCPHandler(),
		KindGRPC:      NewGRPCHandler(),
	}
}

// probedContainers returns the containers of pod that get probe workers:
// the regular ones and the restartable init containers (sidecars).
func probedContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.Containers))
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			out = append(out, &pod.Spec.InitContainers[i])
		}
	}
	return out
}

func isSidecar(c *v1.Container) bool { return podstate.IsRestartableInitContainer(c) }

func probeOf(c *v1.Container, t ProbeType) *v1.Probe {
	switch t {
	case Liveness:
		return c.LivenessProbe
	case Readiness:
		return c.ReadinessProbe
	default:
		return c.StartupProbe
	}
}

// AddPod starts a worker for every probe of pod's containers and sidecars
// that has none yet; it is idempotent and cheap when nothing changed, so the
// pod lifecycle loop calls it on every sync of a pod that should run. A
// worker keeps the container spec it was started with (probes cannot change
// in a pod), but reads the pod's metadata (its deletionTimestamp) from the
// latest pod given here. AddPod keeps pod: the caller must not modify it
// afterwards.
//
// It also triggers an immediate readiness probe for every running, started
// container whose readiness is not Success in the pod's current status, as
// the kubelet's UpdatePodStatus does, so a container turns ready without
// waiting a period: call it after the pod's status was set.
func (m *Manager) AddPod(pod *v1.Pod) {
	if pod == nil {
		return
	}
	readiness := false
	m.mu.Lock()
	for _, c := range probedContainers(pod) {
		for t := Liveness; t < numProbeTypes; t++ {
			p := probeOf(c, t)
			if p == nil {
				continue
			}
			key := probeKey{uid: pod.UID, container: c.Name, probeType: t}
			if w, ok := m.workers[key]; ok {
				w.pod.Store(pod)
				readiness = readiness || t == Readiness
				continue
			}
			w := newWorker(pod, c, t, p)
			m.workers[key] = w
			now := m.clock.Now()
			w.next, w.origin = now, now
			// After the agent (re)started, spread the first runs over a
			// period so probes do not stampede.
			if w.period > m.clock.Since(m.start) {
				w.next = now.Add(m.jitter(w.period))
				w.origin = w.next
			}
			heap.Push(&m.heap, w)
			if w.heapIndex == 0 {
				m.wakeScheduler()
			}
		}
	}
	m.mu.Unlock()
	if readiness {
		m.triggerReadiness(pod.UID)
	}
}

// triggerReadiness runs at once the readiness workers of the pod's running,
// started containers whose readiness is not Success.
func (m *Manager) triggerReadiness(uid types.UID) {
	status, ok := m.podStatus(uid)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, list := range [][]v1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses} {
		for i := range list {
			c := &list[i]
			if c.State.Running == nil || c.Started == nil || !*c.Started {
				continue
			}
			w, ok := m.workers[probeKey{uid: uid, container: c.Name, probeType: Readiness}]
			if !ok {
				continue
			}
			if r, ok := m.results.get(Readiness, runtimeID(c.ContainerID)); ok && r == podstate.ProbeSuccess {
				continue
			}
			m.triggerLocked(w)
		}
	}
}

// triggerLocked makes w run now and restarts its period from then, as the
// kubelet's manual trigger; a worker that is running, or has not run yet,
// runs again right after. m.mu must be held.
func (m *Manager) triggerLocked(w *worker) {
	if w.stopped {
		return
	}
	if w.running || !w.ran {
		w.triggered = true
		return
	}
	now := m.clock.Now()
	w.next, w.origin = now, now
	heap.Fix(&m.heap, w.heapIndex)
	if w.heapIndex == 0 {
		m.wakeScheduler()
	}
}

// StopLivenessAndStartup stops the liveness and startup workers of pod's
// regular containers (not of its sidecars, as the kubelet), dropping their
// results, so nothing restarts them while the pod terminates. The loop
// calls it when it starts terminating a pod (the kubelet's
// SyncTerminatingPod), before killing its containers.
func (m *Manager) StopLivenessAndStartup(pod *v1.Pod) {
	if pod == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range pod.Spec.Containers {
		for _, t := range []ProbeType{Liveness, Startup} {
			if w, ok := m.workers[probeKey{uid: pod.UID, container: pod.Spec.Containers[i].Name, probeType: t}]; ok {
				m.stopLocked(w)
			}
		}
	}
}

// RemovePod stops all workers of pod and drops their results. The loop
// calls it once the pod's containers are stopped.
func (m *Manager) RemovePod(pod *v1.Pod) {
	if pod == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, w := range m.workers {
		if key.uid == pod.UID {
			m.stopLocked(w)
		}
	}
}

// CleanupPods stops the workers, and drops the results, of every pod whose
// UID is not in desired. The loop calls it from housekeeping with the pods
// that may still be running.
func (m *Manager) CleanupPods(desired map[types.UID]struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, w := range m.workers {
		if _, ok := desired[key.uid]; !ok {
			m.stopLocked(w)
		}
	}
}

// stopLocked stops w: it leaves the schedule, its result goes and its
// in-flight run, if any, is cancelled and discarded. m.mu must be held.
func (m *Manager) stopLocked(w *worker) {
	if w.stopped {
		return
	}
	if m.workers[w.key] == w {
		delete(m.workers, w.key)
	}
	m.results.stop(w)
	if w.cancel != nil {
		w.cancel()
	}
	if w.heapIndex >= 0 {
		heap.Remove(&m.heap, w.heapIndex)
	}
	if !w.running {
		m.metrics.forget(w)
	}
}

// Liveness returns the liveness verdict on the container with the runtime
// ID containerID (after "://" in v1.ContainerStatus.ContainerID):
// ProbeUnknown when there is none.
func (m *Manager) Liveness(containerID string) podstate.ProbeResult {
	r, _ := m.results.get(Liveness, containerID)
	return r
}

// Startup returns the startup verdict on the container, as Liveness.
func (m *Manager) Startup(containerID string) podstate.ProbeResult {
	r, _ := m.results.get(Startup, containerID)
	return r
}

// Readiness returns the readiness verdict on the container, as Liveness.
func (m *Manager) Readiness(containerID string) podstate.ProbeResult {
	r, _ := m.results.get(Readiness, containerID)
	return r
}

// Result returns the cached verdict of probe type t on the container and
// whether there is one. A worker that saw a new container caches its
// initial verdict (readiness Failure, liveness Success, startup Unknown)
// until its probe crosses a threshold, except for a container that was
// already running before the agent started, which has no verdict until
// then (the kubelet's behaviour with ChangeContainerStatusOnKubeletRestart
// off, its default).
func (m *Manager) Result(t ProbeType, containerID string) (podstate.ProbeResult, bool) {
	return m.results.get(t, containerID)
}

// Ready reports whether the container's readiness verdict is Success, and
// whether there is a verdict: the shape of the pod status generator's
// readiness input (podstatus.ProbeResultFunc).
func (m *Manager) Ready(containerID string) (success, known bool) {
	r, ok := m.results.get(Readiness, containerID)
	return r == podstate.ProbeSuccess, ok
}

// Started is Ready for the startup verdict: the status generator's startup
// input.
func (m *Manager) Started(containerID string) (success, known bool) {
	r, ok := m.results.get(Startup, containerID)
	return r == podstate.ProbeSuccess, ok
}

// Updates returns the channel that receives the UID of a pod whose cached
// results changed, so the loop syncs it: every readiness and startup
// change, and a liveness change to Failure (the kubelet's sync loop acts on
// no other liveness change). A change is what a probe run left behind: a
// run that sets a result and stops its worker (dropping the result) changes
// nothing. A pod is queued at most once until received, so a worker never
// waits on the consumer. There is one channel per Manager; it is fed while
// Run runs and is never closed.
func (m *Manager) Updates() <-chan types.UID {
	return m.notifier.out
}

// Run schedules and runs the probes until ctx is done, then cancels the
// runs in flight, waits for them and returns nil. It may be called once.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errors.New("prober: Run called twice")
	}
	m.started = true
	m.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { m.notifier.run(ctx) })
	m.schedule(ctx)
	m.pool.close()
	wg.Wait()
	return nil
}

// worker is one (pod, container, probe type).
type worker struct {
	// Set at creation, read-only after.
	key       probeKey
	probeType ProbeType
	container v1.Container
	spec      *v1.Probe
	period    time.Duration
	initial   podstate.ProbeResult
	isInit    bool
	sidecar   bool
	podName   string
	namespace string

	// pod is the latest pod AddPod was given.
	pod atomic.Pointer[v1.Pod]

	// Owned by the goroutine running the worker (runs never overlap).
	lastResult podstate.ProbeResult
	resultRun  int
	onHold     bool
	noted      bool // unsupported alpha fields were logged
	target     Target
	metrics    workerMetrics

	// Guarded by resultCache.mu for writes; the running goroutine, their
	// only writer, reads fullID and id freely. stopped is written under
	// both Manager.mu and resultCache.mu and read under either.
	fullID  string
	id      string
	stopped bool

	// Guarded by Manager.mu.
	heapIndex int
	next      time.Time // when the next run is due
	origin    time.Time // start of the period grid (the kubelet's ticker)
	running   bool
	ran       bool // has run at least once
	triggered bool // run again as soon as possible
	ctx       context.Context
	cancel    context.CancelFunc

	// slot is the pool goroutine's slot while the worker runs.
	slot *runSlot
}

func newWorker(pod *v1.Pod, c *v1.Container, t ProbeType, p *v1.Probe) *worker {
	w := &worker{
		key:       probeKey{uid: pod.UID, container: c.Name, probeType: t},
		probeType: t,
		container: *c,
		spec:      withDefaults(p),
		podName:   pod.Name,
		namespace: pod.Namespace,
		heapIndex: -1,
		// The kubelet's worker starts with a zero lastResult, which is
		// its Success.
		lastResult: podstate.ProbeSuccess,
	}
	w.pod.Store(pod)
	w.period = time.Duration(w.spec.PeriodSeconds) * time.Second
	switch t {
	case Liveness:
		w.initial = podstate.ProbeSuccess
	case Readiness:
		w.initial = podstate.ProbeFailure
	default:
		w.initial = podstate.ProbeUnknown
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			w.isInit = true
			w.sidecar = isSidecar(c)
		}
	}
	w.target = Target{ProbeType: t, Container: &w.container, Probe: w.spec,
		Timeout: time.Duration(w.spec.TimeoutSeconds) * time.Second}
	return w
}

// withDefaults returns p with the API defaults (SetDefaults_Probe) in its
// zero fields: a pod that skipped defaulting must not probe in a busy loop.
func withDefaults(p *v1.Probe) *v1.Probe {
	out := p.DeepCopy()
	if out.TimeoutSeconds <= 0 {
		out.TimeoutSeconds = 1
	}
	if out.PeriodSeconds <= 0 {
		out.PeriodSeconds = 10
	}
	if out.SuccessThreshold <= 0 {
		out.SuccessThreshold = 1
	}
	if out.FailureThreshold <= 0 {
		out.FailureThreshold = 3
	}
	return out
}

// execute is one probe run of w on a pool goroutine. The loop is told of
// the run's net change to w's cached result: a worker that sets a result
// and stops in the same run (a container that exited for good, seen by a
// worker started by the sync that followed) changes nothing, so its sync
// does not start another.
func (m *Manager) execute(w *worker) {
	before := m.results.state(w)
	keep := m.runOnce(w)
	m.finish(w, keep, before)
}

// changed reports whether w's cached result differs from before in a way
// the loop acts on: any change of readiness or startup, and liveness
// turning Failure (the kubelet's sync loop ignores other liveness changes).
// A new container's result counts as a change when there is one.
func (m *Manager) changed(w *worker, before resultState) bool {
	after := m.results.state(w)
	if after.id == before.id && after.ok == before.ok && after.r == before.r {
		return false
	}
	if after.id != before.id && !after.ok {
		return false
	}
	return w.probeType != Liveness || (after.ok && after.r == podstate.ProbeFailure)
}

// runOnce runs doProbe, treating a panic as a run to forget (the kubelet's
// worker eats panics too).
func (m *Manager) runOnce(w *worker) (keep bool) {
	defer func() {
		if r := recover(); r != nil {
			logger(w.ctx).Error(fmt.Errorf("%v", r), "Probe worker panicked", "probeType", w.probeType,
				"pod", podRef(w), "containerName", w.container.Name)
			keep = true
		}
	}()
	return m.doProbe(w.ctx, w)
}

// finish reschedules w after a run, or retires it, and tells the loop if
// the run changed w's result (before is what it was).
func (m *Manager) finish(w *worker, keep bool, before resultState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w.running = false
	w.ran = true
	m.inflight--
	m.pool.willReturn(w.slot)
	if w.stopped {
		// Stopped during the run: whoever stopped it knows.
		m.metrics.forget(w)
		return
	}
	if !keep {
		m.stopLocked(w)
	}
	if m.changed(w, before) {
		m.notifier.notify(w.key.uid)
	}
	if !keep {
		return
	}
	now := m.clock.Now()
	due := w.next
	switch {
	case w.triggered:
		// A manual trigger restarts the ticker from the moment it is taken.
		w.triggered = false
		w.next, w.origin = now, now
	default:
		// The next tick of the period grid after this run was due; a tick
		// that passed during the run is taken at once (a ticker keeps one).
		next := w.origin.Add((due.Sub(w.origin)/w.period + 1) * w.period)
		if next.Before(now) {
			next = now
		}
		w.next = next
	}
	heap.Push(&m.heap, w)
	if w.heapIndex == 0 {
		m.wakeScheduler()
	}
}
