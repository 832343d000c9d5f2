package pods

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

// callLog records, in order, the calls the Controller makes to its fakes.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(format string, args ...any) {
	l.mu.Lock()
	l.calls = append(l.calls, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *callLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// waitFor polls the log until cond holds, failing the test after a minute
// (a bound on a hang, not a timing assertion).
func (l *callLog) waitFor(t *testing.T, what string, cond func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		calls := l.snapshot()
		if cond(calls) {
			return calls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen; calls: %q", what, calls)
		}
		time.Sleep(time.Millisecond)
	}
}

func count(calls []string, call string) int {
	n := 0
	for _, c := range calls {
		if c == call {
			n++
		}
	}
	return n
}

// indexes returns where each call first appears, -1 for a missing one.
func indexes(calls []string, want ...string) []int {
	out := make([]int, len(want))
	for i, w := range want {
		out[i] = slices.Index(calls, w)
	}
	return out
}

type loggedSources struct{ ch chan podsource.Update }

func (s loggedSources) Updates() <-chan podsource.Update { return s.ch }
func (loggedSources) Names() []string                    { return nil }

// loggedRuntime runs every pod as one running container "app" with the
// runtime ID "c-<pod uid>" and remembers the status options it was given.
type loggedRuntime struct {
	log    *callLog
	events chan *podstate.PodLifecycleEvent

	mu   sync.Mutex
	opts podstatus.GenerateOptions
}

func (r *loggedRuntime) PodStatus(_ context.Context, pod *v1.Pod, opts podstatus.GenerateOptions) (v1.PodStatus, error) {
	r.log.add("PodStatus")
	r.mu.Lock()
	r.opts = opts
	r.mu.Unlock()
	return v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{
		Name: "app", ContainerID: "fake://c-" + string(pod.UID),
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
	}}}, nil
}

func (r *loggedRuntime) SyncPod(context.Context, *v1.Pod) SyncResult {
	r.log.add("SyncPod")
	return SyncResult{}
}

func (r *loggedRuntime) KillPod(context.Context, *v1.Pod, *int64) error {
	r.log.add("KillPod")
	return nil
}

func (r *loggedRuntime) RemovePod(context.Context, types.UID) error {
	r.log.add("runtime.RemovePod")
	return nil
}

func (r *loggedRuntime) RuntimePods(context.Context) ([]*v1.Pod, error) { return nil, nil }

func (r *loggedRuntime) Events() <-chan *podstate.PodLifecycleEvent { return r.events }

func (r *loggedRuntime) statusOptions() podstatus.GenerateOptions {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opts
}

type loggedStatuses struct {
	log *callLog

	mu       sync.Mutex
	statuses map[types.UID]v1.PodStatus
}

func (s *loggedStatuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.statuses[uid]
	return st, ok
}

func (s *loggedStatuses) SetPodStatus(pod *v1.Pod, st v1.PodStatus) {
	s.log.add("SetPodStatus")
	s.mu.Lock()
	s.statuses[pod.UID] = st
	s.mu.Unlock()
}

func (s *loggedStatuses) TerminatePod(*v1.Pod) { s.log.add("TerminatePod") }

func (s *loggedStatuses) RemovePod(uid types.UID) {
	s.log.add("statuses.RemovePod")
	s.mu.Lock()
	delete(s.statuses, uid)
	s.mu.Unlock()
}

// verdict is a fake prober's answer for one container.
type verdict struct{ success, known bool }

type loggedProber struct {
	log     *callLog
	updates chan types.UID

	mu      sync.Mutex
	ready   map[string]verdict
	started map[string]verdict
}

func (p *loggedProber) AddPod(*v1.Pod)                 { p.log.add("AddPod") }
func (p *loggedProber) StopLivenessAndStartup(*v1.Pod) { p.log.add("StopLivenessAndStartup") }
func (p *loggedProber) RemovePod(*v1.Pod)              { p.log.add("prober.RemovePod") }

func (p *loggedProber) CleanupPods(desired map[types.UID]struct{}) {
	uids := make([]string, 0, len(desired))
	for uid := range desired {
		uids = append(uids, string(uid))
	}
	slices.Sort(uids)
	p.log.add("CleanupPods[%s]", strings.Join(uids, " "))
}

func (p *loggedProber) Ready(id string) (bool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.ready[id]
	return v.success, v.known
}

func (p *loggedProber) Started(id string) (bool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.started[id]
	return v.success, v.known
}

func (p *loggedProber) Updates() <-chan types.UID { return p.updates }

func (p *loggedProber) set(id string, ready, started verdict) {
	p.mu.Lock()
	p.ready[id], p.started[id] = ready, started
	p.mu.Unlock()
}

// proberHarness runs a Controller on fakes that log their calls.
type proberHarness struct {
	log     *callLog
	sources loggedSources
	runtime *loggedRuntime
	prober  *loggedProber
	clock   *testclock.FakeClock
}

