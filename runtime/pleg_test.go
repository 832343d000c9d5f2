package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"go.uber.org/fx/fxtest"

	"github.com/nodekit/nodekit/podstate"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// startPLEG runs a PLEG on h until the test ends.
func startPLEG(t *testing.T, h *harness, reg prometheus.Registerer) *runtime.PLEG {
	t.Helper()
	return startPLEGWith(t, h, runtime.PLEGOptions{Registerer: reg})
}

// startPLEGWith runs a PLEG of opts on h's pods, runtime and clock until
// the test ends, once its first relist is done.
func startPLEGWith(t *testing.T, h *harness, opts runtime.PLEGOptions) *runtime.PLEG {
	t.Helper()
	opts.Pods, opts.Runtime, opts.Clock = h.pm, h.client.RuntimeService(), h.clk
	p, err := runtime.NewPLEG(opts)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Healthy(); ok || err == nil || err.Error() != "PLEG is not healthy: pleg has yet to be successful" {
		t.Fatalf("Healthy before Run = %v, %v", ok, err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	poll(t, func() bool { ok, _ := p.Healthy(); return ok })
	return p
}

func poll(t *testing.T, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatal("condition not met in time")
	}
}

// collect reads events until it has seen every wanted (type, data) pair;
// data "" matches any container.
func collect(t *testing.T, p *runtime.PLEG, step func(), want ...podstate.PodLifecycleEvent) {
	t.Helper()
	missing := append([]podstate.PodLifecycleEvent(nil), want...)
	deadline := time.After(20 * time.Second)
	for len(missing) > 0 {
		if step != nil {
			step()
		}
		select {
		case ev := <-p.Events():
			for i, w := range missing {
				if w.ID == ev.ID && w.Type == ev.Type && (w.Data == "" || w.Data == ev.Data) {
					missing = append(missing[:i], missing[i+1:]...)
					break
				}
			}
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatalf("events %v did not arrive", missing)
		}
	}
}

func TestPLEGRelist(t *testing.T) {
	// containerd 1.6: no event stream, relisting only.
	h := newHarness(t, fakecri.Options{Unimplemented: []string{"GetContainerEvents"}}, nil)
	reg := prometheus.NewRegistry()
	p := startPLEG(t, h, reg)
	pod := newPod("relist", ctr("app"))
	synced := h.clk.Now()
	h.sync(pod, nil)
	app := h.container(pod, "app")
	sandbox := h.status(pod).Sandboxes[0].ID

	step := func() { h.clk.Step(time.Second) }
	collect(t, p, step,
		podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerStarted, Data: sandbox},
		podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerStarted, Data: app.ID})
	st, err := p.Cache().GetNewerThan(h.ctx, pod.UID, synced)
	if err != nil || st.Container("app") == nil || st.Container("app").State != podstate.ContainerStateRunning {
		t.Fatalf("cached status after the start: %+v, %v", st, err)
	}
	// The relist that saw the start counted the pod and its container.
	if pods, running := gaugeValue(t, reg, "kubelet_running_pods", ""), gaugeValue(t, reg, "kubelet_running_containers", "running"); pods != 1 || running != 1 {
		t.Errorf("kubelet_running_pods = %v, kubelet_running_containers{container_state=running} = %v after the start, want 1 and 1", pods, running)
	}

	// A worker waiting for a status newer than now is woken by the next
	// relist.
	now := h.clk.Now()
	got := make(chan *podstate.PodStatus, 1)
	go func() {
		st, err := p.Cache().GetNewerThan(h.ctx, pod.UID, now)
		if err != nil {
			t.Errorf("GetNewerThan after the exit: %v", err)
		}
		got <- st
	}()
	h.exitNow(pod, "app", 2)
	collect(t, p, step, podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerDied, Data: app.ID})
	// The relist that saw the exit may have started at the clock's "now"
	// (its timestamp is taken before it lists), which is not newer than
	// now: the waiter is woken by the next one.
	poll(t, func() bool {
		select {
		case st = <-got:
			return true
		default:
			step()
			return false
		}
	})
	if st == nil {
		t.FailNow()
	} else if st.Container("app").State != podstate.ContainerStateExited || st.Container("app").ExitCode != 2 {
		t.Fatalf("GetNewerThan after the exit = %+v", st.Container("app"))
	}
	poll(t, func() bool { step(); return gaugeValue(t, reg, "kubelet_running_containers", "exited") == 1 })
	if pods, running := gaugeValue(t, reg, "kubelet_running_pods", ""), gaugeValue(t, reg, "kubelet_running_containers", "running"); pods != 1 || running != 0 {
		t.Errorf("kubelet_running_pods = %v, kubelet_running_containers{container_state=running} = %v after the exit, want 1 (the sandbox runs) and 0", pods, running)
	}

	if err := h.pm.KillPod(h.ctx, pod, h.status(pod).RunningPod(), nil); err != nil {
		t.Fatal(err)
	}
	if err := h.pm.RemovePod(h.ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	collect(t, p, step,
		podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerDied, Data: sandbox},
		podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerRemoved, Data: sandbox},
		podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerRemoved, Data: app.ID})
	poll(t, func() bool {
		st, _ := p.Cache().Get(pod.UID)
		return len(st.Containers) == 0 && len(st.Sandboxes) == 0
	})
	poll(t, func() bool { step(); return gaugeValue(t, reg, "kubelet_running_pods", "") == 0 })
	if n := gaugeValue(t, reg, "kubelet_running_containers", "exited"); n != 0 {
		t.Errorf("kubelet_running_containers{container_state=exited} = %v after the removal, want 0", n)
	}
	if n := h.cri.Calls("GetContainerEvents"); n != 1 {
		t.Errorf("%d GetContainerEvents calls; an Unimplemented stream must not be retried", n)
	}
	if n := testutil.CollectAndCount(reg, "kubelet_pleg_relist_duration_seconds", "kubelet_pleg_last_seen_seconds"); n != 2 {
		t.Errorf("%d PLEG metric series, want 2", n)
	}
}

