package prober

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/podstate"
)

func TestInitialResults(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	// A long initial delay: the workers see the container but do not
	// probe it yet.
	live, ready := execProbe(10, 1, 3), execProbe(10, 1, 3)
	live.InitialDelaySeconds, ready.InitialDelaySeconds = 60, 60
	start := execProbe(10, 1, 3)
	start.InitialDelaySeconds = 60
	pod := testPod("u1", v1.Container{LivenessProbe: live, ReadinessProbe: ready, StartupProbe: start})
	h.expect(Readiness, "c1", "none")
	h.setStatus("u1", running("c1", h.clock.Now(), false))
	h.add(pod)
	h.expect(Readiness, "c1", "failed")
	h.expect(Liveness, "c1", "successful")
	h.expect(Startup, "c1", "unknown")
	if h.h.count(Liveness)+h.h.count(Readiness)+h.h.count(Startup) != 0 {
		t.Fatal("probed during the initial delay")
	}
	if ok, known := h.m.Started("c1"); ok || !known {
		t.Fatalf("Started = %t, %t; want false, true (an Unknown result is a result)", ok, known)
	}
	if ok, known := h.m.Ready("c1"); ok || !known {
		t.Fatalf("Ready = %t, %t; want false, true", ok, known)
	}
	if got := h.m.Liveness("c1"); got.String() != "successful" {
		t.Fatalf("Liveness = %v", got)
	}
	if got := h.m.Readiness("nope"); got.String() != "unknown" {
		t.Fatalf("Readiness of an unknown container = %v", got)
	}
}

func TestThresholds(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.h.set(Readiness, Success)
	h.add(testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 2, 3)}))
	// One success of two needed.
	h.expect(Readiness, "c1", "failed")
	h.step(time.Second)
	h.expect(Readiness, "c1", "successful")

	h.h.set(Readiness, Failure)
	h.step(time.Second)
	h.expect(Readiness, "c1", "successful")
	h.step(time.Second)
	h.expect(Readiness, "c1", "successful")
	h.step(time.Second)
	h.expect(Readiness, "c1", "failed")

	// A success interrupts a run of failures; the count starts again.
	h.h.set(Readiness, Success, Failure, Failure, Success, Success)
	for i, want := range []string{"failed", "failed", "failed", "failed", "successful"} {
		h.step(time.Second)
		if got := h.result(Readiness, "c1"); got != want {
			t.Fatalf("step %d: readiness %s, want %s", i, got, want)
		}
	}
	// Readiness is never put on hold.
	if got := h.h.count(Readiness); got != 10 {
		t.Fatalf("%d readiness probes, want 10", got)
	}
}

func TestLivenessHoldUntilNewContainer(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.h.set(Liveness, Failure)
	h.add(testPod("u1", v1.Container{LivenessProbe: execProbe(1, 1, 2)}))
	h.expect(Liveness, "c1", "successful")
	h.step(time.Second)
	h.expect(Liveness, "c1", "failed")
	// On hold: no more probes of this container.
	h.step(5 * time.Second)
	if got := h.h.count(Liveness); got != 2 {
		t.Fatalf("%d liveness probes, want 2", got)
	}
	// The restarted container gets the initial result and is probed.
	h.h.set(Liveness, Success)
	h.setStatus("u1", running("c2", h.clock.Now(), true))
	h.step(time.Second)
	h.expect(Liveness, "c1", "none")
	h.expect(Liveness, "c2", "successful")
	if got := h.h.count(Liveness); got != 3 {
		t.Fatalf("%d liveness probes, want 3", got)
	}
}

func TestResetOnNewContainerID(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.add(testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 1)}))
	h.expect(Readiness, "c1", "successful")
	// A new instance that is not probed yet (initial delay) starts over
	// from the initial result.
	h.setStatus("u1", running("c2", h.clock.Now().Add(time.Hour), true))
	h.step(time.Second)
	h.expect(Readiness, "c1", "none")
	h.expect(Readiness, "c2", "failed")
}

