package status

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
)

const testNode = "node-a"

// harness runs a Reporter against a fake clientset and a fake clock, with
// the default setters on a fixed machine and a controllable runtime.
type harness struct {
	t      *testing.T
	client *fake.Clientset
	clk    *testingclock.FakeClock
	reg    *prometheus.Registry
	rec    *record.FakeRecorder
	r      *Reporter

	mu         sync.Mutex
	runtimeErr error

	repeatedFailures atomic.Int32
	done             chan struct{}
}

func newHarness(t *testing.T, edit func(*Options), objects ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		t:      t,
		client: fake.NewClientset(objects...),
		clk:    testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		reg:    prometheus.NewRegistry(),
		rec:    record.NewFakeRecorder(1000),
	}
	setters, err := DefaultSetters(SetterOptions{
		Hostname: testNode,
		NodeIPs:  []net.IP{net.ParseIP("127.0.0.5")},
		Machine:  machineFunc(testMachine()),
		RuntimeVersion: func(context.Context) (string, string, error) {
			return "fakecri", "0.1.0", nil
		},
		RuntimeHealth: func(context.Context) (error, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.runtimeErr, nil
		},
		ListImages: func(context.Context) ([]*runtimeapi.Image, error) {
			return []*runtimeapi.Image{{Id: "sha256:pause", Size: 700000, RepoTags: []string{"registry.k8s.io/pause:3.10"}}}, nil
		},
		Recorder: h.rec,
		Clock:    h.clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Client:            h.client,
		NodeName:          testNode,
		Setters:           setters,
		Clock:             h.clk,
		Registerer:        h.reg,
		ReportFrequency:   time.Minute,
		OnRepeatedFailure: func() { h.repeatedFailures.Add(1) },
	}
	if edit != nil {
		edit(&opts)
	}
	if h.r, err = New(opts); err != nil {
		t.Fatal(err)
	}
	h.r.jitter = func() float64 { return 0.5 } // no report delay
	return h
}

func (h *harness) setRuntimeErr(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runtimeErr = err
}

// start runs the Reporter until the test ends.
func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		if err := h.r.Run(ctx); err != nil {
			h.t.Errorf("Run: %v", err)
		}
	}()
	h.t.Cleanup(func() {
		cancel()
		<-h.done
	})
}

func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		h.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (h *harness) waitRegistered() {
	h.t.Helper()
	h.waitFor("registration", func() bool {
		select {
		case <-h.r.Registered():
			return true
		default:
			return false
		}
	})
}

// step advances the clock by d and waits until the reporter's loop has
// handled rounds timer firings and the informer has the Node as the API has
// it, so that the next step starts from a known state.
func (h *harness) step(d time.Duration, rounds int64) {
	h.t.Helper()
	before := h.r.waits.Load()
	h.clk.Step(d)
	h.waitLoop(before + rounds)
}

// waitLoop waits until the loop has gone back to waiting n times in all.
func (h *harness) waitLoop(n int64) {
	h.t.Helper()
	h.waitFor("the reporter's loop", func() bool { return h.r.waits.Load() >= n })
	h.waitFor("the informer to catch up", func() bool {
		n, ok := h.r.Node()
		return ok && apiequality.Semantic.DeepEqual(n, h.node())
	})
}

// startSteady starts a healthy reporter and waits until its fast startup
// loop is over.
func (h *harness) startSteady() {
	h.t.Helper()
	h.start()
	h.waitRegistered()
	h.waitLoop(1)
	h.step(fastReadyInterval, 1)
	if n := h.clk.Waiters(); n != 1 {
		h.t.Fatalf("%d timers after the node was seen Ready, want 1 (the fast loop is over)", n)
	}
}

// cycle steps the clock by UpdateFrequency and waits for the status cycle.
func (h *harness) cycle() {
	h.t.Helper()
	before := h.cycles()
	h.step(defaultUpdateFrequency, 1)
	if h.cycles() != before+1 {
		h.t.Fatalf("cycles %v, want %v", h.cycles(), before+1)
	}
}

func (h *harness) cycles() float64 {
	total := 0.0
	for _, r := range []string{cycleUnchanged, cyclePatched, cycleFailed} {
		total += testutil.ToFloat64(h.r.metrics.cycles.WithLabelValues(r))
	}
	return total
}

