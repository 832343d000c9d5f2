package podstatus_test

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/status/podstatus"
)

func TestPhase(t *testing.T) {
	never, onFailure, always := v1.RestartPolicyNever, v1.RestartPolicyOnFailure, v1.RestartPolicyAlways
	containerNever := v1.ContainerRestartPolicyNever
	withStartupProbe := func(c *v1.Container) {
		c.StartupProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	}
	tests := []struct {
		name     string
		pod      *v1.Pod
		rs       *podstate.PodStatus
		terminal bool
		want     v1.PodPhase
	}{
		{"nothing created", testPod(always, "a"), rt(), false, v1.PodPending},
		{"no sandbox at all", testPod(always, "a"), nil, false, v1.PodPending},
		{"running", testPod(always, "a"), rt(running("a", t0)), false, v1.PodRunning},
		{"one running, one not created", testPod(always, "a", "b"), rt(running("a", t0)), false, v1.PodPending},
		{"created, not started", testPod(always, "a"), rt(&podstate.ContainerStatus{ID: "x", Type: "containerd", Name: "a", State: podstate.ContainerStateCreated}), false, v1.PodPending},

		{"Always, exited 0: restarting", testPod(always, "a"), rt(exited("a", t0, 0)), false, v1.PodRunning},
		{"Always, exited 1: restarting", testPod(always, "a"), rt(exited("a", t0, 1)), false, v1.PodRunning},
		{"OnFailure, exited 0", testPod(onFailure, "a"), rt(exited("a", t0, 0)), false, v1.PodSucceeded},
		{"OnFailure, exited 1: restarting", testPod(onFailure, "a"), rt(exited("a", t0, 1)), false, v1.PodRunning},
		{"Never, exited 0", testPod(never, "a"), rt(exited("a", t0, 0)), false, v1.PodSucceeded},
		{"Never, exited 1", testPod(never, "a"), rt(exited("a", t0, 1)), false, v1.PodFailed},
		{"Never, one of two failed", testPod(never, "a", "b"), rt(exited("a", t0, 0), exited("b", t0, 2)), false, v1.PodFailed},
		{"Never, one still running", testPod(never, "a", "b"), rt(exited("a", t0, 1), running("b", t0)), false, v1.PodRunning},
		{"default policy is Always", testPod("", "a"), rt(exited("a", t0, 0)), false, v1.PodRunning},

		{"terminal, Always, killed", testPod(always, "a"), rt(exited("a", t0, 137)), true, v1.PodFailed},
		{"terminal, Always, all exit 0", testPod(always, "a", "b"), rt(exited("a", t0, 0), exited("b", t0, 0)), true, v1.PodSucceeded},
		{"terminal, still running", testPod(always, "a"), rt(running("a", t0)), true, v1.PodRunning},

		{"container rule restarts exit 42", withRule(testPod(never, "a"), 42), rt(exited("a", t0, 42)), false, v1.PodRunning},
		{"container rule does not match", withRule(testPod(never, "a"), 42), rt(exited("a", t0, 1)), false, v1.PodFailed},
		{"container policy Never under pod Always", func() *v1.Pod {
			p := testPod(always, "a")
			p.Spec.Containers[0].RestartPolicy = &containerNever
			return p
		}(), rt(exited("a", t0, 3)), false, v1.PodFailed},

		{"init running", withInit(testPod(always, "a"), "i"), rt(running("i", t0)), false, v1.PodPending},
		{"init not created", withInit(testPod(always, "a"), "i"), rt(), false, v1.PodPending},
		{"init failed, Never", withInit(testPod(never, "a"), "i"), rt(exited("i", t0, 1)), false, v1.PodFailed},
		{"init failed, OnFailure: retried", withInit(testPod(onFailure, "a"), "i"), rt(exited("i", t0, 1)), false, v1.PodPending},
		{"init failed, Always: retried", withInit(testPod(always, "a"), "i"), rt(exited("i", t0, 1)), false, v1.PodPending},
		{"init done, main running", withInit(testPod(always, "a"), "i"), rt(exited("i", t0, 0), running("a", t1)), false, v1.PodRunning},
		{"second init pending", withInit(testPod(always, "a"), "i", "j"), rt(exited("i", t0, 0)), false, v1.PodPending},

		{"sidecar started, main running", withSidecar(testPod(always, "a"), "s"), rt(running("s", t0), running("a", t1)), false, v1.PodRunning},
		{"sidecar not started yet", withSidecar(testPod(always, "a"), "s", withStartupProbe), rt(running("s", t0)), false, v1.PodPending},
		{"sidecar restarting after the pod initialized", withSidecar(testPod(always, "a"), "s", withStartupProbe),
			rt(running("s", t1), running("a", t0)), false, v1.PodRunning},
		{"Never, main done, sidecar running", withSidecar(testPod(never, "a"), "s"), rt(running("s", t0), exited("a", t1, 0)), false, v1.PodRunning},
		{"Never, main done, sidecar stopped", withSidecar(testPod(never, "a"), "s"), rt(exited("s", t0, 143), exited("a", t1, 0)), false, v1.PodSucceeded},
		{"Never, main failed, sidecar stopped", withSidecar(testPod(never, "a"), "s"), rt(exited("s", t0, 0), exited("a", t1, 1)), false, v1.PodFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A prober that has no results yet.
			got := podstatus.Generate(tc.pod, tc.rs, nil, podstatus.GenerateOptions{Terminal: tc.terminal, Readiness: noResults, Startup: noResults})
			if got.Phase != tc.want {
				t.Errorf("phase = %s, want %s\nstatuses: %+v\ninit: %+v", got.Phase, tc.want, got.ContainerStatuses, got.InitContainerStatuses)
			}
		})
	}
}