func TestPLEGEventStream(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	p := startPLEG(t, h, nil)
	poll(t, func() bool { return h.cri.EventStreams() == 1 })
	pod := newPod("stream", ctr("app"))
	h.sync(pod, nil)
	app := h.container(pod, "app")
	// No clock step: the runtime's events alone bring the news.
	collect(t, p, nil, podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerStarted, Data: app.ID})
	if st, _ := p.Cache().Get(pod.UID); st.Container("app") == nil {
		t.Fatal("the cache lacks the container after its event")
	}
	h.exitNow(pod, "app", 0)
	collect(t, p, nil, podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerDied, Data: app.ID})
}

func TestPLEGHealth(t *testing.T) {
	h := newHarness(t, fakecri.Options{Unimplemented: []string{"GetContainerEvents"}}, nil)
	p := startPLEG(t, h, nil)
	must(t, h.cri.SetError("ListPodSandbox", status.Error(codes.Unavailable, "runtime is stuck")))
	h.clk.Step(3*time.Minute + time.Second)
	ok, err := p.Healthy()
	if ok || err == nil || err.Error() != "PLEG is not healthy: pleg was last seen active 3m1s ago; threshold is 3m0s" {
		t.Fatalf("Healthy with relisting stalled = %v, %v", ok, err)
	}
	must(t, h.cri.SetError("ListPodSandbox", nil))
	poll(t, func() bool {
		h.clk.Step(time.Second)
		ok, _ := p.Healthy()
		return ok
	})
}