func (h *harness) patchCount(reason string) int {
	return int(testutil.ToFloat64(h.r.metrics.patches.WithLabelValues(reason)))
}

func (h *harness) node() *v1.Node {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", testNode)
	if err != nil {
		h.t.Fatal(err)
	}
	return obj.(*v1.Node)
}

// actions returns the client's actions of a verb on nodes.
func (h *harness) actions(verb string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range h.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "nodes" {
			out = append(out, a)
		}
	}
	return out
}

func TestRegisterCreatesNode(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Labels = map[string]string{"example.com/role": "edge", v1.LabelHostname: "custom-host"}
		o.Taints = []v1.Taint{{Key: "dedicated", Value: "edge", Effect: v1.TaintEffectNoExecute}}
		o.Unschedulable = true
	})
	h.start()
	h.waitRegistered()
	node := h.node()
	wantLabels := map[string]string{
		"kubernetes.io/hostname": "custom-host", "example.com/role": "edge",
		"kubernetes.io/os": "linux", "kubernetes.io/arch": node.Labels["kubernetes.io/arch"],
		"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": node.Labels["kubernetes.io/arch"],
	}
	if !reflect.DeepEqual(node.Labels, wantLabels) || node.Labels["kubernetes.io/arch"] == "" {
		t.Errorf("labels = %v, want %v", node.Labels, wantLabels)
	}
	if node.Annotations[annotationControllerManagedAttachDetach] != "true" {
		t.Errorf("annotations = %v", node.Annotations)
	}
	wantTaints := []v1.Taint{
		{Key: "dedicated", Value: "edge", Effect: v1.TaintEffectNoExecute},
		{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule},
	}
	if !node.Spec.Unschedulable || !reflect.DeepEqual(node.Spec.Taints, wantTaints) {
		t.Errorf("spec = %+v, want unschedulable with taints %v", node.Spec, wantTaints)
	}
	var types []v1.NodeConditionType
	for _, c := range node.Status.Conditions {
		types = append(types, c.Type)
	}
	if want := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure, v1.NodeReady}; !reflect.DeepEqual(types, want) {
		t.Errorf("conditions = %v, want %v", types, want)
	}
	if c := findCondition(node, v1.NodeReady); c.Status != v1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}
	if got := node.Status.NodeInfo.ContainerRuntimeVersion; got != "fakecri://0.1.0" {
		t.Errorf("runtime version = %q", got)
	}
	wantAddrs := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.5"}, {Type: v1.NodeHostName, Address: testNode}}
	if !reflect.DeepEqual(node.Status.Addresses, wantAddrs) {
		t.Errorf("addresses = %v", node.Status.Addresses)
	}
	if len(node.Status.Images) != 1 || node.Status.Capacity.Cpu().Value() != 4 {
		t.Errorf("images %v, capacity %v", node.Status.Images, node.Status.Capacity)
	}
	if n := len(h.actions("create")); n != 1 {
		t.Errorf("%d create requests, want 1", n)
	}
}

func TestRegisterReconcilesExistingNode(t *testing.T) {
	existing := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   testNode,
			Labels: map[string]string{v1.LabelHostname: "old-host", "user": "kept"},
		},
		Status: v1.NodeStatus{
			Capacity:    v1.ResourceList{v1.ResourceCPU: q("1"), "hugepages-1Gi": q("1Gi")},
			Allocatable: v1.ResourceList{v1.ResourceCPU: q("1"), "hugepages-1Gi": q("1Gi")},
			Conditions:  []v1.NodeCondition{{Type: "KernelDeadlock", Status: v1.ConditionFalse, Reason: "KernelHasNoDeadlock"}},
		},
	}
	h := newHarness(t, nil, existing)
	h.start()
	h.waitRegistered()
	if h.patchCount(patchReasonRegister) != 1 {
		t.Fatalf("register patches = %d, want 1", h.patchCount(patchReasonRegister))
	}
	var patch k8stesting.PatchAction
	for _, a := range h.actions("patch") {
		patch = a.(k8stesting.PatchAction)
		break
	}
	if patch.GetSubresource() != "status" || patch.GetPatchType() != types.StrategicMergePatchType {
		t.Errorf("reconcile patch went to %q as %s, want a strategic merge patch of status", patch.GetSubresource(), patch.GetPatchType())
	}
	node := h.node()
	if node.Labels[v1.LabelHostname] != testNode || node.Labels["user"] != "kept" || node.Labels[v1.LabelOSStable] != "linux" {
		t.Errorf("labels = %v", node.Labels)
	}
	if node.Annotations[annotationControllerManagedAttachDetach] != "true" {
		t.Errorf("annotations = %v", node.Annotations)
	}
	if _, ok := node.Status.Capacity["hugepages-1Gi"]; ok {
		t.Errorf("stale huge page size kept: %v", node.Status.Capacity)
	}
	if got := node.Status.Capacity["hugepages-2Mi"]; got.Cmp(q("200Mi")) != 0 {
		t.Errorf("hugepages-2Mi capacity = %v", got.String())
	}
	if findCondition(node, "KernelDeadlock") == nil {
		t.Error("the foreign condition was lost")
	}
}