// noResults is a prober that has not probed anything yet.
func noResults(string) (bool, bool) { return false, false }

// withRule gives container 0 restart policy Never and a rule restarting it
// on exit code.
func withRule(p *v1.Pod, code int32) *v1.Pod {
	never := v1.ContainerRestartPolicyNever
	p.Spec.Containers[0].RestartPolicy = &never
	p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{code}},
	}}
	return p
}

func TestTerminalPhaseIsSticky(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	rs := rt(running("a", t0))

	prev := podstatus.Generate(p, rt(exited("a", t0, 1)), nil, podstatus.GenerateOptions{Terminal: true})
	prev.Reason, prev.Message = "Evicted", "The node was low on resource: memory."
	if prev.Phase != v1.PodFailed {
		t.Fatalf("setup: phase %s", prev.Phase)
	}
	got := podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{Previous: &prev})
	if got.Phase != v1.PodFailed || got.Reason != "Evicted" || got.Message != prev.Message {
		t.Errorf("after Failed: %s %q %q", got.Phase, got.Reason, got.Message)
	}

	// The API server's terminal phase wins too.
	p.Status.Phase = v1.PodSucceeded
	got = podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{})
	if got.Phase != v1.PodSucceeded {
		t.Errorf("after API Succeeded: %s", got.Phase)
	}
	// A terminal pod is never Ready.
	if c := findCond(got, v1.PodReady); c == nil || c.Status != v1.ConditionFalse || c.Reason != "PodCompleted" {
		t.Errorf("Ready = %+v", c)
	}
}

func TestContainerStatuses(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "app", "log")
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}, {Name: "tmp", MountPath: "/tmp"}}
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")},
		Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")},
	}
	oom := exited("app", t0, 137)
	oom.Reason, oom.Message = "OOMKilled", "out of memory"
	rs := rt(withRestarts(running("app", t1), 1), oom, withRestarts(exited("log", t0, 0), 0), withRestarts(exited("log", t1, 1), 1))
	waiting := map[string]podstate.ContainerWaiting{
		"log": {Reason: podstate.ErrCrashLoopBackOff, Message: "back-off 10s restarting failed container=log pod=web_default(uid-1)"},
		// A running container does not wait, whatever the map says.
		"app": {Reason: podstate.ErrImagePull, Message: "ignored"},
	}
	s := podstatus.Generate(p, rs, waiting, podstatus.GenerateOptions{})
	if len(s.ContainerStatuses) != 2 || s.ContainerStatuses[0].Name != "app" || s.ContainerStatuses[1].Name != "log" {
		t.Fatalf("statuses = %+v", s.ContainerStatuses)
	}
	app := s.ContainerStatuses[0]
	wantApp := v1.ContainerStatus{
		Name:         "app",
		State:        v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(t1.Add(time.Second))}},
		Ready:        true,
		Started:      ptr(true),
		RestartCount: 1,
		Image:        "docker.io/library/app:1",
		ImageID:      "sha256:app",
		ContainerID:  "containerd://app-070909",
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			ExitCode: 137, Reason: "OOMKilled", Message: "out of memory",
			StartedAt: metav1.NewTime(t0.Add(time.Second)), FinishedAt: metav1.NewTime(t0.Add(30 * time.Second)),
			ContainerID: "containerd://app-070809",
		}},
		Resources:          p.Spec.Containers[0].Resources.DeepCopy(),
		AllocatedResources: p.Spec.Containers[0].Resources.Requests,
		VolumeMounts: []v1.VolumeMountStatus{
			{Name: "data", MountPath: "/data", ReadOnly: true, RecursiveReadOnly: ptr(v1.RecursiveReadOnlyDisabled)},
			{Name: "tmp", MountPath: "/tmp"},
		},
	}
	wantApp.ContainerID = "containerd://" + rs.Containers[0].ID
	wantApp.LastTerminationState.Terminated.ContainerID = "containerd://" + rs.Containers[1].ID
	if !apiequality.Semantic.DeepEqual(app, wantApp) {
		t.Errorf("app status:\n got %+v\nwant %+v", app, wantApp)
	}

	log := s.ContainerStatuses[1]
	if log.State.Waiting == nil || log.State.Waiting.Reason != "CrashLoopBackOff" || log.State.Waiting.Message != waiting["log"].Message {
		t.Errorf("log state = %+v", log.State)
	}
	// The newest instance's termination becomes the last state.
	if lt := log.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 || lt.ContainerID != "containerd://"+rs.Containers[3].ID {
		t.Errorf("log last state = %+v", log.LastTerminationState)
	}
	if log.RestartCount != 1 || log.Ready || log.Started == nil || *log.Started {
		t.Errorf("log restarts/ready/started = %d %v %v", log.RestartCount, log.Ready, log.Started)
	}
}

func ptr[T any](v T) *T { return &v }

