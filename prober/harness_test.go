package prober

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// scriptHandler is a Handler of KindExec (the tests' probes are exec
// probes) whose results the test sets per probe type.
type scriptHandler struct {
	mu    sync.Mutex
	next  map[ProbeType][]Result // consumed in order; the last one repeats
	out   string
	err   error
	calls map[ProbeType]int
	// block makes Probe of a type wait for its channel (or ctx) before
	// answering.
	block map[ProbeType]chan struct{}
	// entered receives a value when a blocked Probe starts waiting.
	entered chan ProbeType
}

func newScriptHandler() *scriptHandler {
	return &scriptHandler{next: map[ProbeType][]Result{}, calls: map[ProbeType]int{},
		block: map[ProbeType]chan struct{}{}, entered: make(chan ProbeType, 100)}
}

func (h *scriptHandler) Kind() Kind { return KindExec }

func (h *scriptHandler) Probe(ctx context.Context, t *Target) (Result, string, error) {
	h.mu.Lock()
	h.calls[t.ProbeType]++
	block := h.block[t.ProbeType]
	h.mu.Unlock()
	if block != nil {
		h.entered <- t.ProbeType
		select {
		case <-block:
		case <-ctx.Done():
			return Failure, "canceled", nil
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return Unknown, "", h.err
	}
	seq := h.next[t.ProbeType]
	r := Success
	if len(seq) > 0 {
		r = seq[0]
		if len(seq) > 1 {
			h.next[t.ProbeType] = seq[1:]
		}
	}
	return r, h.out, nil
}

func (h *scriptHandler) set(t ProbeType, rs ...Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next[t] = rs
}

// blockType makes probes of type t wait until the returned func is called.
func (h *scriptHandler) blockType(t ProbeType) (release func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	h.block[t] = ch
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.block, t)
			h.mu.Unlock()
			close(ch)
		})
	}
}

func (h *scriptHandler) count(t ProbeType) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[t]
}

type harness struct {
	t        *testing.T
	clock    *testingclock.FakeClock
	m        *Manager
	h        *scriptHandler
	recorder *record.FakeRecorder
	reg      *prometheus.Registry

	mu       sync.Mutex
	statuses map[types.UID]v1.PodStatus

	cancel context.CancelFunc
	done   chan struct{}
}

// newHarness starts a Manager on a fake clock that stands agentAge after
// the Manager's creation, with the initial jitter fixed to jitter.
func newHarness(t *testing.T, agentAge, jitter time.Duration) *harness {
	t.Helper()
	h := &harness{t: t, clock: testingclock.NewFakeClock(t0), h: newScriptHandler(),
		recorder: record.NewFakeRecorder(1000), reg: prometheus.NewRegistry(), statuses: map[types.UID]v1.PodStatus{}}
	m, err := New(Options{
		PodStatus:  h.podStatus,
		Handlers:   []Handler{h.h},
		Recorder:   h.recorder,
		Clock:      h.clock,
		Registerer: h.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.jitter = func(time.Duration) time.Duration { return jitter }
	h.m = m
	h.clock.Step(agentAge)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		if err := m.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
}

func (h *harness) podStatus(uid types.UID) (v1.PodStatus, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.statuses[uid]
	return s, ok
}

func (h *harness) setStatus(uid types.UID, s v1.PodStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.statuses[uid] = s
}

// idle reports whether no run is in flight or due.
func (m *Manager) idle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inflight == 0 && (len(m.heap) == 0 || m.heap[0].next.After(m.clock.Now()))
}

// settle waits until the Manager is idle.
func (h *harness) settle() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !h.m.idle() {
		if time.Now().After(deadline) {
			h.t.Fatal("the prober did not settle")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// step advances the fake clock by d, one second at a time, settling after
// each.
func (h *harness) step(d time.Duration) {
	h.t.Helper()
	h.settle()
	for d > 0 {
		s := min(d, time.Second)
		h.clock.Step(s)
		d -= s
		h.settle()
	}
}

// waitFor polls cond until it holds.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (h *harness) add(pod *v1.Pod) {
	h.t.Helper()
	h.m.AddPod(pod)
	h.settle()
}

func (m *Manager) workerCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.workers)
}

// execProbe is an exec probe with the given period and thresholds.
func execProbe(period, success, failure int32) *v1.Probe {
	return &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds:    period,
		TimeoutSeconds:   1,
		SuccessThreshold: success,
		FailureThreshold: failure,
	}
}

// testPod is a pod with one container "app".
func testPod(uid types.UID, c v1.Container) *v1.Pod {
	c.Name = "app"
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: uid},
		Spec:       v1.PodSpec{Containers: []v1.Container{c}, RestartPolicy: v1.RestartPolicyAlways},
	}
}

// running is the status of a pod whose container "app" runs as id since
// startedAt.
func running(id string, startedAt time.Time, started bool) v1.PodStatus {
	return v1.PodStatus{
		Phase: v1.PodRunning,
		PodIP: "10.0.0.1",
		ContainerStatuses: []v1.ContainerStatus{{
			Name:        "app",
			ContainerID: "fake://" + id,
			State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
			Started:     ptr.To(started),
		}},
	}
}

// result returns the cached result of t on container id, "none" if absent.
func (h *harness) result(t ProbeType, id string) string {
	r, ok := h.m.Result(t, id)
	if !ok {
		return "none"
	}
	return r.String()
}

func (h *harness) expect(t ProbeType, id, want string) {
	h.t.Helper()
	if got := h.result(t, id); got != want {
		h.t.Fatalf("%s result of %s = %s, want %s", t, id, got, want)
	}
}

// events drains the recorded events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// queued returns how many UIDs are queued or in hand.
func (n *notifier) queued() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := len(n.queue) - n.head
	if n.sending != "" {
		p++
	}
	return p
}
