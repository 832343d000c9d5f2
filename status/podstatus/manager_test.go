package podstatus_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

// env is a Manager running against a fake clientset on a fake clock.
type env struct {
	m      *podstatus.Manager
	client *fake.Clientset
	clock  *testingclock.FakeClock
	reg    *prometheus.Registry
}

// newEnv starts a Manager that writes first statuses at once (no
// PendingWriteDelay).
func newEnv(t *testing.T, pods podstatus.PodGetter, objects ...runtime.Object) *env {
	t.Helper()
	return newEnvWith(t, podstatus.Options{Pods: pods, PendingWriteDelay: -1}, objects...)
}

// newEnvWith starts a Manager with opts, on the env's client, clock and
// registry.
func newEnvWith(t *testing.T, opts podstatus.Options, objects ...runtime.Object) *env {
	t.Helper()
	e := &env{client: fake.NewClientset(objects...), clock: testingclock.NewFakeClock(t0), reg: prometheus.NewPedanticRegistry()}
	opts.Client, opts.Clock, opts.Registerer = e.client, e.clock, e.reg
	m, err := podstatus.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	runManager(t, m)
	// Run waits on its resync timer.
	e.waitFor(t, "Run to start", func() bool { return e.clock.HasWaiters() })
	return e
}

// runManager runs m until the test ends.
func runManager(t *testing.T, m *podstatus.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Error("Run did not return")
		}
	})
}

func (e *env) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what, cond)
}

// waitFor polls cond until it holds, failing the test after
// wait.ForeverTestTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// resync fires the periodic full sync.
func (e *env) resync(t *testing.T) {
	t.Helper()
	e.waitFor(t, "the resync timer", func() bool { return e.clock.HasWaiters() })
	e.clock.Step(10 * time.Second)
}

func (e *env) apiPod(t *testing.T, name string) *v1.Pod {
	t.Helper()
	p, err := e.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return p.(*v1.Pod)
}

// actions returns the client's requests as "verb[/subresource]".
func (e *env) actions(verb string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range e.client.Actions() {
		if a.GetVerb() == verb {
			out = append(out, a)
		}
	}
	return out
}