func TestWaitingReasons(t *testing.T) {
	tests := []struct {
		name       string
		pod        *v1.Pod
		rs         *podstate.PodStatus
		waiting    map[string]podstate.ContainerWaiting
		container  string
		wantReason string
	}{
		{"not created, no init", testPod(v1.RestartPolicyAlways, "a"), rt(), nil, "a", "ContainerCreating"},
		{"not created, with init", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), rt(), nil, "a", "PodInitializing"},
		{"image pull failing", testPod(v1.RestartPolicyAlways, "a"), rt(),
			map[string]podstate.ContainerWaiting{"a": {Reason: podstate.ErrImagePull, Message: "pull access denied"}}, "a", "ErrImagePull"},
		{"image pull back-off", testPod(v1.RestartPolicyAlways, "a"), rt(),
			map[string]podstate.ContainerWaiting{"a": {Reason: podstate.ErrImagePullBackOff, Message: `Back-off pulling image "a:1"`}}, "a", "ImagePullBackOff"},
		{"config error", testPod(v1.RestartPolicyAlways, "a"), rt(),
			map[string]podstate.ContainerWaiting{"a": {Reason: podstate.ErrCreateContainerConfig, Message: `secret "s" not found`}}, "a", "CreateContainerConfigError"},
		{"created, not started", testPod(v1.RestartPolicyAlways, "a"),
			rt(&podstate.ContainerStatus{ID: "x", Type: "containerd", Name: "a", State: podstate.ContainerStateCreated}), nil, "a", ""},
		{"Never: a finished container waits for nothing", testPod(v1.RestartPolicyNever, "a"), rt(exited("a", t0, 1)),
			map[string]podstate.ContainerWaiting{"a": {Reason: podstate.ErrCrashLoopBackOff}}, "a", "-terminated"},
		{"init back-off", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), rt(exited("i", t0, 1)),
			map[string]podstate.ContainerWaiting{"i": {Reason: podstate.ErrCrashLoopBackOff}}, "i", "CrashLoopBackOff"},
		{"init done waits for nothing", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), rt(exited("i", t0, 0)),
			map[string]podstate.ContainerWaiting{"i": {Reason: podstate.ErrCrashLoopBackOff}}, "i", "-terminated"},
		{"deleted pod waits for nothing", func() *v1.Pod {
			p := testPod(v1.RestartPolicyAlways, "a")
			p.DeletionTimestamp = &metav1.Time{Time: t1}
			return p
		}(), rt(exited("a", t0, 1)), map[string]podstate.ContainerWaiting{"a": {Reason: podstate.ErrCrashLoopBackOff}}, "a", "-terminated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := podstatus.Generate(tc.pod, tc.rs, tc.waiting, podstatus.GenerateOptions{})
			cs := findCS(append(s.ContainerStatuses, s.InitContainerStatuses...), tc.container)
			if cs == nil {
				t.Fatalf("no status for %s", tc.container)
			}
			got := "-terminated"
			if w := cs.State.Waiting; w != nil {
				got = w.Reason
				if want := tc.waiting[tc.container]; want.Reason != nil && w.Message != want.Message {
					t.Errorf("message = %q, want %q", w.Message, want.Message)
				}
			} else if cs.State.Terminated == nil {
				t.Fatalf("state = %+v", cs.State)
			}
			if got != tc.wantReason {
				t.Errorf("waiting reason = %q, want %q", got, tc.wantReason)
			}
		})
	}
}

func TestContainerGoneFromTheRuntime(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	prev := podstatus.Generate(p, rt(withRestarts(running("a", t0), 2)), nil, podstatus.GenerateOptions{})
	// The runtime lost the container (the runtime's state was wiped).
	s := podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{Previous: &prev})
	cs := s.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("state = %+v", cs.State)
	}
	if lt := cs.LastTerminationState.Terminated; lt == nil || lt.Reason != "ContainerStatusUnknown" || lt.ExitCode != 137 {
		t.Errorf("last state = %+v", cs.LastTerminationState)
	}
	if cs.RestartCount != 3 {
		t.Errorf("restart count = %d, want 3", cs.RestartCount)
	}
	if s.Phase != v1.PodRunning {
		t.Errorf("phase = %s: a container that ran is restarting, not pending", s.Phase)
	}

	// A container in unknown state that was running terminated unknown.
	unknown := running("a", t0)
	unknown.State = podstate.ContainerStateUnknown
	s = podstatus.Generate(p, rt(unknown), nil, podstatus.GenerateOptions{Previous: &prev})
	if term := s.ContainerStatuses[0].State.Terminated; term == nil || term.Reason != "ContainerStatusUnknown" || s.ContainerStatuses[0].RestartCount != 3 {
		t.Errorf("unknown container = %+v", s.ContainerStatuses[0])
	}
}

func TestInitContainerRemovedAfterInitialization(t *testing.T) {
	p := withInit(testPod(v1.RestartPolicyAlways, "a"), "i")
	s := podstatus.Generate(p, rt(running("a", t1)), nil, podstatus.GenerateOptions{})
	init := s.InitContainerStatuses[0]
	if term := init.State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != "Completed" || !init.Ready {
		t.Errorf("init = %+v", init)
	}
	if c := findCond(s, v1.PodInitialized); c.Status != v1.ConditionTrue {
		t.Errorf("Initialized = %+v", c)
	}
}