func TestPodCache(t *testing.T) {
	c := runtime.NewPodCache()
	uid := types.UID("u")
	if st, err := c.Get(uid); err != nil || st.ID != uid || len(st.Containers) != 0 {
		t.Fatalf("Get of an unknown pod = %+v, %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	results := make(chan *podstate.PodStatus, 2)
	go func() { st, _ := c.GetNewerThan(ctx, uid, t0); results <- st }()
	go func() { st, _ := c.GetNewerThan(ctx, uid, t0.Add(time.Minute)); results <- st }()
	// An old status wakes nobody; one set after t0 wakes the first waiter;
	// a relist that started after a minute wakes the second.
	c.Set(uid, &podstate.PodStatus{ID: uid, Name: "old"}, nil, t0)
	c.Set(uid, &podstate.PodStatus{ID: uid, Name: "new"}, nil, t0.Add(time.Second))
	if st := <-results; st.Name != "new" {
		t.Fatalf("first waiter got %q", st.Name)
	}
	select {
	case st := <-results:
		t.Fatalf("second waiter woken early with %q", st.Name)
	case <-time.After(10 * time.Millisecond):
	}
	c.UpdateTime(t0.Add(2 * time.Minute))
	if st := <-results; st.Name != "new" {
		t.Fatalf("second waiter got %q", st.Name)
	}
	// A failed read is reported with its error.
	readErr := errors.New("runtime down")
	c.Set(uid, nil, readErr, t0.Add(3*time.Minute))
	if _, err := c.GetNewerThan(ctx, uid, t0); !errors.Is(err, readErr) {
		t.Fatalf("GetNewerThan after a failed read = %v", err)
	}
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if _, err := c.GetNewerThan(short, uid, t0.Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("GetNewerThan with a canceled context = %v", err)
	}
	c.Delete(uid)
	if st, err := c.Get(uid); err != nil || st.Name != "" {
		t.Fatalf("Get after Delete = %+v, %v", st, err)
	}
}

// gaugeValue returns the value of gauge name (with container_state state
// when state is not empty) in reg, -1 when it has no such series.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, state string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := state == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "container_state" && l.GetValue() == state {
					match = true
				}
			}
			if match {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestPLEGRelistsRarelyWhileEventsStream: with the event stream up, the
// PLEG marks its cache fresh every relist period without listing the
// runtime, and relists only every EventedRelistPeriod.
func TestPLEGRelistsRarelyWhileEventsStream(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	p := startPLEG(t, h, nil)
	poll(t, func() bool { return h.cri.EventStreams() == 1 })
	// The stream connecting brings a relist of its own.
	poll(t, func() bool { return h.cri.Calls("ListPodSandbox") >= 2 })
	lists := h.cri.Calls("ListPodSandbox")
	fresh := func(at time.Time) bool {
		ctx, cancel := context.WithTimeout(h.ctx, 5*time.Millisecond)
		defer cancel()
		_, err := p.Cache().GetNewerThan(ctx, "no-such-pod", at)
		return err == nil
	}
	for range 5 {
		at := h.clk.Now()
		poll(t, func() bool {
			if h.clk.HasWaiters() { // the PLEG waits for its next round
				h.clk.Step(runtime.DefaultRelistPeriod)
			}
			return fresh(at)
		})
	}
	if n := h.cri.Calls("ListPodSandbox"); n != lists {
		t.Errorf("%d relists while the events streamed, want none", n-lists)
	}
	poll(t, func() bool {
		h.clk.Step(runtime.DefaultEventedRelistPeriod)
		return h.cri.Calls("ListPodSandbox") > lists
	})
}

// TestPLEGRelistsOnTheNodesTicks: with the event stream up, the relist
// of every EventedRelistPeriod comes when the node's ticks (Align) say.
func TestPLEGRelistsOnTheNodesTicks(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	// A tick 7 s before the period is up, as ticks.Align may pick.
	const early = 7 * time.Second
	align := func(d time.Duration) time.Duration {
		if d == runtime.DefaultEventedRelistPeriod {
			return d - early
		}
		return d
	}
	startPLEGWith(t, h, runtime.PLEGOptions{Align: align})
	poll(t, func() bool { return h.cri.EventStreams() == 1 })
	// The stream connecting brings a relist of its own.
	poll(t, func() bool { return h.cri.Calls("ListPodSandbox") >= 2 })
	lists := h.cri.Calls("ListPodSandbox")
	poll(t, h.clk.HasWaiters)
	h.clk.Step(runtime.DefaultEventedRelistPeriod - early)
	poll(t, func() bool { return h.cri.Calls("ListPodSandbox") > lists })
}

// TestPLEGSleepsWhileNobodyWaits: with the event stream up and no pod
// worker waiting on the cache, the PLEG does not wake up every relist
// period; a waiter is served on a later period without a relist, and the
// cache is still marked fresh every RelistThreshold/2.
func TestPLEGSleepsWhileNobodyWaits(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	reg := prometheus.NewRegistry()
	p := startPLEG(t, h, reg)
	poll(t, func() bool { return h.cri.EventStreams() == 1 })
	poll(t, func() bool { return h.cri.Calls("ListPodSandbox") >= 2 })
	lists := h.cri.Calls("ListPodSandbox")
	lastSeen := func() float64 { return gaugeValue(t, reg, "kubelet_pleg_last_seen_seconds", "") }
	poll(t, h.clk.HasWaiters)
	seen := lastSeen()
	for range 5 {
		h.clk.Step(runtime.DefaultRelistPeriod)
		time.Sleep(2 * time.Millisecond)
	}
	if got := lastSeen(); got != seen {
		t.Errorf("the cache was marked fresh (last seen %v → %v) while nobody waited", seen, got)
	}

	at := h.clk.Now()
	served := make(chan error, 1)
	go func() { _, err := p.Cache().GetNewerThan(h.ctx, "no-such-pod", at); served <- err }()
	poll(t, func() bool {
		select {
		case err := <-served:
			if err != nil {
				t.Fatalf("GetNewerThan = %v", err)
			}
			return true
		default:
			h.clk.Step(runtime.DefaultRelistPeriod / 4)
			return false
		}
	})
	if got := lastSeen(); got <= seen {
		t.Errorf("last seen %v after serving a waiter, want later than %v", got, seen)
	}
	if n := h.cri.Calls("ListPodSandbox"); n != lists {
		t.Errorf("%d relists to serve a waiter, want none", n-lists)
	}

	// Nobody waits: the threshold's half still marks the cache fresh.
	seen = lastSeen()
	poll(t, func() bool {
		h.clk.Step(runtime.DefaultRelistThreshold / 8)
		return lastSeen() > seen
	})
	if n := h.cri.Calls("ListPodSandbox"); n > lists+1 {
		t.Errorf("%d relists, want at most one (the evented relist period passed)", n-lists)
	}
}

// TestPLEGHasPods: RunningPods lists a pod while a container of it runs or
// its sandbox is ready (the kubelet's running pods); Pods and HasPods while
// the runtime has anything of it, running or not (an exited container, a
// stopped sandbox); HasPods clears once the runtime has nothing of it left.
func TestPLEGHasPods(t *testing.T) {
	// containerd 1.6: no event stream, each relist a clock step.
	h := newHarness(t, fakecri.Options{Unimplemented: []string{"GetContainerEvents"}}, nil)
	p := startPLEG(t, h, nil)
	step := func() { h.clk.Step(time.Second) }
	if p.HasPods() {
		t.Error("HasPods on an empty runtime, want false")
	}
	pod := newPod("completed", ctr("app"))
	h.sync(pod, nil)
	app := h.container(pod, "app")
	collect(t, p, step, podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerStarted, Data: app.ID})
	if !p.HasPods() || len(p.RunningPods()) != 1 {
		t.Fatalf("a running pod: HasPods %t, RunningPods %v; want true and the pod", p.HasPods(), p.RunningPods())
	}
	h.exitNow(pod, "app", 0)
	sandbox := h.status(pod).Sandboxes[0].ID
	rs := h.client.RuntimeService()
	// Its ready sandbox keeps it running, as the kubelet's runtime cache
	// lists a pod with a ready sandbox.
	step()
	if len(p.RunningPods()) != 1 {
		t.Fatalf("a pod with an exited container and a ready sandbox: RunningPods %v, want the pod", p.RunningPods())
	}
	if err := rs.StopPodSandbox(h.ctx, sandbox); err != nil {
		t.Fatal(err)
	}
	// An exited container and a stopped sandbox: nothing runs (the
	// kubelet's GetPods(all=false)), yet the runtime holds the pod.
	poll(t, func() bool { step(); return len(p.RunningPods()) == 0 })
	if !p.HasPods() {
		t.Error("HasPods = false with the pod's exited container and stopped sandbox on the runtime, want true")
	}
	if held := p.Pods(); len(held) != 1 || held[0].ID != pod.UID || len(held[0].Containers) != 1 {
		t.Errorf("Pods = %v, want the pod with its exited container (housekeeping removes such an orphan)", held)
	}
	if err := rs.RemoveContainer(h.ctx, app.ID); err != nil {
		t.Fatal(err)
	}
	step()
	if !p.HasPods() {
		t.Error("HasPods = false with the pod's stopped sandbox on the runtime, want true")
	}
	if err := rs.RemovePodSandbox(h.ctx, sandbox); err != nil {
		t.Fatal(err)
	}
	poll(t, func() bool { step(); return !p.HasPods() })
}