// counter returns the value of a counter metric with the label result.
func (e *env) counter(t *testing.T, name, result string) float64 {
	t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue(m, "result") == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestWritesAStrategicMergePatchWithTheUID(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	e := newEnv(t, nil, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the status write", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
	// The write is counted once Patch returned, after the API server
	// shows it.
	e.waitFor(t, "the write counted", func() bool { return e.counter(t, "nodekit_pod_status_patches_total", "patched") >= 1 })

	patches := e.actions("patch")
	if len(patches) != 1 {
		t.Fatalf("%d patches", len(patches))
	}
	pa := patches[0].(k8stesting.PatchAction)
	if pa.GetSubresource() != "status" || pa.GetPatchType() != types.StrategicMergePatchType || pa.GetName() != "web" {
		t.Errorf("patch %s %s %s", pa.GetSubresource(), pa.GetPatchType(), pa.GetName())
	}
	var body struct {
		Metadata map[string]any `json:"metadata"`
		Status   map[string]any `json:"status"`
	}
	if err := json.Unmarshal(pa.GetPatch(), &body); err != nil {
		t.Fatal(err)
	}
	if body.Metadata["uid"] != "uid-1" || len(body.Metadata) != 1 {
		t.Errorf("patch metadata = %v, want only the uid precondition", body.Metadata)
	}
	if body.Status["phase"] != "Running" {
		t.Errorf("patch status = %v", body.Status)
	}
	api := e.apiPod(t, "web")
	if api.Status.StartTime == nil || !api.Status.StartTime.Time.Equal(t0) || findCond(api.Status, v1.PodReady).Status != v1.ConditionTrue {
		t.Errorf("API status = %+v", api.Status)
	}
	if got := e.counter(t, "nodekit_pod_status_patches_total", "patched"); got != 1 {
		t.Errorf("patched = %v", got)
	}
}

func TestNoPatchWhenTheAPIServerHasTheStatus(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	first := newEnv(t, nil, p.DeepCopy())
	status := podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{})
	first.m.SetPodStatus(p, status)
	first.waitFor(t, "the write", func() bool { return first.apiPod(t, "web").Status.Phase == v1.PodRunning })

	// A restarted agent generates the same status from the pod it reads.
	api := first.apiPod(t, "web")
	second := newEnv(t, nil, api.DeepCopy())
	second.m.SetPodStatus(api, podstatus.Generate(api, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	second.waitFor(t, "the sync", func() bool { return second.counter(t, "nodekit_pod_status_patches_total", "unchanged") == 1 })
	if n := len(second.actions("patch")); n != 0 {
		t.Errorf("%d patches for an unchanged status", n)
	}
}

func TestKeepsConditionsOthersOwn(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	api := p.DeepCopy()
	api.Status.Conditions = []v1.PodCondition{
		{Type: "example.com/lb", Status: v1.ConditionTrue, Reason: "Registered"},
		// The node lifecycle controller marked the pod not ready.
		{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "NodeNotReady"},
	}
	e := newEnv(t, nil, api)
	// The agent's copy of the pod does not have the foreign condition yet.
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the write", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
	got := e.apiPod(t, "web").Status
	if c := findCond(got, "example.com/lb"); c == nil || c.Status != v1.ConditionTrue || c.Reason != "Registered" {
		t.Errorf("foreign condition = %+v", c)
	}
	if c := findCond(got, v1.PodReady); c.Status != v1.ConditionTrue || c.Reason != "" {
		t.Errorf("Ready = %+v, want the kubelet's", c)
	}
	// The patch lists only the kubelet's conditions (the foreign one
	// appears in the $setElementOrder directive only, which keeps it).
	var body struct {
		Status struct {
			Conditions []v1.PodCondition `json:"conditions"`
		} `json:"status"`
	}
	patch := e.actions("patch")[0].(k8stesting.PatchAction).GetPatch()
	if err := json.Unmarshal(patch, &body); err != nil {
		t.Fatal(err)
	}
	for _, c := range body.Status.Conditions {
		if !slices.Contains(kubeletConditionTypes, c.Type) {
			t.Errorf("the patch writes condition %s: %s", c.Type, patch)
		}
	}
}

func TestSkipsARecreatedPod(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	recreated := p.DeepCopy()
	recreated.UID = "uid-2"
	e := newEnv(t, nil, recreated)
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the status to be dropped", func() bool { _, ok := e.m.GetPodStatus("uid-1"); return !ok })
	if n := len(e.actions("patch")); n != 0 {
		t.Errorf("%d patches of the recreated pod", n)
	}
	if e.apiPod(t, "web").Status.Phase != "" {
		t.Error("the recreated pod's status changed")
	}
}

func TestRetriesAFailedWrite(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	e := newEnv(t, nil, p.DeepCopy())
	var mu sync.Mutex
	fail := true
	e.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the failed write", func() bool { return e.counter(t, "nodekit_pod_status_patches_total", "failed") == 1 })
	if e.apiPod(t, "web").Status.Phase != "" {
		t.Fatal("status written despite the failure")
	}
	e.resync(t)
	e.waitFor(t, "the retry", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
}

func TestTerminalPhaseWaitsForTerminatePodThenThePodIsDeleted(t *testing.T) {
	p := testPod(v1.RestartPolicyNever, "a")
	e := newEnv(t, nil, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "Running", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })

	// The container exited: the status says so, but the pod is not
	// Succeeded on the API server while the agent may still run something.
	prev, _ := e.m.GetPodStatus(p.UID)
	done := podstatus.Generate(p, rt(exited("a", t0, 0)), nil, podstatus.GenerateOptions{Previous: &prev})
	if done.Phase != v1.PodSucceeded {
		t.Fatalf("generated %s", done.Phase)
	}
	e.m.SetPodStatus(p, done)
	e.waitFor(t, "the container's termination", func() bool {
		cs := e.apiPod(t, "web").Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Terminated != nil
	})
	if ph := e.apiPod(t, "web").Status.Phase; ph != v1.PodRunning {
		t.Fatalf("phase %s before TerminatePod", ph)
	}
	e.m.TerminatePod(p)
	e.waitFor(t, "Succeeded", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodSucceeded })
	if c := findCond(e.apiPod(t, "web").Status, v1.PodReady); c.Reason != "PodCompleted" {
		t.Errorf("Ready = %+v", c)
	}
	if n := len(e.actions("delete")); n != 0 {
		t.Fatalf("a pod that is not being deleted was deleted")
	}

	// Now someone deletes it: the finished pod's object goes at once.
	api := e.apiPod(t, "web")
	now := metav1.NewTime(t1)
	api.DeletionTimestamp = &now
	if err := e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), api, "default"); err != nil {
		t.Fatal(err)
	}
	e.m.TerminatePod(api)
	e.waitFor(t, "the deletion", func() bool { return len(e.actions("delete")) == 1 })
	checkFinalDelete(t, e, "uid-1")
}

func checkFinalDelete(t *testing.T, e *env, uid types.UID) {
	t.Helper()
	del := e.actions("delete")[0].(k8stesting.DeleteAction)
	opts := del.GetDeleteOptions()
	if del.GetName() != "web" || opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 ||
		opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != uid {
		t.Errorf("delete %s with %+v", del.GetName(), opts)
	}
	e.waitFor(t, "the status to be forgotten", func() bool { _, ok := e.m.GetPodStatus(uid); return !ok })
	if got := e.counter(t, "nodekit_pod_deletions_total", "deleted"); got != 1 {
		t.Errorf("deletions = %v", got)
	}
}

func TestGracefulDeletionOfARunningPod(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	now := metav1.NewTime(t1)
	p.DeletionTimestamp = &now
	e := newEnv(t, nil, p.DeepCopy())
	// Killed on deletion: the generated status is terminal, but the API
	// server sees it only with TerminatePod, and the pod is then deleted.
	killed := podstatus.Generate(p, rt(exited("a", t0, 137)), nil, podstatus.GenerateOptions{Terminal: true})
	e.m.SetPodStatus(p, killed)
	e.waitFor(t, "the container's termination", func() bool { return len(e.apiPod(t, "web").Status.ContainerStatuses) == 1 })
	if ph := e.apiPod(t, "web").Status.Phase; isTerminalPhase(ph) {
		t.Fatalf("phase %s before TerminatePod", ph)
	}
	e.m.TerminatePod(p)
	e.waitFor(t, "the deletion", func() bool { return len(e.actions("delete")) == 1 })
	checkFinalDelete(t, e, "uid-1")
}