func TestProbes(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a", "b")
	probe := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	p.Spec.Containers[0].ReadinessProbe = probe
	p.Spec.Containers[1].StartupProbe = probe
	rs := rt(running("a", t0), running("b", t0))
	idA, idB := rs.Containers[0].ID, rs.Containers[1].ID

	// A node without probes: running containers are started and ready.
	s := podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{})
	if c := findCond(s, v1.PodReady); c.Status != v1.ConditionTrue {
		t.Errorf("Ready without a prober = %+v", c)
	}

	// No results yet: a is not ready, b is not started (so not ready).
	unknown := podstatus.GenerateOptions{Readiness: noResults, Startup: noResults}
	s = podstatus.Generate(p, rs, nil, unknown)
	a, b := findCS(s.ContainerStatuses, "a"), findCS(s.ContainerStatuses, "b")
	if a.Ready || !*a.Started || b.Ready || *b.Started {
		t.Errorf("no results: a ready=%v started=%v, b ready=%v started=%v", a.Ready, *a.Started, b.Ready, *b.Started)
	}
	cr, ready := findCond(s, v1.ContainersReady), findCond(s, v1.PodReady)
	if cr.Status != v1.ConditionFalse || cr.Reason != "ContainersNotReady" || cr.Message != "containers with unready status: [a b]" {
		t.Errorf("ContainersReady = %+v", cr)
	}
	if ready.Status != v1.ConditionFalse || ready.Reason != cr.Reason || ready.Message != cr.Message {
		t.Errorf("Ready = %+v", ready)
	}

	readiness, startup := map[string]bool{idA: true}, map[string]bool{idB: true}
	lookup := func(results map[string]bool) podstatus.ProbeResultFunc {
		return func(id string) (bool, bool) { ok, known := results[id]; return ok, known }
	}
	opts := podstatus.GenerateOptions{Readiness: lookup(readiness), Startup: lookup(startup)}
	s = podstatus.Generate(p, rs, nil, opts)
	if c := findCond(s, v1.PodReady); c.Status != v1.ConditionTrue || c.Reason != "" || c.ObservedGeneration != 3 {
		t.Errorf("Ready with successful probes = %+v", c)
	}

	// A failing readiness probe.
	readiness[idA] = false
	s = podstatus.Generate(p, rs, nil, opts)
	if c := findCond(s, v1.ContainersReady); c.Message != "containers with unready status: [a]" {
		t.Errorf("ContainersReady = %+v", c)
	}

	// After an agent restart the prober knows nothing yet: what was ready
	// in a Ready pod stays ready, what started stays started.
	readiness[idA] = true
	prev := podstatus.Generate(p, rs, nil, opts)
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
	unknown.Previous = &prev
	s = podstatus.Generate(p, rs, nil, unknown)
	if c := findCond(s, v1.PodReady); c.Status != v1.ConditionTrue {
		t.Errorf("Ready after a restart = %+v", c)
	}
	// ... but not a new instance of the container.
	rs2 := rt(running("a", t1), running("b", t0))
	s = podstatus.Generate(p, rs2, nil, unknown)
	if a := findCS(s.ContainerStatuses, "a"); a.Ready {
		t.Error("a new container instance inherited readiness")
	}
}