func TestStartupGating(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), false))
	h.h.set(Startup, Failure, Success)
	pod := testPod("u1", v1.Container{
		StartupProbe:   execProbe(1, 1, 3),
		LivenessProbe:  execProbe(1, 1, 3),
		ReadinessProbe: execProbe(1, 1, 3),
	})
	h.add(pod)
	h.step(time.Second)
	h.expect(Startup, "c1", "successful")
	// Until the container counts as started, only the startup probe runs.
	if l, r := h.h.count(Liveness), h.h.count(Readiness); l+r != 0 {
		t.Fatalf("liveness ran %d times, readiness %d, before the container started", l, r)
	}
	h.expect(Liveness, "c1", "successful")
	h.expect(Readiness, "c1", "failed")
	// The status generator marks the container started.
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.step(2 * time.Second)
	if l, r, s := h.h.count(Liveness), h.h.count(Readiness), h.h.count(Startup); l != 2 || r != 2 || s != 2 {
		t.Fatalf("probes: liveness %d, readiness %d, startup %d; want 2, 2, 2", l, r, s)
	}
	h.expect(Readiness, "c1", "successful")
}

func TestStartupFailureHolds(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), false))
	h.h.set(Startup, Failure)
	h.add(testPod("u1", v1.Container{StartupProbe: execProbe(1, 1, 3)}))
	h.step(time.Second)
	h.expect(Startup, "c1", "unknown")
	h.step(time.Second)
	h.expect(Startup, "c1", "failed")
	h.step(5 * time.Second)
	if got := h.h.count(Startup); got != 3 {
		t.Fatalf("%d startup probes, want 3 (on hold after the failure)", got)
	}
}

func TestInitialDelay(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	p := execProbe(1, 1, 3)
	p.InitialDelaySeconds = 5
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.add(testPod("u1", v1.Container{LivenessProbe: p}))
	h.step(4 * time.Second)
	if got := h.h.count(Liveness); got != 0 {
		t.Fatalf("%d probes within the initial delay", got)
	}
	h.step(time.Second)
	if got := h.h.count(Liveness); got != 1 {
		t.Fatalf("%d probes once the initial delay passed, want 1", got)
	}
}

func TestRandomInitialDelayAfterAgentStart(t *testing.T) {
	// The agent started 2s ago, less than the 10s period: the first run
	// waits a random part of the period (3s here).
	h := newHarness(t, 2*time.Second, 3*time.Second)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.add(testPod("u1", v1.Container{LivenessProbe: execProbe(10, 1, 3)}))
	h.step(2 * time.Second)
	if got := h.h.count(Liveness); got != 0 {
		t.Fatalf("%d probes before the random delay ended", got)
	}
	h.step(time.Second)
	if got := h.h.count(Liveness); got != 1 {
		t.Fatalf("%d probes at the end of the random delay, want 1", got)
	}
	// Then every period from there.
	h.step(9 * time.Second)
	if got := h.h.count(Liveness); got != 1 {
		t.Fatalf("%d probes, want 1", got)
	}
	h.step(time.Second)
	if got := h.h.count(Liveness); got != 2 {
		t.Fatalf("%d probes a period later, want 2", got)
	}

	// Once the agent runs longer than a period, new workers start at once.
	h.h.set(Liveness, Success)
	h.setStatus("u2", running("d1", h.clock.Now(), true))
	h.add(testPod("u2", v1.Container{LivenessProbe: execProbe(10, 1, 3)}))
	if got := h.h.count(Liveness); got != 3 {
		t.Fatalf("%d probes, want 3: a new worker probes at once", got)
	}
}

func TestTerminalPodStopsWorkers(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.add(testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 3), LivenessProbe: execProbe(1, 1, 3)}))
	h.expect(Readiness, "c1", "successful")
	s := running("c1", h.clock.Now(), true)
	s.Phase = v1.PodSucceeded
	h.setStatus("u1", s)
	h.step(time.Second)
	if n := h.m.workerCount(); n != 0 {
		t.Fatalf("%d workers left for a terminal pod", n)
	}
	h.expect(Readiness, "c1", "none")
	h.expect(Liveness, "c1", "none")
}

