package nodeshutdown

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func testPod(name string, priority int32, grace *int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 3},
		Spec:       v1.PodSpec{Priority: ptr.To(priority), TerminationGracePeriodSeconds: grace},
	}
}

// kill is one KillPod call.
type kill struct {
	pod    string
	grace  int64
	status v1.PodStatus
}

// killer is a KillPodFunc that records its calls and, for the pods in
// block, waits until released.
type killer struct {
	mu      sync.Mutex
	calls   []kill
	block   map[string]chan struct{}
	started chan string
}

func newKiller(block ...string) *killer {
	k := &killer{block: map[string]chan struct{}{}, started: make(chan string, 100)}
	for _, b := range block {
		k.block[b] = make(chan struct{})
	}
	return k
}

func (k *killer) kill(ctx context.Context, pod *v1.Pod, grace *int64, statusFn func(*v1.PodStatus)) error {
	st := v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}
	statusFn(&st)
	k.mu.Lock()
	k.calls = append(k.calls, kill{pod: pod.Name, grace: *grace, status: st})
	k.mu.Unlock()
	k.started <- pod.Name
	if ch, ok := k.block[pod.Name]; ok {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	return nil
}

func (k *killer) snapshot() []kill {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.calls)
}

func newTestManager(t *testing.T, o Options) *Manager {
	t.Helper()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGroupsFromGracePeriods(t *testing.T) {
	m := newTestManager(t, Options{GracePeriod: 30 * time.Second, GracePeriodCriticalPods: 10 * time.Second,
		ActivePods: func() []*v1.Pod { return nil }, KillPod: newKiller().kill})
	want := []kubeletconfig.ShutdownGracePeriodByPodPriority{
		{Priority: 0, ShutdownGracePeriodSeconds: 20},
		{Priority: 2000000000, ShutdownGracePeriodSeconds: 10},
	}
	if got := m.Periods(); !slices.Equal(got, want) {
		t.Errorf("periods = %v, want %v", got, want)
	}
	if got := m.PeriodRequested(); got != 30*time.Second {
		t.Errorf("PeriodRequested = %v, want 30s", got)
	}

	// By priority: sorted, and replacing the two settings.
	m = newTestManager(t, Options{GracePeriod: time.Hour,
		GracePeriodByPodPriority: []kubeletconfig.ShutdownGracePeriodByPodPriority{
			{Priority: 100000, ShutdownGracePeriodSeconds: 5}, {Priority: 0, ShutdownGracePeriodSeconds: 7},
		},
		ActivePods: func() []*v1.Pod { return nil }, KillPod: newKiller().kill})
	if got := m.Periods(); got[0].Priority != 0 || got[1].Priority != 100000 || m.PeriodRequested() != 12*time.Second {
		t.Errorf("periods = %v (requested %v), want sorted 0, 100000 and 12s", got, m.PeriodRequested())
	}
}

func TestNewRejects(t *testing.T) {
	for name, o := range map[string]Options{
		"critical above total": {GracePeriod: 10 * time.Second, GracePeriodCriticalPods: 20 * time.Second, ActivePods: func() []*v1.Pod { return nil }, KillPod: newKiller().kill},
		"no funcs":             {GracePeriod: 10 * time.Second},
		"negative":             {GracePeriodByPodPriority: []kubeletconfig.ShutdownGracePeriodByPodPriority{{ShutdownGracePeriodSeconds: -1}}, ActivePods: func() []*v1.Pod { return nil }, KillPod: newKiller().kill},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	m, err := New(Options{})
	if err != nil || m.Enabled() {
		t.Errorf("New without grace period = %v, enabled %v; want a disabled manager", err, m != nil && m.Enabled())
	}
}

func TestGroupByPriority(t *testing.T) {
	periods := []kubeletconfig.ShutdownGracePeriodByPodPriority{{Priority: 0}, {Priority: 1000}, {Priority: 2000000000}}
	pods := []*v1.Pod{
		testPod("negative", -5, nil), testPod("zero", 0, nil), testPod("mid", 999, nil), testPod("boundary", 1000, nil),
		testPod("high", 100000, nil), testPod("critical", 2000001000, nil),
	}
	pods = append(pods, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unset"}})
	var got [][]string
	for _, g := range groupByPriority(periods, pods) {
		var names []string
		for _, p := range g.pods {
			names = append(names, p.Name)
		}
		got = append(got, names)
	}
	want := [][]string{{"negative", "zero", "mid", "unset"}, {"boundary", "high"}, {"critical"}}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("group %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestShutdownKillsByPriority: regular pods first with the grace period
// less the critical pods' share (or their own when shorter), critical pods
// only once the regular ones stopped; the node reports the shutdown and
// rejects pods; the final statuses are the kubelet's.
func TestShutdownKillsByPriority(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
	k := newKiller("web")
	rec := record.NewFakeRecorder(10)
	synced := make(chan struct{}, 2)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	active := []*v1.Pod{testPod("web", 0, nil), testPod("short", 0, ptr.To[int64](3)), testPod("dns", 2000001000, nil)}
	m := newTestManager(t, Options{
		GracePeriod: 30 * time.Second, GracePeriodCriticalPods: 10 * time.Second,
		ActivePods: func() []*v1.Pod { return active }, KillPod: k.kill,
		SyncNodeStatus: func() { synced <- struct{}{} }, NodeName: "n1", Recorder: rec, Clock: clk,
		StateFile: filepath.Join(dir, StateFileName), Registerer: reg,
	})
	if ok, _, _ := m.Admit(testPod("new", 0, nil)); !ok || m.ShutdownStatus() != nil {
		t.Fatal("the node rejects pods or reports a shutdown before any")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Handle(t.Context(), true)
	}()
	for range 2 {
		<-k.started
	}
	<-synced
	if err := m.ShutdownStatus(); err == nil || err.Error() != "node is shutting down" {
		t.Errorf("ShutdownStatus = %v, want node is shutting down", err)
	}
	if ok, reason, msg := m.Admit(testPod("new", 0, nil)); ok || reason != "NodeShutdown" || msg != "Pod was rejected as the node is shutting down." {
		t.Errorf("Admit = %v %q %q, want the kubelet's rejection", ok, reason, msg)
	}
	select {
	case name := <-k.started:
		t.Fatalf("%s killed while a regular pod is still stopping", name)
	case <-time.After(50 * time.Millisecond):
	}
	close(k.block["web"])
	if name := <-k.started; name != "dns" {
		t.Fatalf("killed %s after the regular pods, want dns", name)
	}
	<-done

	calls := k.snapshot()
	graces := map[string]int64{}
	for i, c := range calls {
		graces[c.pod] = c.grace
		if i == 2 && c.pod != "dns" {
			t.Errorf("kill order %v: the critical pod is not last", calls)
		}
		st := c.status
		if st.Phase != v1.PodFailed || st.Reason != "Terminated" || st.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("pod %s final status %s/%s/%q, want Failed/Terminated with the shutdown message", c.pod, st.Phase, st.Reason, st.Message)
		}
		var dt *v1.PodCondition
		for i := range st.Conditions {
			if st.Conditions[i].Type == v1.DisruptionTarget {
				dt = &st.Conditions[i]
			}
		}
		if dt == nil || dt.Status != v1.ConditionTrue || dt.Reason != "TerminationByKubelet" || dt.Message != MessageTerminated || dt.ObservedGeneration != 3 || !dt.LastTransitionTime.Time.Equal(clk.Now()) {
			t.Errorf("pod %s DisruptionTarget = %+v, want True TerminationByKubelet with the message, generation 3", c.pod, dt)
		}
		if len(st.Conditions) != 2 {
			t.Errorf("pod %s conditions %v: the others must be kept", c.pod, st.Conditions)
		}
	}
	if want := map[string]int64{"web": 20, "short": 3, "dns": 10}; !mapsEqual(graces, want) {
		t.Errorf("grace periods = %v, want %v", graces, want)
	}
	if ev := <-rec.Events; ev != "Normal NodeShutdown Shutdown manager detected shutdown event" {
		t.Errorf("event %q", ev)
	}
	var st state
	b, err := os.ReadFile(filepath.Join(dir, StateFileName))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil || !st.StartTime.Equal(clk.Now()) || !st.EndTime.Equal(clk.Now()) {
		t.Errorf("state file = %+v (%v), want start and end", st, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kubelet_graceful_shutdown_end_time_seconds Last graceful shutdown end time since unix epoch in seconds
# TYPE kubelet_graceful_shutdown_end_time_seconds gauge
kubelet_graceful_shutdown_end_time_seconds 1.7e+09
# HELP kubelet_graceful_shutdown_start_time_seconds Last graceful shutdown start time since unix epoch in seconds
# TYPE kubelet_graceful_shutdown_start_time_seconds gauge
kubelet_graceful_shutdown_start_time_seconds 1.7e+09
`)); err != nil {
		t.Error(err)
	}

	// A cancellation: Ready and admitting again.
	m.Handle(t.Context(), false)
	if ok, _, _ := m.Admit(testPod("new", 0, nil)); !ok || m.ShutdownStatus() != nil {
		t.Error("after a cancellation the node still reports a shutdown")
	}
	if ev := <-rec.Events; ev != "Normal NodeShutdown Shutdown manager detected shutdown cancellation" {
		t.Errorf("event %q", ev)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestGroupGraceTimesOut: a pod that does not stop within its group's
// grace period does not hold the next group back beyond it.
func TestGroupGraceTimesOut(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	k := newKiller("stuck")
	m := newTestManager(t, Options{
		GracePeriodByPodPriority: []kubeletconfig.ShutdownGracePeriodByPodPriority{{Priority: 0, ShutdownGracePeriodSeconds: 20}, {Priority: 1000, ShutdownGracePeriodSeconds: 5}},
		ActivePods:               func() []*v1.Pod { return []*v1.Pod{testPod("stuck", 0, nil), testPod("db", 5000, nil)} },
		KillPod:                  k.kill, Clock: clk,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Handle(t.Context(), true)
	}()
	if name := <-k.started; name != "stuck" {
		t.Fatalf("first kill %s, want stuck", name)
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(19 * time.Second)
	select {
	case name := <-k.started:
		t.Fatalf("%s killed before the first group's grace period was up", name)
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Second)
	if name := <-k.started; name != "db" {
		t.Fatalf("second kill %s, want db", name)
	}
	// db stopped at once: Handle returns without the group's 5 s.
	<-done
	close(k.block["stuck"])
}

// TestStatusKeepsSucceeded: a pod that already succeeded stays Succeeded.
func TestStatusKeepsSucceeded(t *testing.T) {
	m := newTestManager(t, Options{GracePeriod: time.Second, ActivePods: func() []*v1.Pod { return nil }, KillPod: newKiller().kill})
	st := v1.PodStatus{Phase: v1.PodSucceeded, Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, LastTransitionTime: metav1.Unix(5, 0)}}}
	m.statusFn(testPod("p", 0, nil))(&st)
	if st.Phase != v1.PodSucceeded || st.Reason != ReasonTerminated || len(st.Conditions) != 1 || st.Conditions[0].LastTransitionTime != metav1.Unix(5, 0) {
		t.Errorf("status = %+v, want Succeeded kept, one DisruptionTarget with its old transition time", st)
	}
}

// fakeSource hands its handle to the test and fails its first Watch.
type fakeSource struct {
	watches chan func(context.Context, bool)
	failed  bool
}

func (s *fakeSource) Watch(ctx context.Context, handle func(context.Context, bool)) error {
	if !s.failed {
		s.failed = true
		return os.ErrDeadlineExceeded
	}
	s.watches <- handle
	<-ctx.Done()
	return nil
}

// TestRunWatchesSourcesAndRestoresMetrics: Run restarts a failed Watch,
// hands the source Handle, and sets the gauges from an earlier run's state.
func TestRunWatchesSourcesAndRestoresMetrics(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	src := &fakeSource{watches: make(chan func(context.Context, bool), 1)}
	path := filepath.Join(t.TempDir(), StateFileName)
	if err := writeState(path, state{StartTime: time.Unix(100, 0), EndTime: time.Unix(130, 0)}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	k := newKiller()
	m := newTestManager(t, Options{GracePeriod: 10 * time.Second, Sources: []Source{src}, Clock: clk, StateFile: path, Registerer: reg,
		ActivePods: func() []*v1.Pod { return []*v1.Pod{testPod("a", 0, nil)} }, KillPod: k.kill})
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	if v := testutil.ToFloat64(m.metrics.end); v != 130 {
		t.Errorf("end time gauge %v, want 130 from the state file", v)
	}
	clk.Step(time.Second)
	handle := <-src.watches
	handle(ctx, true)
	if calls := k.snapshot(); len(calls) != 1 || calls[0].pod != "a" || calls[0].grace != 10 {
		t.Errorf("kills %v, want a with 10 s", calls)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestDisabledManager(t *testing.T) {
	m := newTestManager(t, Options{})
	m.Handle(t.Context(), true)
	if ok, _, _ := m.Admit(testPod("p", 0, nil)); !ok || m.ShutdownStatus() != nil {
		t.Error("a disabled manager reacted to a shutdown")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := m.Run(ctx); err != nil {
		t.Error(err)
	}
}

// A Manager given no source watches none: no signal is caught by default.
func TestNoDefaultSignalSource(t *testing.T) {
	m := newTestManager(t, Options{GracePeriod: 10 * time.Second, ActivePods: func() []*v1.Pod { return nil }, KillPod: newKiller().kill})
	if len(m.opts.Sources) != 0 {
		t.Errorf("sources of a Manager given none = %v, want none", m.opts.Sources)
	}
}