func TestConditions(t *testing.T) {
	p := withInit(testPod(v1.RestartPolicyAlways, "a"), "i1", "i2")
	p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	p.Status.Conditions = []v1.PodCondition{
		{Type: "example.com/lb", Status: v1.ConditionFalse, Reason: "NotRegistered"},
		// Kubelet-owned conditions in the API status are replaced.
		{Type: v1.PodReady, Status: v1.ConditionTrue},
		{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: "Unschedulable"},
	}

	s := podstatus.Generate(p, rt(exited("i1", t0, 0), running("i2", t1)), nil, podstatus.GenerateOptions{})
	want := []v1.PodCondition{
		{Type: "example.com/lb", Status: v1.ConditionFalse, Reason: "NotRegistered"},
		{Type: v1.PodReadyToStartContainers, Status: v1.ConditionTrue},
		{Type: v1.PodInitialized, Status: v1.ConditionFalse, Reason: "ContainersNotInitialized", Message: "containers with incomplete status: [i2]"},
		{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [a]"},
		{Type: v1.ContainersReady, Status: v1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [a]"},
		{Type: v1.PodScheduled, Status: v1.ConditionTrue},
	}
	for i := 1; i < len(want); i++ {
		want[i].ObservedGeneration = 3
	}
	if !reflect.DeepEqual(s.Conditions, want) {
		t.Errorf("conditions:\n got %+v\nwant %+v", s.Conditions, want)
	}

	// Containers ready, a readiness gate not.
	s = podstatus.Generate(p, rt(exited("i1", t0, 0), exited("i2", t0, 0), running("a", t1)), nil, podstatus.GenerateOptions{})
	if c := findCond(s, v1.PodInitialized); c.Status != v1.ConditionTrue {
		t.Errorf("Initialized = %+v", c)
	}
	if c := findCond(s, v1.ContainersReady); c.Status != v1.ConditionTrue {
		t.Errorf("ContainersReady = %+v", c)
	}
	if c := findCond(s, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" ||
		c.Message != `the status of pod readiness gate "example.com/lb" is not "True", but False` {
		t.Errorf("Ready = %+v", c)
	}
	p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, v1.PodReadinessGate{ConditionType: "example.com/other"})
	p.Status.Conditions[0].Status = v1.ConditionTrue
	s = podstatus.Generate(p, rt(exited("i1", t0, 0), exited("i2", t0, 0), running("a", t1)), nil, podstatus.GenerateOptions{})
	if c := findCond(s, v1.PodReady); c.Message != `corresponding condition of pod readiness gate "example.com/other" does not exist.` {
		t.Errorf("Ready = %+v", c)
	}
}

func TestTerminalConditions(t *testing.T) {
	p := testPod(v1.RestartPolicyNever, "a")
	s := podstatus.Generate(p, rt(exited("a", t0, 0)), nil, podstatus.GenerateOptions{})
	for _, ty := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
		if c := findCond(s, ty); c.Status != v1.ConditionFalse || c.Reason != "PodCompleted" {
			t.Errorf("%s = %+v", ty, c)
		}
	}
	if c := findCond(s, v1.PodInitialized); c.Status != v1.ConditionTrue || c.Reason != "PodCompleted" {
		t.Errorf("Initialized = %+v", c)
	}
	s = podstatus.Generate(p, rt(exited("a", t0, 1)), nil, podstatus.GenerateOptions{})
	if c := findCond(s, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "PodFailed" {
		t.Errorf("Ready = %+v", c)
	}
}

func TestDisruptionTargetCarriesOver(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	prev := v1.PodStatus{Conditions: []v1.PodCondition{{
		Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet", Message: "The node was low on resource: memory.",
	}}}
	s := podstatus.Generate(p, rt(running("a", t0)), nil, podstatus.GenerateOptions{Previous: &prev})
	if c := findCond(s, v1.DisruptionTarget); c == nil || c.Reason != "TerminationByKubelet" {
		t.Errorf("DisruptionTarget = %+v", c)
	}
}

func TestReadyToStartContainers(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	notReady := rt()
	notReady.Sandboxes[0].Ready = false
	noIP := rt()
	noIP.Sandboxes[0].IP = ""
	two := rt()
	two.Sandboxes = append(two.Sandboxes, two.Sandboxes[0])
	hostNet := testPod(v1.RestartPolicyAlways, "a")
	hostNet.Spec.HostNetwork = true
	for name, tc := range map[string]struct {
		pod  *v1.Pod
		rs   *podstate.PodStatus
		want string
	}{
		"no sandbox":        {p, &podstate.PodStatus{}, "no pod sandbox exists"},
		"not ready":         {p, notReady, "pod sandbox is not ready"},
		"no IP":             {p, noIP, "pod sandbox has no IP address"},
		"two ready":         {p, two, "multiple pod sandboxes are ready and need to be reconciled"},
		"namespace changed": {hostNet, rt(), "network namespace mode changed and sandbox needs to be recreated"},
		"ready":             {p, rt(), ""},
	} {
		s := podstatus.Generate(tc.pod, tc.rs, nil, podstatus.GenerateOptions{})
		c := findCond(s, v1.PodReadyToStartContainers)
		wantStatus, wantReason := v1.ConditionFalse, "PodSandboxNotReady"
		if tc.want == "" {
			wantStatus, wantReason = v1.ConditionTrue, ""
		}
		if c.Status != wantStatus || c.Reason != wantReason || c.Message != tc.want {
			t.Errorf("%s: %+v", name, c)
		}
	}
}

func TestIPs(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	rs := rt()
	rs.IPs = []string{"not-an-ip", "fd00::0005", "10.0.0.5", "10.0.0.6"}
	v4, v6 := net.ParseIP("192.168.1.10"), net.ParseIP("fd00::10")

	s := podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{HostIPs: []net.IP{v4, v6}})
	if s.PodIP != "10.0.0.5" || fmt.Sprint(s.PodIPs) != "[{10.0.0.5} {fd00::5}]" {
		t.Errorf("pod IPs = %s %v", s.PodIP, s.PodIPs)
	}
	if s.HostIP != "192.168.1.10" || fmt.Sprint(s.HostIPs) != "[{192.168.1.10} {fd00::10}]" {
		t.Errorf("host IPs = %s %v", s.HostIP, s.HostIPs)
	}
	// An IPv6-primary node puts IPv6 first.
	s = podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{HostIPs: []net.IP{v6, v4}})
	if fmt.Sprint(s.PodIPs) != "[{fd00::5} {10.0.0.5}]" {
		t.Errorf("IPv6-primary pod IPs = %v", s.PodIPs)
	}
	// Host-network pods get the node's IPs.
	hn := testPod(v1.RestartPolicyAlways, "a")
	hn.Spec.HostNetwork = true
	hrs := rt()
	hrs.IPs = nil
	s = podstatus.Generate(hn, hrs, nil, podstatus.GenerateOptions{HostIPs: []net.IP{v4, v6}})
	if fmt.Sprint(s.PodIPs) != "[{192.168.1.10} {fd00::10}]" || s.PodIP != "192.168.1.10" {
		t.Errorf("host-network pod IPs = %s %v", s.PodIP, s.PodIPs)
	}
	// Without host IPs, the previous ones stay.
	s2 := podstatus.Generate(hn, hrs, nil, podstatus.GenerateOptions{Previous: &s})
	if s2.HostIP != s.HostIP || s2.PodIP != s.PodIP || len(s2.HostIPs) != 2 {
		t.Errorf("kept IPs = %s %s %v", s2.HostIP, s2.PodIP, s2.HostIPs)
	}
}

func TestQOSResourcesAndGeneration(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a", "b")
	p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}
	p.Spec.Containers[1].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("1Gi")}
	p.Spec.Containers[1].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi")}
	p.Status.QOSClass = v1.PodQOSBurstable
	s := podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{})
	if s.QOSClass != v1.PodQOSBurstable {
		t.Errorf("QOS kept = %s", s.QOSClass)
	}
	s = podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{QOSClass: func(*v1.Pod) v1.PodQOSClass { return v1.PodQOSGuaranteed }})
	if s.QOSClass != v1.PodQOSGuaranteed {
		t.Errorf("QOS from func = %s", s.QOSClass)
	}
	cpu, mem := s.AllocatedResources[v1.ResourceCPU], s.AllocatedResources[v1.ResourceMemory]
	if cpu.String() != "150m" || mem.String() != "1Gi" {
		t.Errorf("allocated = %v", s.AllocatedResources)
	}
	if l := s.Resources.Limits[v1.ResourceMemory]; l.String() != "2Gi" {
		t.Errorf("pod resources = %+v", s.Resources)
	}
	if s.ObservedGeneration != 3 {
		t.Errorf("observedGeneration = %d", s.ObservedGeneration)
	}
}