func TestRegisterBacksOff(t *testing.T) {
	h := newHarness(t, nil)
	var creates atomic.Int32
	h.client.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if creates.Add(1) <= 3 {
			return true, nil, apierrors.NewInternalError(errors.New("etcd is busy"))
		}
		return false, nil, nil
	})
	h.start()
	for attempt, backoff := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		h.waitFor("a create attempt", func() bool { return int(creates.Load()) == attempt+1 && h.clk.Waiters() == 1 })
		h.clk.Step(backoff - time.Millisecond)
		if got := creates.Load(); int(got) != attempt+1 {
			t.Fatalf("attempt %d came before its %v back-off", got, backoff)
		}
		h.clk.Step(time.Millisecond)
	}
	h.waitRegistered()
	if creates.Load() != 4 {
		t.Errorf("%d create attempts, want 4", creates.Load())
	}
}

func TestPatchesOnlyOnChangeOrReport(t *testing.T) {
	h := newHarness(t, nil)
	h.startSteady()
	// The first cycle after a start always reports.
	if h.patchCount(patchReasonReport) != 1 || h.patchCount(patchReasonChanged) != 0 {
		t.Fatalf("after start: report %d changed %d, want 1 and 0", h.patchCount(patchReasonReport), h.patchCount(patchReasonChanged))
	}
	gets := len(h.actions("get"))
	patches := len(h.actions("patch"))
	heartbeat := findCondition(h.node(), v1.NodeReady).LastHeartbeatTime

	for range 5 { // 50s: within the 1m report period
		h.cycle()
	}
	if n := len(h.actions("patch")); n != patches {
		t.Fatalf("%d patches while idle, want none", n-patches)
	}
	if n := len(h.actions("get")); n != gets {
		t.Errorf("%d GETs while idle, want 0: the first try reads the informer", n-gets)
	}
	if got := testutil.ToFloat64(h.r.metrics.cycles.WithLabelValues(cycleUnchanged)); got != 5 {
		t.Errorf("unchanged cycles = %v, want 5", got)
	}

	h.cycle() // 60s: forced report
	if h.patchCount(patchReasonReport) != 2 {
		t.Fatalf("report patches = %d, want 2 after ReportFrequency", h.patchCount(patchReasonReport))
	}
	ready := findCondition(h.node(), v1.NodeReady)
	if !ready.LastHeartbeatTime.After(heartbeat.Time) {
		t.Errorf("forced report did not move the heartbeat: %v", ready.LastHeartbeatTime)
	}

	h.setRuntimeErr(errors.New("container runtime is down"))
	h.cycle()
	if h.patchCount(patchReasonChanged) != 1 {
		t.Fatalf("changed patches = %d, want 1", h.patchCount(patchReasonChanged))
	}
	ready = findCondition(h.node(), v1.NodeReady)
	if ready.Status != v1.ConditionFalse || ready.Message != "container runtime is down" || ready.Reason != reasonKubeletNotReady {
		t.Errorf("Ready = %+v", ready)
	}
	var sawNotReady bool
	for _, e := range drainEvents(h.rec) {
		sawNotReady = sawNotReady || strings.Contains(e, "NodeNotReady")
	}
	if !sawNotReady {
		t.Error("no NodeNotReady event")
	}
	h.setRuntimeErr(nil)
	h.cycle()
	if c := findCondition(h.node(), v1.NodeReady); c.Status != v1.ConditionTrue || h.patchCount(patchReasonChanged) != 2 {
		t.Errorf("Ready = %+v after the runtime came back (changed patches %d)", c, h.patchCount(patchReasonChanged))
	}
	bytes := testutil.ToFloat64(h.r.metrics.patchBytes.WithLabelValues(patchReasonChanged))
	if bytes <= 0 {
		t.Errorf("patch bytes = %v", bytes)
	}
}