func startProberHarness(t *testing.T) *proberHarness {
	t.Helper()
	log := &callLog{}
	h := &proberHarness{
		log:     log,
		sources: loggedSources{ch: make(chan podsource.Update)},
		runtime: &loggedRuntime{log: log, events: make(chan *podstate.PodLifecycleEvent)},
		prober:  &loggedProber{log: log, updates: make(chan types.UID), ready: map[string]verdict{}, started: map[string]verdict{}},
		clock:   testclock.NewFakeClock(time.Now()),
	}
	c, err := New(Options{
		Sources:  h.sources,
		Runtime:  h.runtime,
		Statuses: &loggedStatuses{log: log, statuses: map[types.UID]v1.PodStatus{}},
		Node:     knownNode,
		Prober:   h.prober,
		Clock:    h.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return h
}

func (h *proberHarness) send(op podsource.Op, pods ...*v1.Pod) {
	h.sources.ch <- podsource.Update{Op: op, Pods: pods, Source: podsource.APIServerSource}
}

func probedPod(uid string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid), CreationTimestamp: metav1.Now()},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox",
			ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}}}},
	}
}

// TestControllerProbesPodsItSyncs: each sync gives the pod to the prober
// after its status was set, once before the runtime acts and once with the
// status the runtime's sync produced; the status is generated from the
// prober's Ready and Started, which tell a known failure from no verdict;
// a prober update syncs the pod again.
func TestControllerProbesPodsItSyncs(t *testing.T) {
	h := startProberHarness(t)
	h.send(podsource.OpAdd, probedPod("a"))
	calls := h.log.waitFor(t, "a sync with the prober", func(c []string) bool {
		return count(c, "SyncPod") == 1 && count(c, "AddPod") == 2
	})
	want := []string{"PodStatus", "SetPodStatus", "AddPod", "SyncPod", "PodStatus", "SetPodStatus", "AddPod"}
	if got := calls[:len(want)]; !slices.Equal(got, want) {
		t.Fatalf("first sync calls = %q, want %q", got, want)
	}

	opts := h.runtime.statusOptions()
	if opts.Readiness == nil || opts.Startup == nil {
		t.Fatal("the status options carry no prober results")
	}
	for _, tc := range []struct{ ready, started verdict }{
		{verdict{true, true}, verdict{true, true}},
		{verdict{false, true}, verdict{false, true}},
		// No verdict is not a failure: the status generator needs to know.
		{verdict{false, false}, verdict{false, false}},
	} {
		h.prober.set("c-a", tc.ready, tc.started)
		if s, k := opts.Readiness("c-a"); (verdict{s, k}) != tc.ready {
			t.Errorf("Readiness = %v, want the prober's %v", verdict{s, k}, tc.ready)
		}
		if s, k := opts.Startup("c-a"); (verdict{s, k}) != tc.started {
			t.Errorf("Startup = %v, want the prober's %v", verdict{s, k}, tc.started)
		}
	}

	h.prober.updates <- "a"
	h.log.waitFor(t, "a sync after a prober update", func(c []string) bool { return count(c, "SyncPod") == 2 })
}

// TestControllerStopsProbesOfTerminatingPod: before a pod's containers are
// stopped, liveness and startup probing stops; once they are, the pod's
// probing stops altogether.
func TestControllerStopsProbesOfTerminatingPod(t *testing.T) {
	h := startProberHarness(t)
	pod := probedPod("a")
	h.send(podsource.OpAdd, pod)
	h.log.waitFor(t, "a sync", func(c []string) bool { return count(c, "SyncPod") == 1 })

	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	h.send(podsource.OpDelete, deleted)
	calls := h.log.waitFor(t, "the pod stopped", func(c []string) bool { return count(c, "prober.RemovePod") == 1 })
	at := indexes(calls, "StopLivenessAndStartup", "KillPod", "prober.RemovePod")
	if at[0] < 0 || at[0] > at[1] || at[1] > at[2] {
		t.Fatalf("calls = %q: want StopLivenessAndStartup, then KillPod, then the prober's RemovePod", calls)
	}
	if n := count(calls, "AddPod"); n != 2 {
		t.Errorf("AddPod called %d times, want 2 (the first sync only): a terminating pod is not added again", n)
	}
}

// TestControllerHousekeepingCleansUpProbes: housekeeping tells the prober
// which pods may still run: the active ones.
func TestControllerHousekeepingCleansUpProbes(t *testing.T) {
	h := startProberHarness(t)
	h.send(podsource.OpAdd, probedPod("a"), probedPod("b"))
	h.log.waitFor(t, "both pods synced", func(c []string) bool { return count(c, "SyncPod") == 2 })
	step := func(want string) {
		t.Helper()
		h.log.waitFor(t, want, func(c []string) bool {
			h.clock.Step(DefaultHousekeepingPeriod)
			return slices.Contains(c, want)
		})
	}
	step("CleanupPods[a b]")

	h.send(podsource.OpRemove, probedPod("b"))
	h.log.waitFor(t, "pod b removed", func(c []string) bool { return count(c, "statuses.RemovePod") == 1 })
	step("CleanupPods[a]")
}