func TestGenerateIsPure(t *testing.T) {
	p := withSidecar(withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), "s")
	p.Status.Conditions = []v1.PodCondition{{Type: "x", Status: v1.ConditionTrue}}
	rs := rt(exited("i", t0, 0), running("s", t1), running("a", t2))
	prev := podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{})
	waiting := map[string]podstate.ContainerWaiting{"a": {Reason: errors.New("X")}}
	pod0, rs0, prev0 := p.DeepCopy(), *rs, *prev.DeepCopy()
	c0 := *rs.Containers[0]

	s := podstatus.Generate(p, rs, waiting, podstatus.GenerateOptions{Previous: &prev})
	if !reflect.DeepEqual(p, pod0) || !reflect.DeepEqual(prev, prev0) || !reflect.DeepEqual(*rs.Containers[0], c0) || len(rs.Containers) != len(rs0.Containers) {
		t.Error("Generate modified its arguments")
	}
	// The result shares nothing with the previous status or the pod.
	s.Conditions[0].Status = v1.ConditionFalse
	s.InitContainerStatuses[0].State.Terminated.ExitCode = 9
	if p.Status.Conditions[0].Status != v1.ConditionTrue || prev.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Error("the result aliases an argument")
	}
	if s.Phase != v1.PodRunning {
		t.Errorf("phase = %s", s.Phase)
	}
}

func TestGenerateNil(t *testing.T) {
	if s := podstatus.Generate(nil, rt(), nil, podstatus.GenerateOptions{}); !reflect.DeepEqual(s, v1.PodStatus{}) {
		t.Errorf("nil pod: %+v", s)
	}
	s := podstatus.Generate(testPod(v1.RestartPolicyAlways, "a"), nil, nil, podstatus.GenerateOptions{})
	if s.Phase != v1.PodPending || findCond(s, v1.PodReadyToStartContainers).Status != v1.ConditionFalse {
		t.Errorf("nil runtime status: %+v", s)
	}
}

func TestNeedsReadinessSync(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	rs := rt(running("a", t0))
	p.Status = podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{})
	if podstatus.NeedsReadinessSync(p) {
		t.Error("a pod without readiness gates needs a sync")
	}
	p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	p.Status = podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{})
	if podstatus.NeedsReadinessSync(p) {
		t.Error("a consistent Ready condition needs a sync")
	}
	// The load balancer controller sets its gate: Ready must follow.
	p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: "example.com/lb", Status: v1.ConditionTrue})
	if !podstatus.NeedsReadinessSync(p) {
		t.Error("a gate turned True, but no sync")
	}
	p.Status = podstatus.Generate(p, rs, nil, podstatus.GenerateOptions{})
	if findCond(p.Status, v1.PodReady).Status != v1.ConditionTrue || podstatus.NeedsReadinessSync(p) {
		t.Errorf("after the sync: Ready = %+v", findCond(p.Status, v1.PodReady))
	}
	if podstatus.NeedsReadinessSync(nil) {
		t.Error("nil pod")
	}
}

// TestResizeInProgress: pod is the allocated pod; while the running
// container's actuated resources differ from the allocation the status says
// PodResizeInProgress, allocatedResources are the allocation and resources
// are what the runtime reports the container runs with, never the spec.
func TestResizeInProgress(t *testing.T) {
	actuated := v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	p := testPod(v1.RestartPolicyAlways, "a")
	p.Spec.Containers[0].Resources = *actuated.DeepCopy()
	c := running("a", t0)
	c.Resources = actuated.DeepCopy()
	c.Reported = &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	s := podstatus.Generate(p, rt(c), nil, podstatus.GenerateOptions{})
	if cond := findCond(s, v1.PodResizeInProgress); cond != nil {
		t.Errorf("nothing to resize, yet %+v", cond)
	}
	if cond := findCond(s, v1.PodResizePending); cond != nil {
		t.Errorf("nothing pending, yet %+v", cond)
	}

	// The allocation grows; the runtime still runs the old values.
	p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("500m")
	p.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("1")
	s = podstatus.Generate(p, rt(c), nil, podstatus.GenerateOptions{})
	cs := s.ContainerStatuses[0]
	if got := cs.Resources.Requests[v1.ResourceCPU]; got.Cmp(resource.MustParse("100m")) != 0 {
		t.Errorf("status resources request cpu %s, want the 100m the container runs with", got.String())
	}
	if got := cs.Resources.Limits[v1.ResourceMemory]; got.Cmp(resource.MustParse("128Mi")) != 0 {
		t.Errorf("status resources memory limit %s, want 128Mi", got.String())
	}
	if got := cs.AllocatedResources[v1.ResourceCPU]; got.Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("allocated cpu %s, want the allocation's 500m", got.String())
	}
	if got := s.AllocatedResources[v1.ResourceCPU]; got.Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("pod allocated cpu %s, want 500m", got.String())
	}
	cond := findCond(s, v1.PodResizeInProgress)
	if cond == nil || cond.Status != v1.ConditionTrue || cond.ObservedGeneration != p.Generation || cond.Reason != "" {
		t.Errorf("PodResizeInProgress = %+v, want True at generation %d", cond, p.Generation)
	}
	// The runtime refused it: reason Error with its message.
	s = podstatus.Generate(p, rt(c), nil, podstatus.GenerateOptions{ResizeError: "cannot set memory limit"})
	if cond := findCond(s, v1.PodResizeInProgress); cond == nil || cond.Reason != v1.PodReasonError || cond.Message != "cannot set memory limit" {
		t.Errorf("failed resize: PodResizeInProgress = %+v, want reason Error", cond)
	}

	// Actuated: the condition goes, the status shows the new values.
	c.Resources = p.Spec.Containers[0].Resources.DeepCopy()
	c.Reported.Requests[v1.ResourceCPU] = resource.MustParse("500m")
	c.Reported.Limits[v1.ResourceCPU] = resource.MustParse("1")
	s = podstatus.Generate(p, rt(c), nil, podstatus.GenerateOptions{})
	if cond := findCond(s, v1.PodResizeInProgress); cond != nil {
		t.Errorf("resize actuated, yet %+v", cond)
	}
	if got := s.ContainerStatuses[0].Resources.Limits[v1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("status cpu limit %s, want 1", got.String())
	}
}