func TestRetriesFromTheAPIAndRepeatedFailure(t *testing.T) {
	h := newHarness(t, nil)
	h.startSteady()
	var failures atomic.Int32
	h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(-1) >= 0 {
			return true, nil, apierrors.NewConflict(v1.Resource("nodes"), testNode, errors.New("stale"))
		}
		return false, nil, nil
	})
	failures.Store(3)
	gets := len(h.actions("get"))
	h.setRuntimeErr(errors.New("runtime down"))
	h.cycle()
	if got := testutil.ToFloat64(h.r.metrics.cycles.WithLabelValues(cyclePatched)); got != 2 {
		t.Errorf("patched cycles = %v, want 2 (start + this one)", got)
	}
	if n := len(h.actions("get")) - gets; n != 3 {
		t.Errorf("%d GETs, want 3: tries 1-3 read from the API", n)
	}
	if n := h.repeatedFailures.Load(); n != 2 {
		t.Errorf("OnRepeatedFailure called %d times, want 2 (after tries 1 and 2)", n)
	}
	if got := testutil.ToFloat64(h.r.metrics.patchErrors); got != 3 {
		t.Errorf("patch errors = %v, want 3", got)
	}

	failures.Store(updateRetries)
	h.setRuntimeErr(nil)
	h.cycle()
	if got := testutil.ToFloat64(h.r.metrics.cycles.WithLabelValues(cycleFailed)); got != 1 {
		t.Errorf("failed cycles = %v, want 1", got)
	}
	if n := h.repeatedFailures.Load(); n != 2+updateRetries-1 {
		t.Errorf("OnRepeatedFailure called %d times, want %d", n, 2+updateRetries-1)
	}
	h.cycle()
	if c := findCondition(h.node(), v1.NodeReady); c.Status != v1.ConditionTrue {
		t.Errorf("Ready = %+v after the API recovered", c)
	}
}

func TestFastReadyPatchesAsSoonAsReady(t *testing.T) {
	h := newHarness(t, nil)
	h.setRuntimeErr(errors.New("runtime starting"))
	h.start()
	h.waitRegistered()
	h.waitLoop(1)
	if c := findCondition(h.node(), v1.NodeReady); c.Status != v1.ConditionFalse {
		t.Fatalf("registered Ready = %+v, want False", c)
	}
	drainEvents(h.rec)
	patches, gets := len(h.actions("patch")), len(h.actions("get"))
	for range 5 {
		h.step(fastReadyInterval, 1)
	}
	if n := len(h.actions("patch")) - patches; n != 0 {
		t.Fatalf("%d patches while still not ready", n)
	}
	if n := len(h.actions("get")) - gets; n != 0 {
		t.Errorf("%d GETs in the fast loop, want none", n)
	}
	if ev := drainEvents(h.rec); len(ev) != 0 {
		t.Errorf("trial evaluations recorded events: %q", ev)
	}
	h.setRuntimeErr(nil)
	h.step(fastReadyInterval, 1)
	if h.patchCount(patchReasonReady) != 1 {
		t.Fatalf("ready patches = %d, want 1", h.patchCount(patchReasonReady))
	}
	if c := findCondition(h.node(), v1.NodeReady); c.Status != v1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}
	if ev := drainEvents(h.rec); !reflect.DeepEqual(ev, []string{"Normal NodeReady Node node-a status is now: NodeReady"}) {
		t.Errorf("events = %q, want one NodeReady", ev)
	}
	if n := h.clk.Waiters(); n != 1 {
		t.Errorf("%d timers after the fast patch, want 1 (the fast loop is over)", n)
	}
}