func TestDeletionTimestamp(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.h.set(Liveness, Failure)
	pod := testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 3), LivenessProbe: execProbe(1, 1, 3),
		StartupProbe: execProbe(1, 1, 3)})
	h.add(pod)
	h.step(time.Second)
	h.expect(Liveness, "c1", "successful")
	// The pod is being deleted: the loop gives the worker the new pod.
	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = ptr.To(metav1.NewTime(h.clock.Now()))
	h.m.AddPod(deleted)
	before := h.h.count(Liveness)
	h.step(time.Second)
	// Liveness and startup stop; what they last said (Success) goes with
	// them, so nothing restarts the container. Readiness keeps going.
	if got := h.h.count(Liveness); got != before {
		t.Fatalf("liveness probed %d times after deletion", got-before)
	}
	h.expect(Liveness, "c1", "none")
	h.expect(Startup, "c1", "none")
	h.expect(Readiness, "c1", "successful")
	if n := h.m.workerCount(); n != 1 {
		t.Fatalf("%d workers, want 1 (readiness)", n)
	}
	r := h.h.count(Readiness)
	h.step(time.Second)
	if h.h.count(Readiness) != r+1 {
		t.Fatal("readiness stopped for a pod being deleted")
	}
}

func TestNonRunningContainer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policy   v1.RestartPolicy
		exitCode int32
		// restartingAll: the pod's AllContainersRestarting condition is
		// True (another container's exit restarts all of them).
		restartingAll bool
		keep          bool
	}{
		{"never restarted", v1.RestartPolicyNever, 0, false, false},
		{"always restarted", v1.RestartPolicyAlways, 0, false, true},
		{"on failure, failed", v1.RestartPolicyOnFailure, 1, false, true},
		{"on failure, succeeded", v1.RestartPolicyOnFailure, 0, false, false},
		{"never, but all containers restart", v1.RestartPolicyNever, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, time.Hour, 0)
			h.setStatus("u1", running("c1", h.clock.Now(), true))
			pod := testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 3)})
			pod.Spec.RestartPolicy = tc.policy
			h.add(pod)
			h.expect(Readiness, "c1", "successful")
			s := running("c1", h.clock.Now(), true)
			s.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: tc.exitCode}}
			if tc.restartingAll {
				s.Conditions = append(s.Conditions, v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionTrue})
			}
			h.setStatus("u1", s)
			h.step(time.Second)
			if got := h.m.workerCount() == 1; got != tc.keep {
				t.Fatalf("worker kept: %t, want %t", got, tc.keep)
			}
			if tc.keep {
				h.expect(Readiness, "c1", "failed")
			} else {
				h.expect(Readiness, "c1", "none")
			}
		})
	}
}

func TestContainerRestartRules(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	c := &v1.Container{RestartPolicy: &never, RestartPolicyRules: []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}}
	spec := &v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways}
	if !podstate.ContainerShouldRestart(c, spec, 42) {
		t.Error("exit 42 matches a Restart rule")
	}
	if podstate.ContainerShouldRestart(c, spec, 1) {
		t.Error("exit 1 falls back to the container's policy Never")
	}
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", RestartPolicy: &never,
		RestartPolicyRules: []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0}}}}}}}}
	st := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "a",
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 3}}}}}
	if !podstate.ShouldAllContainersRestart(pod, nil, st) {
		t.Error("exit 3 matches a RestartAllContainers rule")
	}
	st.ContainerStatuses[0].State.Terminated.ExitCode = 0
	if podstate.ShouldAllContainersRestart(pod, nil, st) {
		t.Error("exit 0 matches no rule")
	}
	st.Conditions = []v1.PodCondition{{Type: v1.AllContainersRestarting, Status: v1.ConditionTrue}}
	if !podstate.ShouldAllContainersRestart(pod, nil, st) {
		t.Error("the AllContainersRestarting condition says so")
	}
}

func TestContainerRunningBeforeAgentStart(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	// Started long before the Manager was created: no initial result, so
	// the status generator keeps what the pod's status said.
	h.setStatus("u1", running("c1", t0.Add(-time.Hour), true))
	h.add(testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 2, 3)}))
	h.expect(Readiness, "c1", "none")
	h.step(time.Second)
	h.expect(Readiness, "c1", "successful")
}