func isTerminalPhase(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

func TestTerminatePodFailsUnfinishedContainers(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a", "b")
	e := newEnv(t, nil, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0), exited("b", t0, 0)), nil, podstatus.GenerateOptions{}))
	e.m.TerminatePod(p)
	s, ok := e.m.GetPodStatus(p.UID)
	if !ok || s.Phase != v1.PodFailed {
		t.Fatalf("phase = %s", s.Phase)
	}
	a, b := findCS(s.ContainerStatuses, "a"), findCS(s.ContainerStatuses, "b")
	if a.State.Terminated == nil || a.State.Terminated.Reason != "ContainerStatusUnknown" || a.State.Terminated.ExitCode != 137 {
		t.Errorf("a = %+v", a.State)
	}
	if b.State.Terminated == nil || b.State.Terminated.ExitCode != 0 {
		t.Errorf("b = %+v", b.State)
	}
	e.waitFor(t, "Failed", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodFailed })
}

func TestCachedStatusRules(t *testing.T) {
	p := testPod(v1.RestartPolicyNever, "a")
	e := newEnv(t, nil, p.DeepCopy())

	e.m.SetPodStatus(p, podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{}))
	s, _ := e.m.GetPodStatus(p.UID)
	ready := findCond(s, v1.PodReady)
	if !s.StartTime.Time.Equal(t0) || !ready.LastTransitionTime.Time.Equal(t0) || s.ObservedGeneration != 3 {
		t.Errorf("first status: start %v, Ready since %v, generation %d", s.StartTime, ready.LastTransitionTime, s.ObservedGeneration)
	}

	// Later: Ready stays False (its time stays), then turns True.
	e.clock.Step(time.Minute)
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(&podstate.ContainerStatus{ID: "x", Type: "containerd", Name: "a", State: podstate.ContainerStateCreated}), nil, podstatus.GenerateOptions{Previous: &s}))
	s, _ = e.m.GetPodStatus(p.UID)
	if !findCond(s, v1.PodReady).LastTransitionTime.Time.Equal(t0) || !s.StartTime.Time.Equal(t0) {
		t.Errorf("unchanged Ready moved: %v, start %v", findCond(s, v1.PodReady).LastTransitionTime, s.StartTime)
	}
	e.clock.Step(time.Minute)
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t1)), nil, podstatus.GenerateOptions{Previous: &s}))
	s, _ = e.m.GetPodStatus(p.UID)
	if c := findCond(s, v1.PodReady); c.Status != v1.ConditionTrue || !c.LastTransitionTime.Time.Equal(t2) {
		t.Errorf("Ready = %+v", c)
	}

	// The container finished; restartPolicy Never: it cannot run again,
	// and the terminal phase cannot go back.
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t1, 1)), nil, podstatus.GenerateOptions{Previous: &s}))
	s, _ = e.m.GetPodStatus(p.UID)
	if s.Phase != v1.PodFailed {
		t.Fatalf("phase %s", s.Phase)
	}
	back := *s.DeepCopy()
	back.Phase = v1.PodRunning
	e.m.SetPodStatus(p, back)
	if s, _ = e.m.GetPodStatus(p.UID); s.Phase != v1.PodFailed {
		t.Errorf("terminal phase went back to %s", s.Phase)
	}
	revived := podstatus.Generate(p, rt(running("a", t2)), nil, podstatus.GenerateOptions{})
	e.m.SetPodStatus(p, revived)
	if s, _ = e.m.GetPodStatus(p.UID); s.ContainerStatuses[0].State.Terminated == nil {
		t.Errorf("a finished container came back: %+v", s.ContainerStatuses[0].State)
	}

	// Returned statuses are copies.
	s.Phase = v1.PodUnknown
	if again, _ := e.m.GetPodStatus(p.UID); again.Phase != v1.PodFailed {
		t.Error("GetPodStatus returned shared memory")
	}
	e.m.RemovePod(p.UID)
	if _, ok := e.m.GetPodStatus(p.UID); ok {
		t.Error("RemovePod kept the status")
	}
}

// getter serves pods as the agent's sources would, mirror pods apart.
type getter struct {
	mu      sync.Mutex
	pods    map[types.UID]*v1.Pod
	mirrors map[types.UID]*v1.Pod
}

func (g *getter) set(p *v1.Pod) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := p.Annotations[v1.MirrorPodAnnotationKey]; ok {
		if g.mirrors == nil {
			g.mirrors = map[types.UID]*v1.Pod{}
		}
		g.mirrors[p.UID] = p
		return
	}
	g.pods[p.UID] = p
}

func (g *getter) MirrorPodFor(static *v1.Pod) (*v1.Pod, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.mirrors {
		if m.Namespace == static.Namespace && m.Name == static.Name {
			return m, true
		}
	}
	return nil, false
}

func (g *getter) GetPodByUID(uid types.UID) (*v1.Pod, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pods[uid]
	return p, ok
}

func TestResyncRewritesAStatusSomeoneElseChanged(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	// The agent only sets statuses of pods its sources gave it.
	g := &getter{pods: map[types.UID]*v1.Pod{p.UID: p.DeepCopy()}}
	e := newEnv(t, g, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "Ready", func() bool {
		c := findCond(e.apiPod(t, "web").Status, v1.PodReady)
		return c != nil && c.Status == v1.ConditionTrue
	})

	// The node lifecycle controller marks the pod not ready while the node
	// was unreachable; the agent's source sees it.
	api := e.apiPod(t, "web")
	findCond(api.Status, v1.PodReady).Status = v1.ConditionFalse
	if err := e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), api, "default"); err != nil {
		t.Fatal(err)
	}
	g.set(api.DeepCopy())
	e.resync(t)
	e.waitFor(t, "Ready again", func() bool { return findCond(e.apiPod(t, "web").Status, v1.PodReady).Status == v1.ConditionTrue })
}