func TestFastReadyGivesUpAfterTimeout(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.UpdateFrequency = time.Hour; o.ReportFrequency = 2 * time.Hour })
	h.setRuntimeErr(errors.New("never ready"))
	h.start()
	h.waitRegistered()
	h.waitLoop(1)
	h.step(fastReadyTimeout, 1)
	if n := h.clk.Waiters(); n != 1 {
		t.Fatalf("%d timers after the fast loop timed out, want 1", n)
	}
	h.setRuntimeErr(nil)
	h.step(time.Hour, 1)
	if h.patchCount(patchReasonReady) != 0 || h.patchCount(patchReasonChanged) != 1 {
		t.Errorf("ready patches %d, changed %d: want the regular cycle to report Ready", h.patchCount(patchReasonReady), h.patchCount(patchReasonChanged))
	}
}

// readyNode is a Node a previous run of the agent registered and
// reported Ready.
func readyNode(heartbeat time.Time) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{
			Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
			LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(heartbeat),
		}}},
	}
}

func TestRestartedReadyNodeIsNotReportedNotReady(t *testing.T) {
	before := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	h := newHarness(t, nil, readyNode(before))
	h.setRuntimeErr(errors.New("container runtime status check may not have completed yet"))
	h.start()
	h.waitRegistered()
	h.waitLoop(1)
	for range 5 {
		h.step(fastReadyInterval, 1)
	}
	for _, reason := range []string{patchReasonChanged, patchReasonReport, patchReasonReady} {
		if n := h.patchCount(reason); n != 0 {
			t.Fatalf("%d %s patches while the restarted agent's checks were still starting", n, reason)
		}
	}
	if c := findCondition(h.node(), v1.NodeReady); c.Status != v1.ConditionTrue {
		t.Fatalf("Ready = %+v during the startup hold, want the previous run's True", c)
	}
	h.setRuntimeErr(nil)
	h.step(fastReadyInterval, 1)
	if n := h.patchCount(patchReasonReport) + h.patchCount(patchReasonChanged); n != 1 {
		t.Fatalf("%d status patches once the checks passed, want 1", n)
	}
	c := findCondition(h.node(), v1.NodeReady)
	if c.Status != v1.ConditionTrue || !c.LastHeartbeatTime.After(before) || !c.LastTransitionTime.Equal(&metav1.Time{Time: before}) {
		t.Errorf("Ready = %+v, want True with a new heartbeat and the old transition time", c)
	}
	if ev := drainEvents(h.rec); slices.Contains(ev, "Normal NodeNotReady Node node-a status is now: NodeNotReady") {
		t.Errorf("events %q: a NodeNotReady for a node that never stopped being ready", ev)
	}
	if n := h.clk.Waiters(); n != 1 {
		t.Errorf("%d timers after the first report, want 1 (the fast loop is over)", n)
	}
}

func TestRestartHoldEndsAtTheFirstCycle(t *testing.T) {
	// The hold re-evaluates after 10, 20, 40, 80 and then every 100 ms:
	// at 10, 30, 70, 150, 250 ms. The first cycle comes at 200 ms.
	const update = 200 * time.Millisecond
	h := newHarness(t, func(o *Options) { o.UpdateFrequency = update }, readyNode(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)))
	h.setRuntimeErr(errors.New("container runtime is down"))
	h.start()
	h.waitRegistered()
	h.waitLoop(1)
	for _, d := range []time.Duration{10, 20, 40, 80} {
		h.step(d*time.Millisecond, 1)
	}
	if h.patchCount(patchReasonChanged) != 0 {
		t.Fatal("the node was reported before its first cycle")
	}
	h.step(50*time.Millisecond, 1)
	if c := findCondition(h.node(), v1.NodeReady); c.Status != v1.ConditionFalse || !strings.Contains(c.Message, "container runtime is down") {
		t.Fatalf("Ready = %+v after the first cycle, want False with the runtime's error", c)
	}
	h.setRuntimeErr(nil)
	h.step(50*time.Millisecond, 1)
	if h.patchCount(patchReasonReady) != 1 {
		t.Errorf("ready patches = %d, want the fast loop to report Ready at once", h.patchCount(patchReasonReady))
	}
}