// runObservedPLEG runs a PLEG on h whose syncs are observed, as the agent
// runs it, until the test ends, and returns it with a Backend over h's pod
// manager that hands it each sync's status.
func runObservedPLEG(t *testing.T, h *harness) (*runtime.PLEG, *runtime.Backend) {
	t.Helper()
	p, err := runtime.NewPLEG(runtime.PLEGOptions{Pods: h.pm, Runtime: h.client.RuntimeService(), Clock: h.clk, SyncsObserved: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := runtime.NewBackend(runtime.BackendOptions{Pods: h.pm, PLEG: p, Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return p, b
}

// TestPLEGWithObservedSyncs: a PLEG whose syncs are observed (the Backend
// hands it what each sync found) reads no pod on the runtime's created and
// started events, yet reports the start from the sync's own status; a
// container that stops is still read at once from its event.
func TestPLEGWithObservedSyncs(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	p, b := runObservedPLEG(t, h)
	poll(t, func() bool { return h.cri.EventStreams() == 1 })
	// The stream connecting brings a relist of its own.
	poll(t, func() bool { return h.cri.Calls("ListPodSandbox") >= 2 })
	lists := h.cri.Calls("ListPodSandbox")

	pod := newPod("observed", ctr("app"))
	if res := b.SyncPod(h.ctx, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	app := h.container(pod, "app")
	// No clock step: the sync's own read brings the news.
	collect(t, p, nil, podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerStarted, Data: app.ID})
	if rp := p.RunningPods(); len(rp) != 1 || rp[0].ID != pod.UID {
		t.Errorf("running pods %v, want the pod the sync started", rp)
	}
	// h.container read the pod once; the sync read what it created by
	// ID, without a list (SyncResult.Status).
	if n := h.cri.Calls("ListPodSandbox") - lists; n != 1 {
		t.Errorf("%d pod reads after the sync, want 1 (the test's): created and started events must not be read", n)
	}
	h.exitNow(pod, "app", 0)
	collect(t, p, nil, podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerDied, Data: app.ID})
	if st, _ := p.Cache().Get(pod.UID); st.Container("app") == nil || st.Container("app").State != podstate.ContainerStateExited {
		t.Error("the cache does not show the container exited after its event")
	}
}

// TestPLEGStopLogsNoError: stopping the PLEG as the agent runs it (a
// runner.Hook component) cuts its relist and event stream short, which the
// CRI client reports at error level; the agent's own stop is no error, so
// no error line is logged.
func TestPLEGStopLogsNoError(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pleg, err := runtime.NewPLEG(runtime.PLEGOptions{Pods: h.pm, Runtime: h.client.RuntimeService(), Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(args, `"error"`) {
			errs = append(errs, args)
		}
	}, funcr.Options{})
	lc := fxtest.NewLifecycle(t)
	runner.Hook(lc, nil, logger, "pleg", pleg.Run)
	lc.RequireStart()
	poll(t, func() bool { return h.cri.EventStreams() == 1 })
	lc.RequireStop()
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 0 {
		t.Errorf("error lines on a clean stop: %q", errs)
	}
}