func TestResyncDeletesAFinishedPodDeletedLater(t *testing.T) {
	p := testPod(v1.RestartPolicyNever, "a")
	g := &getter{pods: map[types.UID]*v1.Pod{p.UID: p.DeepCopy()}}
	e := newEnv(t, g, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t0, 0)), nil, podstatus.GenerateOptions{}))
	e.m.TerminatePod(p)
	e.waitFor(t, "Succeeded", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodSucceeded })

	api := e.apiPod(t, "web")
	now := metav1.NewTime(t1)
	api.DeletionTimestamp = &now
	if err := e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), api, "default"); err != nil {
		t.Fatal(err)
	}
	g.set(api.DeepCopy())
	e.resync(t)
	e.waitFor(t, "the deletion", func() bool { return len(e.actions("delete")) == 1 })
	checkFinalDelete(t, e, "uid-1")
}

func TestStaticPodWritesItsMirrorPod(t *testing.T) {
	static := testPod(v1.RestartPolicyAlways, "a")
	static.UID = "static-uid"
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": "abc"}
	mirror := static.DeepCopy()
	mirror.UID = "mirror-uid"
	mirror.Annotations = map[string]string{v1.MirrorPodAnnotationKey: "abc"}
	e := newEnv(t, nil, mirror)
	e.m.SetPodStatus(static, podstatus.Generate(static, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the mirror's status", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
	if p := string(e.actions("patch")[0].(k8stesting.PatchAction).GetPatch()); !strings.Contains(p, `"uid":"mirror-uid"`) {
		t.Errorf("patch %s", p)
	}
}

func TestNewManagerValidates(t *testing.T) {
	if _, err := podstatus.NewManager(podstatus.Options{Client: fake.NewClientset(), SyncPeriod: -time.Second}); err == nil {
		t.Error("negative sync period accepted")
	}
	reg := prometheus.NewRegistry()
	if _, err := podstatus.NewManager(podstatus.Options{Client: fake.NewClientset(), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := podstatus.NewManager(podstatus.Options{Client: fake.NewClientset(), Registerer: reg}); err == nil {
		t.Error("registering the metrics twice succeeded")
	}
}

func TestNilPodsAreRejected(t *testing.T) {
	m, err := podstatus.NewManager(podstatus.Options{Client: fake.NewClientset()})
	if err != nil {
		t.Fatal(err)
	}
	m.SetPodStatus(nil, v1.PodStatus{Phase: v1.PodRunning})
	m.TerminatePod(nil)
	if _, ok := m.GetPodStatus(""); ok {
		t.Error("a nil pod's status was cached")
	}
}

func TestRunTwiceFails(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run = %v", err)
	}
}

// TestPatchesWithoutAGetWhenTheSourcesHaveThePod: the Manager computes its
// patch from the sources' copy of a pod it has not written yet, and from
// its last patch's answer while the sources have not caught up with it, so
// a pod's start costs PATCHes only.
func TestPatchesWithoutAGetWhenTheSourcesHaveThePod(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	g := &getter{pods: map[types.UID]*v1.Pod{p.UID: p.DeepCopy()}}
	e := newEnv(t, g, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the first patch", func() bool { return len(e.actions("patch")) == 1 })
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "Ready", func() bool {
		c := findCond(e.apiPod(t, "web").Status, v1.PodReady)
		return c != nil && c.Status == v1.ConditionTrue
	})
	if gets := e.actions("get"); len(gets) != 0 {
		t.Errorf("%d GETs before the patches, want none: the sources' copy and the last answer serve", len(gets))
	}
	if patches := e.actions("patch"); len(patches) != 2 {
		t.Errorf("%d patches, want 2", len(patches))
	}
}

// TestGracefulDeletionNeedsNoGet: a pod the API server marked deleted after
// the Manager's last write is written from the sources' copy, newer by
// resourceVersion than the last patch's answer: a PATCH and the DELETE, no
// GET (which made a mass deletion take half as long again under the
// client's rate limit: 60 s instead of 40 for 1,000 pods at 50 QPS).
func TestGracefulDeletionNeedsNoGet(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	p.ResourceVersion = "5"
	g := &getter{pods: map[types.UID]*v1.Pod{p.UID: p.DeepCopy()}}
	e := newEnv(t, g, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "Running", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })

	// The API server records the graceful deletion: a newer version, which
	// the sources show.
	deleting := e.apiPod(t, "web").DeepCopy()
	now := metav1.NewTime(t1)
	deleting.DeletionTimestamp, deleting.ResourceVersion = &now, "7"
	if err := e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), deleting, "default"); err != nil {
		t.Fatal(err)
	}
	g.set(deleting.DeepCopy())
	prev, _ := e.m.GetPodStatus(p.UID)
	e.m.SetPodStatus(deleting, podstatus.Generate(deleting, rt(exited("a", t0, 137)), nil, podstatus.GenerateOptions{Previous: &prev, Terminal: true}))
	e.m.TerminatePod(deleting)
	e.waitFor(t, "the deletion", func() bool { return len(e.actions("delete")) == 1 })
	if gets := e.actions("get"); len(gets) != 0 {
		t.Errorf("%d GETs of the deleted pod, want none: the sources' copy is the newest", len(gets))
	}
	// Running, then terminal; the writer may also have sent the terminal
	// containers before TerminatePod set the phase (a third patch), as it
	// would on a busy node.
	patches := e.actions("patch")
	if len(patches) < 2 || len(patches) > 3 {
		t.Fatalf("%d patches, want 2 or 3 (Running, then terminal)", len(patches))
	}
	if last := string(patches[len(patches)-1].(k8stesting.PatchAction).GetPatch()); !strings.Contains(last, `"phase":"Failed"`) {
		t.Errorf("the last patch before the deletion %s, want phase Failed", last)
	}
	checkFinalDelete(t, e, "uid-1")
}