func TestSidecarStartedBeforeAgentStart(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	always := v1.ContainerRestartPolicyAlways
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "proxy", RestartPolicy: &always, StartupProbe: execProbe(1, 1, 3)}},
			Containers:     []v1.Container{{Name: "app"}},
		},
	}
	s := running("c1", h.clock.Now(), true)
	s.InitContainerStatuses = []v1.ContainerStatus{{
		Name: "proxy", ContainerID: "fake://p1", Started: ptr.To(true),
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Hour))}},
	}}
	h.setStatus("u1", s)
	h.add(pod)
	h.expect(Startup, "p1", "successful")
	if got := h.h.count(Startup); got != 0 {
		t.Fatalf("%d startup probes of a started sidecar", got)
	}
}

func TestNotifierCoalesces(t *testing.T) {
	n := newNotifier()
	for _, uid := range []types.UID{"a", "a", "b", "a", "c", "b"} {
		n.notify(uid)
	}
	var got []types.UID
	for {
		uid, ok := n.next()
		if !ok {
			break
		}
		got = append(got, uid)
	}
	if want := []types.UID{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	// Taken, a UID can be queued again.
	n.notify("a")
	if uid, ok := n.next(); !ok || uid != "a" {
		t.Fatalf("next = %q, %t", uid, ok)
	}
}

func TestUpdatesOnlyOnChange(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.h.set(Liveness, Success)
	h.h.set(Readiness, Success)
	h.add(testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 1), LivenessProbe: execProbe(1, 1, 1)}))
	// Readiness went none → Failure → Success.
	if n := h.drainUpdates("u1"); n < 1 || n > 2 {
		t.Fatalf("%d updates, want 1 or 2", n)
	}
	// The same results again: nothing to tell.
	h.step(3 * time.Second)
	if n := h.drainUpdates("u1"); n != 0 {
		t.Fatalf("%d updates without a change", n)
	}
	// Liveness failing is news.
	h.h.set(Liveness, Failure)
	h.step(time.Second)
	if n := h.drainUpdates("u1"); n != 1 {
		t.Fatalf("%d updates, want 1", n)
	}
	// A liveness change to Success (a new container's initial result) is
	// not news to the loop.
	h.h.set(Liveness, Success)
	h.setStatus("u2", running("d1", h.clock.Now(), true))
	h.add(testPod("u2", v1.Container{LivenessProbe: execProbe(1, 1, 1)}))
	h.expect(Liveness, "d1", "successful")
	if n := h.drainUpdates("u2"); n != 0 {
		t.Fatalf("%d updates for a liveness success", n)
	}
}

// A container that exited for good stops its worker; the worker the next
// sync starts sees it, sets its initial result and stops again, which is no
// change: the loop is not asked to sync again, and again.
func TestNoUpdateLoopForExitedContainer(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	pod := testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 1)})
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	h.add(pod)
	h.drainUpdates("u1")
	s := running("c1", h.clock.Now(), true)
	s.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}
	h.setStatus("u1", s)
	h.step(time.Second)
	if n := h.drainUpdates("u1"); n != 1 {
		t.Fatalf("%d updates when readiness went, want 1", n)
	}
	for range 3 {
		h.add(pod)
		if n := h.drainUpdates("u1"); n != 0 {
			t.Fatalf("%d updates from a worker that found the container gone", n)
		}
	}
	if n := h.m.workerCount(); n != 0 {
		t.Fatalf("%d workers", n)
	}
}