// TestResizePending: a resize the agent did not allocate is reported with
// the reason and message it gives, at the pod's generation, and not on a
// finished pod.
func TestResizePending(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	msg := "Node didn't have enough resource: cpu, requested: 4000, used: 100, capacity: 2000"
	opts := podstatus.GenerateOptions{ResizePending: &podstatus.ResizePending{Reason: v1.PodReasonDeferred, Message: msg}}
	s := podstatus.Generate(p, rt(running("a", t0)), nil, opts)
	cond := findCond(s, v1.PodResizePending)
	if cond == nil || cond.Status != v1.ConditionTrue || cond.Reason != v1.PodReasonDeferred || cond.Message != msg || cond.ObservedGeneration != 3 {
		t.Errorf("PodResizePending = %+v", cond)
	}
	n := podstatus.Normalize(p, &v1.PodStatus{Phase: v1.PodRunning}, opts)
	if cond := findCond(n, v1.PodResizePending); cond == nil || cond.Reason != v1.PodReasonDeferred {
		t.Errorf("Normalize: PodResizePending = %+v", cond)
	}
	n = podstatus.Normalize(p, &v1.PodStatus{Phase: v1.PodSucceeded}, opts)
	if cond := findCond(n, v1.PodResizePending); cond != nil {
		t.Errorf("finished pod: %+v", cond)
	}
}

// TestStatusResourcesBelowRuntimeMinimum: a CPU request and limit below
// what cpu.shares and the CFS quota express (1m → 2 shares, 5m → a 10m
// quota) are reported as allocated, as the kubelet does, so a resize to
// such values completes.
func TestStatusResourcesBelowRuntimeMinimum(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("5m")},
	}
	c := running("a", t0)
	c.Resources = p.Spec.Containers[0].Resources.DeepCopy()
	c.Reported = &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("10m")},
	}
	s := podstatus.Generate(p, rt(c), nil, podstatus.GenerateOptions{})
	r := s.ContainerStatuses[0].Resources
	if got := r.Requests[v1.ResourceCPU]; got.Cmp(resource.MustParse("1m")) != 0 {
		t.Errorf("cpu request %s, want 1m", got.String())
	}
	if got := r.Limits[v1.ResourceCPU]; got.Cmp(resource.MustParse("5m")) != 0 {
		t.Errorf("cpu limit %s, want 5m", got.String())
	}
	if _, ok := r.Limits[v1.ResourceMemory]; ok {
		t.Errorf("memory limit reported that neither the spec nor the runtime has: %v", r.Limits)
	}
}