// TestDeletionAnsweredNotFoundIsRetried: the API server can answer a
// node's DELETE of a pod that exists with NotFound (NodeRestriction reads
// the pod from an informer cache that lags behind a pod created a moment
// ago); the Manager keeps the status and deletes again at the next sync,
// as the kubelet does, instead of leaving the pod on the API server.
func TestDeletionAnsweredNotFoundIsRetried(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	now := metav1.NewTime(t1)
	p.DeletionTimestamp = &now
	e := newEnv(t, nil, p.DeepCopy())
	var mu sync.Mutex
	deletes := 0
	// Later deletions wait until the first one's outcome is checked: the
	// signals of SetPodStatus and TerminatePod may make two syncs, the
	// second deleting again before the test looks.
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	e.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		deletes++
		n := deletes
		mu.Unlock()
		if n == 1 {
			return true, nil, apierrors.NewNotFound(v1.Resource("pods"), "web")
		}
		<-release
		return false, nil, nil
	})
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t0, 137)), nil, podstatus.GenerateOptions{Terminal: true}))
	e.m.TerminatePod(p)
	// It is counted once Delete returned, after the fake client
	// recorded it.
	e.waitFor(t, "the first deletion counted", func() bool { return e.counter(t, "nodekit_pod_deletions_total", "failed") >= 1 })
	if _, ok := e.m.GetPodStatus(p.UID); !ok {
		t.Fatal("the status was forgotten after a deletion answered NotFound")
	}
	if got := e.counter(t, "nodekit_pod_deletions_total", "failed"); got != 1 {
		t.Errorf("failed deletions = %v, want 1", got)
	}
	releaseOnce.Do(func() { close(release) })
	e.resync(t)
	e.waitFor(t, "the deletion again", func() bool { return len(e.actions("delete")) >= 2 })
	// Forgotten once Delete returned: the fake client records the action
	// before its tracker deletes.
	e.waitFor(t, "the status to be forgotten", func() bool { _, ok := e.m.GetPodStatus(p.UID); return !ok })
	if _, err := e.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), "default", "web"); !apierrors.IsNotFound(err) {
		t.Errorf("the pod is still on the API server after the second deletion: %v", err)
	}
}

// TestRemovedPodIsNotWrittenByABatchUnderWay: a pod removed while a batch
// of writes is under way is not fetched or written by that batch: its
// object is gone, and the Node authorizer refuses the read.
func TestRemovedPodIsNotWrittenByABatchUnderWay(t *testing.T) {
	a := testPod(v1.RestartPolicyAlways, "a")
	b := a.DeepCopy()
	b.Name, b.UID = "db", "uid-2"
	c := a.DeepCopy()
	c.Name, c.UID = "later", "uid-3"
	// One writer: the batch writes its pods one after the other.
	e := newEnvWith(t, podstatus.Options{PendingWriteDelay: -1, Writers: 1}, a.DeepCopy(), b.DeepCopy(), c.DeepCopy())
	var mu sync.Mutex
	failPatches, removed := true, types.UID("")
	gets := map[string]int{}
	e.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failPatches {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	e.client.PrependReactor("get", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		name := action.(k8stesting.GetAction).GetName()
		mu.Lock()
		defer mu.Unlock()
		gets[name]++
		if !failPatches && removed == "" {
			// The first pod of the batch is being written: the other
			// one goes meanwhile.
			removed = b.UID
			if name == b.Name {
				removed = a.UID
			}
			e.m.RemovePod(removed)
		}
		return false, nil, nil
	})
	for _, p := range []*v1.Pod{a, b} {
		e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	}
	e.waitFor(t, "both writes failed", func() bool { return e.counter(t, "nodekit_pod_status_patches_total", "failed") >= 2 })
	mu.Lock()
	failPatches = false
	clear(gets)
	mu.Unlock()
	e.resync(t)
	e.waitFor(t, "the pod left written", func() bool { return e.counter(t, "nodekit_pod_status_patches_total", "patched") >= 1 })
	// One writer takes pods in the order they were queued: once a pod
	// queued after the batch is written, the removed pod was dealt with.
	e.m.SetPodStatus(c, podstatus.Generate(c, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "a later pod written", func() bool { return e.counter(t, "nodekit_pod_status_patches_total", "patched") >= 2 })
	mu.Lock()
	defer mu.Unlock()
	name := a.Name
	if removed == b.UID {
		name = b.Name
	}
	if removed == "" {
		t.Fatal("the batch read no pod")
	}
	if gets[name] != 0 {
		t.Errorf("pod %s, removed while the batch was under way, was read %d times by it", name, gets[name])
	}
}

// staticAndMirror returns a static pod with config hash hash and a mirror
// pod of it in the API with that hash.
func staticAndMirror(hash string) (static, mirror *v1.Pod) {
	static = testPod(v1.RestartPolicyAlways, "a")
	static.UID = "static-uid"
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash}
	mirror = static.DeepCopy()
	mirror.UID = "mirror-uid"
	mirror.ResourceVersion = "5"
	mirror.Annotations = map[string]string{"kubernetes.io/config.source": "api", v1.MirrorPodAnnotationKey: hash}
	return static, mirror
}