// TestRestartedReadyNodeReportsAtOnce: a restarted agent whose checks
// already pass reports the node at once, without waiting for a timer.
func TestRestartedReadyNodeReportsAtOnce(t *testing.T) {
	h := newHarness(t, nil, readyNode(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)))
	h.start()
	h.waitRegistered()
	h.waitLoop(1)
	if n := h.patchCount(patchReasonReport) + h.patchCount(patchReasonChanged); n != 1 {
		t.Fatalf("%d status patches before any timer fired, want 1", n)
	}
	if c := findCondition(h.node(), v1.NodeReady); c.Status != v1.ConditionTrue || !c.LastHeartbeatTime.Equal(&metav1.Time{Time: h.clk.Now()}) {
		t.Errorf("Ready = %+v, want True with a heartbeat of now", c)
	}
}

func TestForeignConditionsSurvive(t *testing.T) {
	h := newHarness(t, nil)
	h.startSteady()
	npd := []byte(`{"status":{"conditions":[{"type":"KernelDeadlock","status":"False","reason":"KernelHasNoDeadlock","message":"kernel has no deadlock"}]}}`)
	if _, err := h.client.CoreV1().Nodes().Patch(context.Background(), testNode, types.StrategicMergePatchType, npd, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	h.waitLoop(h.r.waits.Load())
	for i := range 10 {
		if i%2 == 0 {
			h.setRuntimeErr(errors.New("flap"))
		} else {
			h.setRuntimeErr(nil)
		}
		h.cycle()
		node := h.node()
		if c := findCondition(node, "KernelDeadlock"); c == nil || c.Reason != "KernelHasNoDeadlock" {
			t.Fatalf("cycle %d: foreign condition = %+v, conditions %v", i, c, node.Status.Conditions)
		}
	}
	if h.patchCount(patchReasonChanged) != 10 {
		t.Errorf("changed patches = %d, want 10", h.patchCount(patchReasonChanged))
	}
}

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	for name, opts := range map[string]Options{
		"local watch with a client":  {Client: client, NodeName: "n", Node: mustLocalWatch(t, "n")},
		"no name":                    {Client: client},
		"bad name":                   {Client: client, NodeName: "Not_A_Name"},
		"bad label key":              {Client: client, NodeName: "n", Labels: map[string]string{"a b": "c"}},
		"bad label value":            {Client: client, NodeName: "n", Labels: map[string]string{"a": "c d"}},
		"bad taint effect":           {Client: client, NodeName: "n", Taints: []v1.Taint{{Key: "k", Effect: "Sometimes"}}},
		"bad taint key":              {Client: client, NodeName: "n", Taints: []v1.Taint{{Key: "k k", Effect: v1.TaintEffectNoSchedule}}},
		"negative frequency":         {Client: client, NodeName: "n", UpdateFrequency: -time.Second},
		"bad setter":                 {Client: client, NodeName: "n", Setters: []OrderedSetter{{Name: "x"}}},
		"API watch without a client": {NodeName: "n", Node: mustAPIWatch(t, client, "n")},
		"register client alone":      {RegisterClient: client, NodeName: "n"},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Client: client, NodeName: "n", Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Client: client, NodeName: "n", Registerer: reg}); err == nil {
		t.Error("registering the metrics twice succeeded")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	want := []string{metricCycles, metricPatchBytes, metricPatchErrors, metricPatches}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("metrics = %v, want %v", names, want)
	}
}

func TestRunTwice(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	h.waitRegistered()
	if err := h.r.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
}

func TestReporterExposesTheNodeItWatches(t *testing.T) {
	client := fake.NewClientset()
	r, err := New(Options{Client: client, NodeName: "n1", Setters: nil})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Node(); ok || r.HasSynced() {
		t.Fatal("before Run the reporter knows no node")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n, ok := r.Node()
		return ok && n.Name == "n1" && r.HasSynced(), nil
	})
	if err != nil {
		t.Fatalf("the registered node never showed up through Node(): %v", err)
	}
}

// TestSyncNow: a cycle on request, without waiting for UpdateFrequency, so a
// node shutting down turns NotReady at once.
func TestSyncNow(t *testing.T) {
	h := newHarness(t, nil)
	h.startSteady()
	h.setRuntimeErr(errors.New("node is shutting down"))
	before, cycles := h.r.waits.Load(), h.cycles()
	h.r.SyncNow()
	h.waitLoop(before + 1)
	if h.cycles() != cycles+1 {
		t.Fatalf("cycles %v after SyncNow, want %v", h.cycles(), cycles+1)
	}
	if c := findCondition(h.node(), v1.NodeReady); c == nil || c.Status != v1.ConditionFalse || c.Message != "node is shutting down" {
		t.Errorf("Ready after SyncNow = %+v, want False with the message", c)
	}
}