// drainUpdates receives the pending updates, all of which must be for
// uid, and returns how many there were.
func (h *harness) drainUpdates(uid types.UID) int {
	h.t.Helper()
	h.settle()
	n := 0
	deadline := time.Now().Add(10 * time.Second)
	for h.m.notifier.queued() > 0 {
		select {
		case got := <-h.m.Updates():
			if got != uid {
				h.t.Fatalf("update for %q, want %q", got, uid)
			}
			n++
		default:
			if time.Now().After(deadline) {
				h.t.Fatal("pending updates not delivered")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return n
}

func TestManualReadinessTrigger(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.h.set(Readiness, Failure)
	pod := testPod("u1", v1.Container{ReadinessProbe: execProbe(10, 1, 1)})
	h.add(pod)
	h.expect(Readiness, "c1", "failed")
	// Each sync of a pod with a container not ready probes it at once.
	h.add(pod)
	if got := h.h.count(Readiness); got != 2 {
		t.Fatalf("%d readiness probes, want 2", got)
	}
	h.h.set(Readiness, Success)
	h.step(time.Second)
	h.add(pod)
	h.expect(Readiness, "c1", "successful")
	if got := h.h.count(Readiness); got != 3 {
		t.Fatalf("%d readiness probes, want 3", got)
	}
	// The period restarted at the trigger (t=1s): next run at 11s.
	h.add(pod)
	h.step(9 * time.Second)
	if got := h.h.count(Readiness); got != 3 {
		t.Fatalf("%d readiness probes, want 3 (ready: no trigger; period not over)", got)
	}
	h.step(time.Second)
	if got := h.h.count(Readiness); got != 4 {
		t.Fatalf("%d readiness probes, want 4", got)
	}
	// Not started: no trigger.
	h.h.set(Readiness, Failure)
	h.step(10 * time.Second)
	h.setStatus("u1", running("c1", h.clock.Now(), false))
	n := h.h.count(Readiness)
	h.add(pod)
	if got := h.h.count(Readiness); got != n {
		t.Fatalf("a container that has not started was probed")
	}
}

func TestSlowRunCatchesUpOnce(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	release := h.h.blockType(Readiness)
	h.m.AddPod(testPod("u1", v1.Container{ReadinessProbe: execProbe(2, 1, 1)}))
	<-h.h.entered
	// The run due at 0 lasts until 5s, past the ticks at 2s and 4s.
	h.clock.Step(5 * time.Second)
	release()
	h.settle()
	// One tick was kept: the worker runs again at once, then at 6s.
	if got := h.h.count(Readiness); got != 2 {
		t.Fatalf("%d readiness probes, want 2", got)
	}
	h.step(time.Second)
	if got := h.h.count(Readiness); got != 3 {
		t.Fatalf("%d readiness probes at 6s, want 3", got)
	}
	h.step(time.Second)
	if got := h.h.count(Readiness); got != 3 {
		t.Fatalf("%d readiness probes at 7s, want 3", got)
	}
	h.step(time.Second)
	if got := h.h.count(Readiness); got != 4 {
		t.Fatalf("%d readiness probes at 8s, want 4", got)
	}
}

func TestHungProbeDoesNotDelayOthers(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.setStatus("u2", running("d1", h.clock.Now(), true))
	release := h.h.blockType(Liveness)
	defer release()
	h.m.AddPod(testPod("u1", v1.Container{LivenessProbe: execProbe(1, 1, 3)}))
	<-h.h.entered
	h.m.AddPod(testPod("u2", v1.Container{ReadinessProbe: execProbe(1, 1, 3)}))
	for i := 1; i <= 5; i++ {
		h.waitFor("readiness probe", func() bool { return h.h.count(Readiness) == i })
		h.waitFor("readiness worker idle", func() bool {
			h.m.mu.Lock()
			defer h.m.mu.Unlock()
			return h.m.inflight == 1
		})
		h.clock.Step(time.Second)
	}
	if got := h.h.count(Liveness); got != 1 {
		t.Fatalf("%d liveness probes, want 1 (hung)", got)
	}
}

func TestRemovePodDiscardsRunInFlight(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.h.set(Readiness, Success)
	pod := testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 1)})
	h.add(pod)
	h.expect(Readiness, "c1", "successful")
	h.h.set(Readiness, Failure)
	release := h.h.blockType(Readiness)
	defer release()
	h.clock.Step(time.Second)
	<-h.h.entered
	h.m.RemovePod(pod)
	// The run is cancelled and its result thrown away.
	h.settle()
	h.expect(Readiness, "c1", "none")
	if n := h.m.workerCount(); n != 0 {
		t.Fatalf("%d workers", n)
	}
	if evs := h.events(); len(evs) != 0 {
		t.Fatalf("events of a discarded run: %q", evs)
	}
	if got := gatherProbeTotal(t, h, "Readiness", "successful"); got != -1 {
		t.Fatalf("series of a removed worker still there (%v)", got)
	}
	// Added again, it starts afresh.
	h.h.set(Readiness, Success)
	release()
	h.add(pod)
	h.expect(Readiness, "c1", "successful")
}