// With the sources' view, a static pod's status waits for its current
// mirror pod without a request, and then is written without a GET.
func TestStaticPodStatusWaitsForItsMirrorPod(t *testing.T) {
	static, mirror := staticAndMirror("abc")
	g := &getter{pods: map[types.UID]*v1.Pod{static.UID: static}}
	e := newEnv(t, g)
	e.m.SetPodStatus(static, podstatus.Generate(static, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.resync(t)
	e.resync(t)
	if n := len(e.client.Actions()); n != 0 {
		t.Fatalf("%d API requests before a mirror pod exists, want none", n)
	}

	// A mirror pod of another version of the static pod is not written
	// either: the pod loop replaces it.
	old := mirror.DeepCopy()
	old.Annotations[v1.MirrorPodAnnotationKey] = "old"
	if err := e.client.Tracker().Add(old); err != nil {
		t.Fatal(err)
	}
	g.set(old)
	e.resync(t)
	e.resync(t)
	if n := len(e.actions("patch")) + len(e.actions("get")); n != 0 {
		t.Fatalf("%d requests for a mirror pod of another hash, want none", n)
	}
	if _, ok := e.m.GetPodStatus(static.UID); !ok {
		t.Fatal("the status was forgotten while the mirror pod was outdated")
	}

	if err := e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), mirror, "default"); err != nil {
		t.Fatal(err)
	}
	g.set(mirror)
	e.resync(t)
	e.waitFor(t, "the mirror's status", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
	if n := len(e.actions("get")); n != 0 {
		t.Errorf("%d GETs: the sources' copy of the mirror pod serves", n)
	}
}

// MirrorPodsChanged writes a static pod's status that waited for its
// mirror pod at once, not at the next periodic sync.
func TestMirrorPodsChangedWritesAWaitingStatus(t *testing.T) {
	static, mirror := staticAndMirror("abc")
	g := &getter{pods: map[types.UID]*v1.Pod{static.UID: static}}
	e := newEnv(t, g)
	e.m.SetPodStatus(static, podstatus.Generate(static, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.resync(t)
	if n := len(e.client.Actions()); n != 0 {
		t.Fatalf("%d API requests before a mirror pod exists, want none", n)
	}
	if err := e.client.Tracker().Add(mirror); err != nil {
		t.Fatal(err)
	}
	g.set(mirror)
	// The clock does not move: only MirrorPodsChanged can bring the write.
	e.m.MirrorPodsChanged()
	e.waitFor(t, "the mirror's status", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
}

// The periodic sync compares a static pod's status with its mirror pod's
// and writes it again when someone else changed it.
func TestResyncRewritesAMirrorPodStatusSomeoneElseChanged(t *testing.T) {
	static, mirror := staticAndMirror("abc")
	g := &getter{pods: map[types.UID]*v1.Pod{static.UID: static}}
	g.set(mirror)
	e := newEnv(t, g, mirror.DeepCopy())
	e.m.SetPodStatus(static, podstatus.Generate(static, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "Ready", func() bool {
		c := findCond(e.apiPod(t, "web").Status, v1.PodReady)
		return c != nil && c.Status == v1.ConditionTrue
	})
	api := e.apiPod(t, "web")
	findCond(api.Status, v1.PodReady).Status = v1.ConditionFalse
	if err := e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), api, "default"); err != nil {
		t.Fatal(err)
	}
	g.set(api.DeepCopy())
	e.resync(t)
	e.waitFor(t, "Ready again", func() bool { return findCond(e.apiPod(t, "web").Status, v1.PodReady).Status == v1.ConditionTrue })
}

// Without a client the Manager keeps statuses for GetPodStatus and Run
// writes nothing.
func TestWithoutAClientStatusesStayLocal(t *testing.T) {
	m, err := podstatus.NewManager(podstatus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	p := testPod(v1.RestartPolicyAlways, "a")
	m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	m.TerminatePod(p)
	if st, ok := m.GetPodStatus(p.UID); !ok || st.Phase != v1.PodFailed {
		t.Errorf("GetPodStatus = %v, %v; want the terminated pod's Failed status", st.Phase, ok)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestPendingFirstStatusWaitsForRunning: a pod whose Running status follows
// its first (Pending) one within PendingWriteDelay is written once, carrying
// Running.
func TestPendingFirstStatusWaitsForRunning(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	e := newEnvWith(t, podstatus.Options{PendingWriteDelay: time.Second}, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{}))
	e.clock.Step(500 * time.Millisecond)
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "Running", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
	e.clock.Step(2 * time.Second)
	e.resync(t)
	e.waitFor(t, "the resync to finish", func() bool { return e.clock.HasWaiters() })
	if patches := e.actions("patch"); len(patches) != 1 {
		t.Errorf("%d patches, want 1 carrying Running", len(patches))
	}
}

// TestPendingFirstStatusIsWrittenAfterTheDelay: a first Pending status with
// nothing newer is written once PendingWriteDelay passed, and a pod's later
// Pending statuses are not held back.
func TestPendingFirstStatusIsWrittenAfterTheDelay(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	e := newEnvWith(t, podstatus.Options{PendingWriteDelay: time.Second}, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the delay timer", func() bool { return e.clock.Waiters() == 2 })
	if patches := e.actions("patch"); len(patches) != 0 {
		t.Fatalf("%d patches before the delay passed, want none", len(patches))
	}
	e.clock.Step(time.Second)
	e.waitFor(t, "the first patch", func() bool { return len(e.actions("patch")) == 1 })
	if got := e.apiPod(t, "web").Status.Phase; got != v1.PodPending {
		t.Errorf("phase %q written, want Pending", got)
	}
	waiting := podstatus.Generate(p, rt(), map[string]podstate.ContainerWaiting{"a": {Reason: podstate.ErrImagePull, Message: "no"}}, podstatus.GenerateOptions{})
	e.m.SetPodStatus(p, waiting)
	e.waitFor(t, "the second patch without a delay", func() bool { return len(e.actions("patch")) == 2 })
}

// settle fires the periodic sync twice and waits until the second one is
// done: every write queued before has been tried.
func (e *env) settle(t *testing.T) {
	t.Helper()
	e.resync(t)
	e.resync(t)
	e.waitFor(t, "the sync to finish", func() bool { return e.clock.HasWaiters() })
}

func TestAPodGoneFromTheSourcesIsNeitherReadNorWritten(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	g := &getter{pods: map[types.UID]*v1.Pod{p.UID: p.DeepCopy()}}
	e := newEnv(t, g, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "Running", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })

	// The pod is deleted from the API server and its source drops it
	// while a newer status is pending: the Node authorizer would refuse
	// both reading and writing it.
	g.mu.Lock()
	delete(g.pods, p.UID)
	g.mu.Unlock()
	before := len(e.client.Actions())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t0, 1)), nil, podstatus.GenerateOptions{}))
	e.settle(t)
	if after := e.client.Actions()[before:]; len(after) != 0 {
		t.Errorf("requests for a pod gone from the sources: %v", describe(after))
	}
	if _, ok := e.m.GetPodStatus(p.UID); !ok {
		t.Error("the status was dropped before RemovePod")
	}
	e.m.RemovePod(p.UID)
	if _, ok := e.m.GetPodStatus(p.UID); ok {
		t.Error("RemovePod kept the status")
	}
}

func TestAPodItDeletedTakesNoLaterStatus(t *testing.T) {
	p := testPod(v1.RestartPolicyNever, "a")
	now := metav1.NewTime(t1)
	p.DeletionTimestamp = &now
	g := &getter{pods: map[types.UID]*v1.Pod{p.UID: p.DeepCopy()}}
	e := newEnv(t, g, p.DeepCopy())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t0, 0)), nil, podstatus.GenerateOptions{Terminal: true}))
	e.m.TerminatePod(p)
	e.waitFor(t, "the deletion", func() bool { return len(e.actions("delete")) == 1 })
	checkFinalDelete(t, e, p.UID)

	// The sources have not seen the deletion yet and the pod loop reports
	// the pod once more: nothing is left to write it to.
	before := len(e.client.Actions())
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t0, 0)), nil, podstatus.GenerateOptions{Terminal: true}))
	e.m.TerminatePod(p)
	e.settle(t)
	if after := e.client.Actions()[before:]; len(after) != 0 {
		t.Errorf("requests for a pod deleted already: %v", describe(after))
	}
	if _, ok := e.m.GetPodStatus(p.UID); ok {
		t.Error("a status of a deleted pod was kept")
	}
	// Once the sources dropped it, its UID is forgotten too.
	e.m.RemovePod(p.UID)
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t0, 0)), nil, podstatus.GenerateOptions{Terminal: true}))
	if _, ok := e.m.GetPodStatus(p.UID); !ok {
		t.Error("after RemovePod a status of the UID is still ignored")
	}
}