// After the node watch failed (an API server outage), the watch can show
// the Node from before the outage (Ready) for tens of seconds after the API
// server is back, while the API has it Unknown (the node lifecycle
// controller's doing). The next cycle must read the API, see the
// difference and patch Ready at once, not wait for the watch to re-list or
// for the report period.
func TestReadsTheAPIAfterTheWatchFailed(t *testing.T) {
	h := newHarness(t, nil)
	h.startSteady()
	var unknownOnAPI atomic.Bool
	h.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !unknownOnAPI.Load() {
			return false, nil, nil
		}
		obj, err := h.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", testNode)
		if err != nil {
			return true, nil, err
		}
		node := obj.(*v1.Node).DeepCopy()
		node.ResourceVersion = "after-the-outage"
		for i, c := range node.Status.Conditions {
			if c.Type == v1.NodeReady {
				node.Status.Conditions[i].Status = v1.ConditionUnknown
				node.Status.Conditions[i].Reason = "NodeStatusUnknown"
			}
		}
		return true, node, nil
	})
	unknownOnAPI.Store(true)

	// Without a watch failure the cycle trusts the watch: nothing changed.
	changed := h.patchCount(patchReasonChanged)
	h.cycle()
	if n := h.patchCount(patchReasonChanged); n != changed {
		t.Fatalf("changed patches = %d with a healthy watch, want %d", n, changed)
	}

	gets := len(h.actions("get"))
	h.r.node.noteWatchError()
	h.cycle()
	if n := len(h.actions("get")) - gets; n != 1 {
		t.Errorf("%d GETs in the cycle after the watch failed, want 1", n)
	}
	if n := h.patchCount(patchReasonChanged); n != changed+1 {
		t.Fatalf("changed patches = %d after the watch failed and the API shows Unknown, want %d (Ready patched at once)", n, changed+1)
	}
	if p := h.actions("patch"); !strings.Contains(string(p[len(p)-1].(k8stesting.PatchAction).GetPatch()), `"status":"True"`) {
		t.Errorf("last patch %s does not set Ready=True", p[len(p)-1].(k8stesting.PatchAction).GetPatch())
	}
}

// TestRegisterExternalCloudProviderAndProviderID: with an external cloud
// provider the node registers with the uninitialized NoSchedule taint
// after the configured ones, and providerID is its spec.providerID, as the
// kubelet's initialNode.
func TestRegisterExternalCloudProviderAndProviderID(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Taints = []v1.Taint{{Key: "dedicated", Value: "edge", Effect: v1.TaintEffectNoExecute}}
		o.ExternalCloudProvider = true
		o.ProviderID = "aws:///eu-west-1a/i-0123456789"
	})
	h.start()
	h.waitRegistered()
	node := h.node()
	want := []v1.Taint{
		{Key: "dedicated", Value: "edge", Effect: v1.TaintEffectNoExecute},
		{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: v1.TaintEffectNoSchedule},
	}
	if !reflect.DeepEqual(node.Spec.Taints, want) {
		t.Errorf("taints %v, want %v", node.Spec.Taints, want)
	}
	if node.Spec.ProviderID != "aws:///eu-west-1a/i-0123456789" {
		t.Errorf("providerID %q", node.Spec.ProviderID)
	}
}

// TestNoRegisterWaitsForTheNode: with registerNode false the reporter
// creates no Node; once someone else creates it, it is registered and its
// status is patched.
func TestNoRegisterWaitsForTheNode(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.NoRegister = true })
	h.start()
	select {
	case <-h.r.Registered():
		t.Fatal("registered before the Node exists")
	default:
	}
	if n := len(h.actions("create")); n != 0 {
		t.Fatalf("%d create requests with registerNode false", n)
	}
	created := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}
	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), created, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.client.ClearActions()
	h.waitRegistered()
	h.waitLoop(1)
	if c := findCondition(h.node(), v1.NodeReady); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("Ready condition %+v after the first status cycle", c)
	}
	if n := len(h.actions("create")); n != 0 {
		t.Errorf("%d create requests with registerNode false", n)
	}
}
