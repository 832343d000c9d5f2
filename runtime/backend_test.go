package runtime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/status/podstatus"
	"github.com/nodekit/nodekit/volume"
)

// fakeVolumes is a VolumeManager that records calls; MountPod fails while
// err is set.
type fakeVolumes struct {
	mu    sync.Mutex
	calls []string
	err   error
	// unmountErr is UnmountPod's answer.
	unmountErr error
	dir        string
}

func (f *fakeVolumes) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

func (f *fakeVolumes) MountPod(_ context.Context, pod *v1.Pod) (map[string]volume.Mounted, error) {
	f.record("mount " + pod.Name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := map[string]volume.Mounted{}
	for _, vol := range pod.Spec.Volumes {
		out[vol.Name] = volume.Mounted{Path: filepath.Join(f.dir, vol.Name), ReadOnly: true}
	}
	return out, nil
}

func (f *fakeVolumes) UnmountPod(_ context.Context, uid types.UID) error {
	f.record("unmount " + string(uid))
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unmountErr
}

func (f *fakeVolumes) SubPath(_ context.Context, s volume.SubPathSpec) (string, error) {
	return filepath.Join(s.VolumePath, s.SubPath), nil
}

// retryError is a MountPod error that says when the volumes are tried
// again.
type retryError struct {
	error
	at time.Time
}

func (e retryError) RetryAt() time.Time { return e.at }

func (f *fakeVolumes) history() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// TestBackendVolumes: the Backend mounts a pod's volumes before its sync
// (nothing starts while they fail), passes them to the containers, and
// unmounts them once the pod is stopped and before it is removed; the
// PLEG's cache HasPod, true for every pod before its first relist.
func TestBackendVolumes(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pleg, err := runtime.NewPLEG(runtime.PLEGOptions{Pods: h.pm, Runtime: h.client.RuntimeService(), Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	retryAt := h.clk.Now().Add(500 * time.Millisecond)
	vols := &fakeVolumes{dir: t.TempDir(), err: retryError{errors.New("unmounted volumes=[config]"), retryAt}}
	b, err := runtime.NewBackend(runtime.BackendOptions{Pods: h.pm, PLEG: pleg, Volumes: vols, Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	if !pleg.Cache().HasPod("anything") {
		t.Error("HasPod is false before the PLEG listed the runtime")
	}
	pod := newPod("vols", ctr("app"))
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "config", MountPath: "/config"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}}}

	res := b.SyncPod(h.ctx, pod)
	if res.Err == nil || h.cri.Calls("RunPodSandbox") != 0 {
		t.Fatalf("sync with failing volumes: %v, %d sandboxes; want an error and nothing started", res.Err, h.cri.Calls("RunPodSandbox"))
	}
	if !res.RetryAt.Equal(retryAt) {
		t.Errorf("sync with failing volumes: RetryAt %v, want the volume manager's %v", res.RetryAt, retryAt)
	}
	vols.mu.Lock()
	vols.err = nil
	vols.mu.Unlock()
	if res := b.SyncPod(h.ctx, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	c := h.container(pod, "app")
	var mounted bool
	for _, m := range h.cri.ContainerConfig(c.ID).Mounts {
		mounted = mounted || (m.ContainerPath == "/config" && m.HostPath == filepath.Join(vols.dir, "config") && m.Readonly)
	}
	if !mounted {
		t.Errorf("the container does not mount the volume manager's path: %v", h.cri.ContainerConfig(c.ID).Mounts)
	}

	// The PLEG lists the runtime once: HasPod answers from what it read.
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error)
	go func() { done <- pleg.Run(ctx) }()
	poll(t, func() bool { return !pleg.Cache().HasPod("unknown") })
	if !pleg.Cache().HasPod(pod.UID) {
		t.Error("HasPod is false for the pod the runtime runs")
	}
	cancel()
	<-done

	// A volume that cannot be torn down fails KillPod once the containers
	// are stopped: the pod's final status waits for the unmount.
	vols.mu.Lock()
	vols.unmountErr = errors.New("device busy")
	vols.mu.Unlock()
	h.inBackground(time.Second, func() {
		if err := b.KillPod(h.ctx, pod, nil); err == nil || !strings.Contains(err.Error(), "device busy") {
			t.Errorf("KillPod with a failing unmount: %v, want its error", err)
		}
	})
	if c := h.container(pod, "app"); c.State != podstate.ContainerStateExited {
		t.Fatalf("after KillPod the container is %s", c.State)
	}
	vols.mu.Lock()
	vols.unmountErr = nil
	vols.mu.Unlock()
	if err := b.KillPod(h.ctx, pod, nil); err != nil {
		t.Fatalf("KillPod of the stopped pod once the unmount works: %v", err)
	}
	if err := b.RemovePod(h.ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	want := []string{"mount vols", "mount vols", "unmount uid-vols", "unmount uid-vols", "unmount uid-vols"}
	if got := vols.history(); !slices.Equal(got, want) {
		t.Errorf("volume manager calls %q, want %q", got, want)
	}
}

// TestBackendStatusAfterSyncWaitsForNoRelist: the status read right after
// a sync that started the pod's containers shows them running at once,
// without the PLEG's next relist or freshness mark (the fake clock moves a
// millisecond, the PLEG waits a second), and the PLEG learns of the start from the sync itself.
func TestBackendStatusAfterSyncWaitsForNoRelist(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pleg, b := runObservedPLEG(t, h)
	pod := newPod("prompt", ctr("app"))
	read := func() v1.PodStatus {
		t.Helper()
		rctx, rcancel := context.WithTimeout(h.ctx, wait.ForeverTestTimeout)
		defer rcancel()
		st, err := b.PodStatus(rctx, pod, podstatus.GenerateOptions{})
		if err != nil {
			t.Fatalf("status of the pod: %v", err)
		}
		return st
	}
	if st := read(); st.Phase != v1.PodPending {
		t.Fatalf("phase %s before the sync, want Pending", st.Phase)
	}
	// Time goes on, far less than the PLEG's period.
	h.clk.Step(time.Millisecond)
	if res := b.SyncPod(h.ctx, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	if st := read(); st.Phase != v1.PodRunning {
		t.Fatalf("phase %s right after the sync, want Running", st.Phase)
	}
	collect(t, pleg, nil, podstate.PodLifecycleEvent{ID: pod.UID, Type: podstate.ContainerStarted})
}

// TestBackendRestartsAllContainers drives the Backend as the pod loop does
// (status, sync, status) through a RestartAllContainers exit: the status
// reports the exit and the AllContainersRestarting condition before the
// containers go; the next sync removes every init and regular container
// and keeps the sandbox; the status then shows them waiting,
// RestartingAllContainers; the syncs after start them again from the
// init container, each with restart count 1, and nothing restarts twice.
func TestBackendRestartsAllContainers(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pleg, err := runtime.NewPLEG(runtime.PLEGOptions{Pods: h.pm, Runtime: h.client.RuntimeService(), Clock: h.clk, SyncsObserved: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := runtime.NewBackend(runtime.BackendOptions{Pods: h.pm, PLEG: pleg, Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	never := v1.ContainerRestartPolicyNever
	source := ctr("source")
	source.RestartPolicy = &never
	source.RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	pod := newPod("restartall", source, ctr("regular"))
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.InitContainers = []v1.Container{ctr("init", "true")}

	var prev *v1.PodStatus
	read := func() v1.PodStatus {
		t.Helper()
		rctx, rcancel := context.WithTimeout(h.ctx, wait.ForeverTestTimeout)
		defer rcancel()
		st, err := b.PodStatus(rctx, pod, podstatus.GenerateOptions{Previous: prev})
		if err != nil {
			t.Fatalf("status of the pod: %v", err)
		}
		prev = &st
		return st
	}
	sync := func() time.Time {
		t.Helper()
		h.clk.Step(time.Millisecond)
		res := b.SyncPod(h.ctx, pod)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res.RetryAt
	}
	statusOf := func(st v1.PodStatus, name string) v1.ContainerStatus {
		t.Helper()
		for _, cs := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
			if cs.Name == name {
				return cs
			}
		}
		t.Fatalf("no status of container %s", name)
		return v1.ContainerStatus{}
	}
	restarting := func(st v1.PodStatus) *v1.PodCondition {
		t.Helper()
		for i := range st.Conditions {
			if st.Conditions[i].Type == v1.AllContainersRestarting {
				return &st.Conditions[i]
			}
		}
		t.Fatalf("no AllContainersRestarting condition in %+v", st.Conditions)
		return nil
	}
	allRunning := func(st v1.PodStatus) bool {
		return statusOf(st, "source").State.Running != nil && statusOf(st, "regular").State.Running != nil
	}

	pleg.Relist(h.ctx)
	st := read()
	for i := 0; i < 3 && !allRunning(st); i++ {
		sync()
		st = read()
	}
	if !allRunning(st) || st.Phase != v1.PodRunning {
		t.Fatalf("pod not running: %+v", st)
	}
	if c := restarting(st); c.Status != v1.ConditionFalse {
		t.Fatalf("AllContainersRestarting %+v before any exit, want False", c)
	}
	sandbox := h.status(pod).Sandboxes[0].ID

	// The exit reaches the cache between the status and the sync: the
	// sync leaves it for the status to report first.
	h.exitNow(pod, "source", 42)
	h.clk.Step(time.Millisecond)
	pleg.Relist(h.ctx)
	if retry := sync(); retry.IsZero() {
		t.Error("a sync that left an exit unreported asked for no prompt retry")
	}
	if c := h.container(pod, "source"); c.State != podstate.ContainerStateExited {
		t.Fatalf("source %v before its exit was reported, want it left exited", c.State)
	}
	st = read()
	if c := restarting(st); c.Status != v1.ConditionTrue || c.Reason != podstatus.RestartAllContainersStarted {
		t.Fatalf("AllContainersRestarting %+v after the exit, want True, RestartAllContainersStarted", c)
	}
	if term := statusOf(st, "source").State.Terminated; term == nil || term.ExitCode != 42 {
		t.Fatalf("source %+v, want terminated with 42", statusOf(st, "source").State)
	}

	// The reset: every init and regular container goes, the sandbox stays.
	h.events()
	if retry := sync(); retry.IsZero() {
		t.Error("the reset asked for no prompt sync to start the containers again")
	}
	rs := h.status(pod)
	if len(rs.Containers) != 0 || len(rs.Sandboxes) != 1 || rs.Sandboxes[0].ID != sandbox || !rs.Sandboxes[0].Ready {
		t.Fatalf("after the reset: %d containers, sandboxes %+v; want none, and sandbox %s kept", len(rs.Containers), rs.Sandboxes, sandbox)
	}
	wantEvents(t, h.events(), "Normal Killing killing")
	for _, name := range []string{"init", "source", "regular"} {
		if _, err := os.Stat(filepath.Join(h.logsDir, "default_restartall_uid-restartall", name, "0.log")); err != nil {
			t.Errorf("log of the removed container %s: %v", name, err)
		}
	}
	st = read()
	if c := restarting(st); c.Status != v1.ConditionFalse {
		t.Fatalf("AllContainersRestarting %+v once all are removed, want False", c)
	}
	for _, name := range []string{"init", "source", "regular"} {
		cs := statusOf(st, name)
		if w := cs.State.Waiting; w == nil || w.Reason != podstatus.RestartingAllContainers || cs.RestartCount != 1 ||
			cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.Reason != podstatus.RestartingAllContainers {
			t.Errorf("%s after the reset: %+v, want waiting RestartingAllContainers, restart count 1", name, cs)
		}
	}
	if st.Phase != v1.PodRunning {
		t.Errorf("phase %s while all containers restart, want Running", st.Phase)
	}

	// Started again, from the init container.
	for i := 0; i < 3 && !allRunning(st); i++ {
		sync()
		st = read()
	}
	if !allRunning(st) {
		t.Fatalf("containers not running again: %+v", st)
	}
	for _, name := range []string{"init", "source", "regular"} {
		if cs := statusOf(st, name); cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
			t.Errorf("%s started again: restart count %d, last termination %+v; want 1 and one", name, cs.RestartCount, cs.LastTerminationState)
		}
	}
	if c := h.container(pod, "init"); c.RestartCount != 1 {
		t.Errorf("runtime restart count of init %d, want 1 (from its kept log)", c.RestartCount)
	}
	if rs := h.status(pod); rs.Sandboxes[0].ID != sandbox || len(rs.Sandboxes) != 1 {
		t.Errorf("sandboxes %+v, want %s only", rs.Sandboxes, sandbox)
	}
	// No loop: the next sync finds nothing to do.
	if retry := sync(); !retry.IsZero() {
		t.Errorf("a sync after the restart asked to retry at %v", retry)
	}
	if c := restarting(read()); c.Status != v1.ConditionFalse {
		t.Errorf("AllContainersRestarting %+v, want False", c)
	}
}