// describe names requests as "verb resource[/subresource]".
func describe(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		r := a.GetVerb() + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			r += "/" + a.GetSubresource()
		}
		out = append(out, r)
	}
	return out
}

// hangingGetter is the sources' view where reading one pod hangs until
// released, as a write that hangs on its way to the API server.
type hangingGetter struct {
	getter
	hang             types.UID
	reached, release chan struct{}
}

func (g *hangingGetter) GetPodByUID(uid types.UID) (*v1.Pod, bool) {
	if uid == g.hang {
		select {
		case g.reached <- struct{}{}:
		default:
		}
		<-g.release
	}
	return g.getter.GetPodByUID(uid)
}

// TestStatusIsWrittenWhileAnotherPodsWriteIsSlow: a status set while
// another pod's write hangs goes out on a free writer at once, not after
// the slow write (a burst of pods does not queue behind its slowest round
// trip).
func TestStatusIsWrittenWhileAnotherPodsWriteIsSlow(t *testing.T) {
	a := testPod(v1.RestartPolicyAlways, "a")
	b := a.DeepCopy()
	b.Name, b.UID = "db", "uid-2"
	g := &hangingGetter{getter: getter{pods: map[types.UID]*v1.Pod{}}, hang: a.UID, reached: make(chan struct{}, 1), release: make(chan struct{})}
	g.set(a.DeepCopy())
	g.set(b.DeepCopy())
	e := newEnvWith(t, podstatus.Options{Pods: g, PendingWriteDelay: -1, Writers: 2}, a.DeepCopy(), b.DeepCopy())
	defer close(g.release)
	e.m.SetPodStatus(a, podstatus.Generate(a, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	select {
	case <-g.reached:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("pod a's write did not begin")
	}
	e.m.SetPodStatus(b, podstatus.Generate(b, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "pod db's status written while pod a's write hangs", func() bool {
		return e.apiPod(t, b.Name).Status.Phase == v1.PodRunning
	})
}

// TestInternalStartIsMeasuredFromSeenToTheStartedStatusSent: the time from
// PodSeen to the agent sending the first status that shows every container
// started (accepted by the API server) goes into
// nodekit_pod_start_internal_duration_seconds, once, and that PATCH's round
// trip into nodekit_pod_start_status_patch_duration_seconds; a Pending
// status written before does not end it, and a pod never seen is not
// counted.
func TestInternalStartIsMeasuredFromSeenToTheStartedStatusSent(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	other := testPod(v1.RestartPolicyAlways, "a")
	other.Name, other.UID = "other", "uid-2"
	e := newEnv(t, nil, p.DeepCopy(), other.DeepCopy())
	// The API server takes 2 ms to answer a status write.
	e.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		e.clock.Step(2 * time.Millisecond)
		return false, nil, nil
	})
	e.m.PodSeen(p.UID, t0)
	e.clock.Step(3 * time.Millisecond)
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "Pending", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodPending })
	e.clock.Step(4 * time.Millisecond)
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "web Running", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodRunning })
	// The write's round trip is recorded once Patch returned, after the
	// API server shows it: wait for it, or the next write's 2 ms (on the
	// shared clock) would land inside it.
	e.waitFor(t, "web's PATCH timed", func() bool {
		families, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "nodekit_pod_start_status_patch_duration_seconds" {
				return f.GetMetric()[0].GetHistogram().GetSampleCount() == 1
			}
		}
		return false
	})
	e.m.SetPodStatus(other, podstatus.Generate(other, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "other Running", func() bool { return e.apiPod(t, "other").Status.Phase == v1.PodRunning })
	// A later write of the started pod does not count again.
	e.clock.Step(time.Second)
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t0, 1)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the exit", func() bool { return e.apiPod(t, "web").Status.ContainerStatuses[0].State.Running == nil })

	families, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Seen at t0; the Pending write took 3-5 ms; Running sent at 9 ms.
	want := map[string]float64{"nodekit_pod_start_internal_duration_seconds": 0.009, "nodekit_pod_start_status_patch_duration_seconds": 0.002}
	for name, sum := range want {
		var h *dto.Histogram
		for _, f := range families {
			if f.GetName() == name {
				h = f.GetMetric()[0].GetHistogram()
			}
		}
		if h == nil {
			t.Errorf("%s is not registered", name)
			continue
		}
		if h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-sum) > 1e-9 {
			t.Errorf("%s has %d samples summing to %vs, want 1 of %vs", name, h.GetSampleCount(), h.GetSampleSum(), sum)
		}
	}
}