func TestCleanupPods(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	for _, uid := range []types.UID{"u1", "u2"} {
		h.setStatus(uid, running(string(uid)+"c", h.clock.Now(), true))
		h.add(testPod(uid, v1.Container{ReadinessProbe: execProbe(1, 1, 1), LivenessProbe: execProbe(1, 1, 1)}))
	}
	h.m.CleanupPods(map[types.UID]struct{}{"u2": {}})
	h.settle()
	h.expect(Readiness, "u1c", "none")
	h.expect(Readiness, "u2c", "successful")
	if n := h.m.workerCount(); n != 2 {
		t.Fatalf("%d workers, want 2", n)
	}
}

func TestStopLivenessAndStartup(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	pod := testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 1), LivenessProbe: execProbe(1, 1, 1), StartupProbe: execProbe(1, 1, 1)})
	h.add(pod)
	h.m.StopLivenessAndStartup(pod)
	h.settle()
	h.expect(Liveness, "c1", "none")
	h.expect(Startup, "c1", "none")
	h.expect(Readiness, "c1", "successful")
	if n := h.m.workerCount(); n != 1 {
		t.Fatalf("%d workers, want 1", n)
	}
}

func TestEventsAndMetrics(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.h.out = "boom"
	h.h.set(Liveness, Failure)
	h.h.set(Readiness, Warning, Success)
	h.add(testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 3), LivenessProbe: execProbe(1, 1, 3)}))
	h.step(time.Second)
	evs := h.events()
	want := []string{
		"Warning Unhealthy Liveness probe failed: boom",
		"Warning ProbeWarning Readiness probe warning: boom",
	}
	for _, w := range want {
		found := false
		for _, e := range evs {
			found = found || e == w
		}
		if !found {
			t.Errorf("no event %q in %q", w, evs)
		}
	}
	if len(evs) != 3 {
		t.Errorf("events %q, want 2 liveness failures and 1 warning", evs)
	}
	if got := gatherProbeTotal(t, h, "Liveness", "failed"); got != 2 {
		t.Errorf("liveness failed = %v, want 2", got)
	}
	if got := gatherProbeTotal(t, h, "Readiness", "successful"); got != 2 {
		t.Errorf("readiness successful = %v, want 2 (a warning is a success)", got)
	}
	if got := gatherProbeTotal(t, h, "Liveness", "successful"); got != -1 {
		t.Errorf("liveness successful = %v, want no series", got)
	}
	if got := gatherDurationCount(t, h, "Readiness"); got != 2 {
		t.Errorf("readiness duration samples = %d, want 2", got)
	}
	if got := gatherDurationCount(t, h, "Liveness"); got != 0 {
		t.Errorf("liveness duration samples = %d, want none (failures are not timed)", got)
	}

	// A prober error is retried three times, recorded, and the run is
	// thrown away.
	h.h.mu.Lock()
	h.h.err = errors.New(`port "web" not found`)
	h.h.mu.Unlock()
	before := h.h.count(Readiness)
	h.step(time.Second)
	if got := h.h.count(Readiness) - before; got != 3 {
		t.Errorf("%d tries of an erroring probe, want 3", got)
	}
	found := false
	for _, e := range h.events() {
		found = found || e == `Warning Unhealthy Readiness probe errored and resulted in unknown state: port "web" not found`
	}
	if !found {
		t.Error("no event for the prober error")
	}
	h.expect(Readiness, "c1", "successful")
}