// TestRestartAllContainers follows a pod through the kubelet's in-place
// restart of all its containers: a RestartAllContainers exit sets the
// AllContainersRestarting condition; once the runtime removed the
// containers the condition is False and each waits, RestartingAllContainers,
// with one more restart; the new instances keep those counts and last
// terminations; the pod stays Running and Initialized throughout.
func TestRestartAllContainers(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	p := withSidecar(withInit(testPod(v1.RestartPolicyNever, "src", "r"), "i"), "s")
	p.Spec.Containers[0].RestartPolicy = &never
	p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	names := []string{"i", "s", "src", "r"}
	status := func(s v1.PodStatus, name string) v1.ContainerStatus {
		t.Helper()
		cs := findCS(append(s.InitContainerStatuses, s.ContainerStatuses...), name)
		if cs == nil {
			t.Fatalf("no status of %s", name)
		}
		return *cs
	}
	wantCondition := func(s v1.PodStatus, want v1.ConditionStatus, reason string) {
		t.Helper()
		c := findCond(s, v1.AllContainersRestarting)
		if c == nil || c.Status != want || c.Reason != reason || c.ObservedGeneration != 0 {
			t.Fatalf("AllContainersRestarting = %+v, want %s with reason %q and no observed generation", c, want, reason)
		}
	}

	if s := podstatus.Generate(testPod(v1.RestartPolicyNever, "a"), rt(running("a", t0)), nil, podstatus.GenerateOptions{}); findCond(s, v1.AllContainersRestarting) != nil {
		t.Error("a pod without a RestartAllContainers rule has the AllContainersRestarting condition")
	}

	s := podstatus.Generate(p, rt(exited("i", t0, 0), running("s", t0), running("src", t1), running("r", t1)), nil, podstatus.GenerateOptions{})
	wantCondition(s, v1.ConditionFalse, "")
	s = podstatus.Generate(p, rt(exited("i", t0, 0), running("s", t0), exited("src", t1, 42), running("r", t1)), nil, podstatus.GenerateOptions{Previous: &s})
	wantCondition(s, v1.ConditionTrue, podstatus.RestartAllContainersStarted)
	if s.Phase != v1.PodRunning || !podstatus.AllContainersRestarting(&s) {
		t.Fatalf("phase %s, AllContainersRestarting %t after the exit; want Running, true", s.Phase, podstatus.AllContainersRestarting(&s))
	}
	triggered := s

	// A container the runtime lost while all restart ended for that.
	unknown := running("r", t1)
	unknown.State = podstate.ContainerStateUnknown
	lost := podstatus.Generate(p, rt(exited("i", t0, 0), running("s", t0), exited("src", t1, 42), unknown), nil, podstatus.GenerateOptions{Previous: &triggered})
	if term := status(lost, "r").State.Terminated; term == nil || term.Reason != podstatus.RestartingAllContainers || term.ExitCode != 137 {
		t.Errorf("r in unknown state while all restart: %+v", status(lost, "r").State)
	}

	// All removed, the sandbox kept.
	s = podstatus.Generate(p, rt(), nil, podstatus.GenerateOptions{Previous: &triggered})
	wantCondition(s, v1.ConditionFalse, "")
	for _, n := range names {
		cs := status(s, n)
		w, last := cs.State.Waiting, cs.LastTerminationState.Terminated
		if w == nil || w.Reason != podstatus.RestartingAllContainers || w.Message != "The container is removed because RestartAllContainers in place" ||
			last == nil || last.Reason != podstatus.RestartingAllContainers || last.ExitCode != 137 || cs.RestartCount != 1 {
			t.Errorf("%s once removed: %+v", n, cs)
		}
	}
	if s.Phase != v1.PodRunning {
		t.Errorf("phase %s once removed, want Running: the containers restart", s.Phase)
	}
	if c := findCond(s, v1.PodInitialized); c.Status != v1.ConditionTrue {
		t.Errorf("Initialized %+v once removed, want True as before", c)
	}
	removed := s

	// The init container ran again; the others wait for it.
	s = podstatus.Generate(p, rt(withRestarts(exited("i", t2, 0), 1)), nil, podstatus.GenerateOptions{Previous: &removed})
	wantCondition(s, v1.ConditionFalse, "")
	if cs := status(s, "i"); cs.State.Terminated == nil || cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil ||
		cs.LastTerminationState.Terminated.Reason != podstatus.RestartingAllContainers {
		t.Errorf("i ran again: %+v", cs)
	}
	for _, n := range []string{"s", "src", "r"} {
		if cs := status(s, n); cs.State.Waiting == nil || cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
			t.Errorf("%s waiting to start again: %+v", n, cs)
		}
	}
	// Everything runs again; a runtime count that restarted from 0 (no
	// log kept) does not lower the count.
	s = podstatus.Generate(p, rt(withRestarts(exited("i", t2, 0), 1), withRestarts(running("s", t2), 1), withRestarts(running("src", t2), 1), running("r", t2)),
		nil, podstatus.GenerateOptions{Previous: &s})
	wantCondition(s, v1.ConditionFalse, "")
	for _, n := range names {
		if cs := status(s, n); cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
			t.Errorf("%s running again: restart count %d, last termination %+v; want 1 and one", n, cs.RestartCount, cs.LastTerminationState)
		}
	}

	// Started again before a status showed it removed: the terminated
	// state becomes the last termination, one restart more.
	s = podstatus.Generate(p, rt(exited("i", t0, 0), running("s", t0), running("src", t2), running("r", t2)), nil, podstatus.GenerateOptions{Previous: &triggered})
	if cs := status(s, "src"); cs.State.Running == nil || cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 42 {
		t.Errorf("src running again straight from terminated: %+v", cs)
	}

	// Terminal pods say why nothing restarts.
	failed := triggered
	failed.Phase = v1.PodFailed
	done := p.DeepCopy()
	done.Status.Phase = v1.PodFailed
	s = podstatus.Generate(done, rt(), nil, podstatus.GenerateOptions{Previous: &failed})
	wantCondition(s, v1.ConditionFalse, "PodFailed")
}

// TestAllocatedResourcesStatus: the hook fills the container statuses'
// allocatedResourcesStatus after the probes' verdicts, as the kubelet's
// UpdateAllocatedResourcesStatus.
func TestAllocatedResourcesStatus(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "app")
	health := []v1.ResourceStatus{{Name: "example.com/gpu", Resources: []v1.ResourceHealth{{ResourceID: "gpu-1", Health: v1.ResourceHealthStatusUnhealthy}}}}
	var sawReady bool
	s := podstatus.Generate(p, rt(running("app", t1)), nil, podstatus.GenerateOptions{
		AllocatedResourcesStatus: func(pod *v1.Pod, s *v1.PodStatus) {
			sawReady = len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].Ready
			s.ContainerStatuses[0].AllocatedResourcesStatus = health
		},
	})
	if !sawReady {
		t.Error("the hook ran before the container statuses and their readiness were set")
	}
	if got := s.ContainerStatuses[0].AllocatedResourcesStatus; !apiequality.Semantic.DeepEqual(got, health) {
		t.Errorf("allocatedResourcesStatus = %v, want %v", got, health)
	}
	if s := podstatus.Generate(p, rt(running("app", t1)), nil, podstatus.GenerateOptions{}); s.ContainerStatuses[0].AllocatedResourcesStatus != nil {
		t.Errorf("allocatedResourcesStatus without the hook = %v", s.ContainerStatuses[0].AllocatedResourcesStatus)
	}
}