// kubeletConditionTypes are the pod condition types the kubelet owns (1.37,
// default feature gates), the only ones a status patch may carry.
var kubeletConditionTypes = []v1.PodConditionType{
	v1.PodScheduled, v1.PodReady, v1.PodInitialized, v1.ContainersReady, v1.PodResizeInProgress,
	v1.PodResizePending, v1.PodReadyToStartContainers, v1.AllContainersRestarting,
}

// The Manager computes its patches against the sources' pod without a
// copy of it (PodGetter's pods are read-only): writing statuses, a terminal
// one too (whose merge rewrites the ready conditions), leaves that object
// as it was.
func TestWritesLeaveTheSourcesPodAsItWas(t *testing.T) {
	p := testPod(v1.RestartPolicyNever, "a")
	p.Status = v1.PodStatus{
		Phase: v1.PodRunning,
		Conditions: []v1.PodCondition{
			{Type: "example.com/lb", Status: v1.ConditionTrue, Reason: "Registered"},
			{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)},
			{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)},
			{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "EvictionByEvictionAPI"},
		},
		ResourceClaimStatuses: []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: new("web-gpu")}},
	}
	source := p.DeepCopy()
	g := &getter{pods: map[types.UID]*v1.Pod{p.UID: source}}
	e := newEnv(t, g, p.DeepCopy())

	e.m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{}))
	e.waitFor(t, "the first write", func() bool { return e.counter(t, "nodekit_pod_status_patches_total", "patched") >= 1 })
	e.m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", t0, 0)), nil, podstatus.GenerateOptions{}))
	e.m.TerminatePod(p)
	e.waitFor(t, "the terminal write", func() bool { return e.apiPod(t, "web").Status.Phase == v1.PodSucceeded })
	e.waitFor(t, "the second write counted", func() bool { return e.counter(t, "nodekit_pod_status_patches_total", "patched") >= 2 })

	if !apiequality.Semantic.DeepEqual(source, p) {
		t.Errorf("the sources' pod changed:\nnow  %+v\nwas  %+v", source.Status, p.Status)
	}
}