// gatherProbeTotal returns prober_probe_total for pod web/ns (u1),
// container app, or -1 without such a series.
func gatherProbeTotal(t *testing.T, h *harness, probeType, result string) float64 {
	t.Helper()
	for _, m := range gather(t, h, "prober_probe_total") {
		l := labels(m)
		if l["probe_type"] == probeType && l["result"] == result && l["container"] == "app" &&
			l["pod"] == "web" && l["namespace"] == "ns" && l["pod_uid"] == "u1" {
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

func gatherDurationCount(t *testing.T, h *harness, probeType string) uint64 {
	t.Helper()
	for _, m := range gather(t, h, "prober_probe_duration_seconds") {
		l := labels(m)
		if _, ok := l["pod_uid"]; ok {
			t.Fatal("prober_probe_duration_seconds has no pod_uid label")
		}
		if l["probe_type"] == probeType && l["container"] == "app" && l["pod"] == "web" && l["namespace"] == "ns" {
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func gather(t *testing.T, h *harness, name string) []*dto.Metric {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestGoroutinesAreReused(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	const pods = 200
	for i := range pods {
		uid := types.UID(fmt.Sprintf("u%d", i))
		h.setStatus(uid, running(string(uid), h.clock.Now(), true))
		h.m.AddPod(testPod(uid, v1.Container{ReadinessProbe: execProbe(1, 1, 1)}))
	}
	h.step(20 * time.Second)
	if got := h.h.count(Readiness); got != pods*21 {
		t.Fatalf("%d runs, want %d", got, pods*21)
	}
	// All 200 are due at once every second: at most Parallelism goroutines
	// run them.
	alive, started := h.m.pool.stats()
	if started > DefaultParallelism {
		t.Fatalf("%d goroutines started for %d runs of %d workers", started, pods*21, pods)
	}
	if alive > DefaultParallelism {
		t.Fatalf("%d goroutines alive", alive)
	}
	t.Logf("%d runs on %d goroutines", pods*21, started)
}

func TestSlowRunsDoNotCountAgainstParallelism(t *testing.T) {
	h := newHarness(t, time.Hour, 0)
	h.m.pool.mu.Lock()
	h.m.pool.limit = 1
	h.m.pool.mu.Unlock()
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.setStatus("u2", running("d1", h.clock.Now(), true))
	release := h.h.blockType(Liveness)
	defer release()
	h.m.AddPod(testPod("u1", v1.Container{LivenessProbe: execProbe(1, 1, 3)}))
	<-h.h.entered
	// The hung liveness run fills the only place: the readiness run waits.
	h.m.AddPod(testPod("u2", v1.Container{ReadinessProbe: execProbe(1, 1, 3)}))
	h.waitFor("the readiness run to be queued", func() bool {
		h.m.pool.mu.Lock()
		defer h.m.pool.mu.Unlock()
		return h.m.pool.queued() == 1
	})
	if got := h.h.count(Readiness); got != 0 {
		t.Fatalf("%d readiness runs beside a fast run at parallelism 1", got)
	}
	// Once the hung run lasted slowRun, it no longer holds the place.
	h.clock.Step(slowRun)
	h.waitFor("the readiness run", func() bool { return h.h.count(Readiness) == 1 })

	// Two goroutines for a parallelism of 1: once both are parked, the
	// surplus one is retired.
	release()
	for i := 0; ; i++ {
		h.step(time.Second)
		if alive, _ := h.m.pool.stats(); alive == 1 {
			break
		}
		if i == 10 {
			alive, _ := h.m.pool.stats()
			t.Fatalf("%d goroutines parked, want 1", alive)
		}
	}
}

func TestRunOnceAndNoLeaks(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newHarness(t, time.Hour, 0)
	h.setStatus("u1", running("c1", h.clock.Now(), true))
	h.add(testPod("u1", v1.Container{ReadinessProbe: execProbe(1, 1, 1)}))
	if err := h.m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second Run: %v", err)
	}
	h.stop()
	if alive, _ := h.m.pool.stats(); alive != 0 {
		t.Fatalf("%d pool goroutines after Run returned", alive)
	}
	h.waitFor("goroutines to exit", func() bool { return runtime.NumGoroutine() <= base })
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without PodStatus")
	}
	ps := func(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }
	if _, err := New(Options{PodStatus: ps, Handlers: []Handler{newScriptHandler(), newScriptHandler()}}); err == nil {
		t.Error("New with two exec handlers")
	}
}

func TestRuntimeID(t *testing.T) {
	for in, want := range map[string]string{"containerd://abc": "abc", "abc": "abc", "": "", "cri-o://x://y": "x://y"} {
		if got := runtimeID(in); got != want {
			t.Errorf("runtimeID(%q) = %q, want %q", in, got, want)
		}
	}
}
