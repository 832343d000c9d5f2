package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestHostileInput gives one containerd node pods at the edges of what the
// API accepts, and pods that cannot run: 2,000 environment variables, 100
// containers, the largest annotation the apiserver takes (a 1 MiB one is
// refused by the apiserver before any node sees it), a command that does
// not exist, a hostPath of the wrong type, two pods on one hostPort, and
// names at the length limits.
// The runnable ones must run; the others must get the kubelet's status and
// event; a pod that ran before and one created after must be unaffected,
// and the agent must not restart. It prints what each pod got.
func TestHostileInput(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	n := newRelNode(t, "hostile", relOptions{})
	client := env.cp.Client().CoreV1().Pods(n.ns)
	bystander := withGrace(n.pod("bystander", sleeper...), 2)
	n.createPod(t, bystander)
	before := waitPods(t, n.ns, []string{bystander.Name}, "Running and Ready", podTimeout, isPodReady)
	pid := n.agent.Pid()

	// 2,000 environment variables.
	env2k := withGrace(n.pod("env", "sh", "-c", `test "$E1999" = v1999 && sleep 36000`), 2)
	for i := range 2000 {
		env2k.Spec.Containers[0].Env = append(env2k.Spec.Containers[0].Env, v1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: fmt.Sprintf("v%d", i)})
	}
	// 100 containers.
	many := withGrace(n.pod("many", sleeper...), 2)
	for i := 1; i < 100; i++ {
		c := many.Spec.Containers[0]
		c.Name = fmt.Sprintf("c%d", i)
		many.Spec.Containers = append(many.Spec.Containers, c)
	}
	// The largest annotation: the apiserver refuses more than 256 KiB of
	// annotations in all.
	huge := withGrace(n.pod("annotated", sleeper...), 2)
	huge.Annotations = map[string]string{"example.com/big": strings.Repeat("x", 1<<20)}
	if _, err := client.Create(ctx, huge, metav1.CreateOptions{}); err == nil {
		t.Errorf("the apiserver accepted a pod with a 1 MiB annotation")
	}
	huge.Annotations["example.com/big"] = strings.Repeat("x", 256<<10-len("example.com/big"))
	// A command that does not exist.
	missing := neverRestart(n.pod("nocmd", "/no/such/binary"))
	// A hostPath of the wrong type: a file where a directory is required.
	wrongPath := n.pod("hostpath", sleeper...)
	wrongPath.Spec.Volumes = []v1.Volume{{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{
		Path: n.agent.ConfigPath, Type: ptr.To(v1.HostPathDirectory),
	}}}}
	wrongPath.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "h", MountPath: "/h"}}
	// Two pods on one hostPort, bound to the node directly (the scheduler
	// would keep the second away): the second is rejected at admission.
	port := func(name string) *v1.Pod {
		p := withGrace(n.boundPod(name, sleeper...), 2)
		p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 8080, HostPort: 18080, Protocol: v1.ProtocolTCP}}
		return p
	}
	port1, port2 := port("port-1"), port("port-2")
	// Names at the limits: a container name of 63 characters in a pod
	// whose log directory name (<namespace>_<name>_<uid>) is exactly 255
	// bytes runs; a pod name of 253 characters (the API's limit) makes a
	// log directory name the filesystem refuses, so, as with the kubelet,
	// its sandbox is never created.
	longest := withGrace(n.pod(strings.Repeat("l", 255-len(n.ns)-2-36), sleeper...), 2)
	longest.Spec.Containers[0].Name = strings.Repeat("c", 63)
	tooLong := withGrace(n.pod(strings.Repeat("t", 253), sleeper...), 2)

	start := time.Now()
	for _, p := range []*v1.Pod{env2k, many, huge, missing, wrongPath, port1, longest, tooLong} {
		n.createPod(t, p)
	}
	// The first pod on the port is admitted before the second exists.
	waitPods(t, n.ns, []string{port1.Name}, "Running", podTimeout, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	n.createPod(t, port2)

	runnable := []string{env2k.Name, many.Name, huge.Name, port1.Name, longest.Name}
	running := waitPods(t, n.ns, runnable, "Running and Ready", podTimeout, isPodReady)
	runningIn := time.Since(start)
	if got := len(running[many.Name].Status.ContainerStatuses); got != 100 {
		t.Errorf("pod many reports %d container statuses, want 100", got)
	}

	var report []string
	// The missing command: the kubelet's StartError, exit code 128, and
	// a Failed event saying why.
	failed := waitForPod(t, n.ns, missing.Name, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	cs, _ := mainStatus(failed)
	if term := cs.State.Terminated; term == nil || term.Reason != "StartError" || term.ExitCode != 128 {
		t.Errorf("pod nocmd: container state %s, want terminated(StartError, exit 128)", stateString(cs.State))
	}
	ev := waitForPodEvent(t, n.ns, missing.Name, "Failed")
	if !strings.Contains(ev.Message, "/no/such/binary") {
		t.Errorf("pod nocmd: Failed event %q does not name the command", ev.Message)
	}
	report = append(report, fmt.Sprintf("nocmd: %s, event %s %q", stateString(cs.State), ev.Reason, trim(ev.Message)))

	// The wrong hostPath type: never runs; a Warning event with the
	// kubelet's type check message.
	var mountEv v1.Event
	wrong := waitForPod(t, n.ns, wrongPath.Name, "a hostPath type event", func(p *v1.Pod) bool {
		for _, e := range podEvents(t, n.ns, p.Name) {
			if e.Type == v1.EventTypeWarning && strings.Contains(e.Message, "hostPath type check failed") {
				mountEv = e
				return true
			}
		}
		return false
	})
	if wrong.Status.Phase == v1.PodRunning {
		t.Errorf("pod hostpath runs with a file mounted where a directory is required")
	}
	// The kubelet mounts volumes before it creates the sandbox: the
	// failure is a FailedMount event and the container waits in
	// ContainerCreating.
	if mountEv.Reason != "FailedMount" {
		t.Errorf("pod hostpath: event reason %s, want the kubelet's FailedMount", mountEv.Reason)
	}
	cs, _ = mainStatus(wrong)
	if w := cs.State.Waiting; w == nil || w.Reason != "ContainerCreating" {
		t.Errorf("pod hostpath: container state %s, want the kubelet's waiting(ContainerCreating)", stateString(cs.State))
	}
	report = append(report, fmt.Sprintf("hostpath: phase %s, %s, event %s %q", wrong.Status.Phase, stateString(cs.State), mountEv.Reason, trim(mountEv.Message)))

	// The 253-character pod name: FailedCreatePodSandBox, never running.
	ev = waitForPodEvent(t, n.ns, tooLong.Name, "FailedCreatePodSandBox")
	if p := waitPods(t, n.ns, []string{tooLong.Name}, "read", podTimeout, func(*v1.Pod) bool { return true })[tooLong.Name]; p.Status.Phase != v1.PodPending {
		t.Errorf("pod with a 253-character name: phase %s, want Pending", p.Status.Phase)
	}
	report = append(report, fmt.Sprintf("253-character name: event %s %q", ev.Reason, trim(strings.ReplaceAll(ev.Message, tooLong.Name, "<name>"))))

	// The second pod on the port: rejected with the kubelet's reason.
	rejected := waitForPod(t, n.ns, port2.Name, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if rejected.Status.Reason != "NodePorts" || !strings.Contains(rejected.Status.Message, "didn't have free ports") {
		t.Errorf("pod port-2: reason %q message %q, want NodePorts: node(s) didn't have free ports for the requested pod ports", rejected.Status.Reason, rejected.Status.Message)
	}
	ev = waitForPodEvent(t, n.ns, port2.Name, "NodePorts")
	report = append(report, fmt.Sprintf("port-2: %s %s %q, event %s", rejected.Status.Phase, rejected.Status.Reason, rejected.Status.Message, ev.Reason))

	// Everybody else: the bystander untouched, a new pod starts, the agent
	// never restarted.
	after := waitPods(t, n.ns, []string{bystander.Name}, "Running and Ready", podTimeout, isPodReady)
	if changed := compareContainers(snapshotContainers(before), after); len(changed) > 0 {
		t.Errorf("the bystander's container changed: %v", changed)
	}
	late := withGrace(n.pod("late", sleeper...), 2)
	n.createPod(t, late)
	start = time.Now()
	waitPods(t, n.ns, []string{late.Name}, "Running and Ready", podTimeout, isPodReady)
	lateIn := time.Since(start)
	if now := n.agent.Pid(); now != pid {
		t.Errorf("the agent restarted (pid %d, then %d)", pid, now)
	}
	t.Logf("2,000 env vars, 100 containers, a %d KiB annotation, the first hostPort pod and a 63-character container in a pod with a 255-byte log directory name Running and Ready in %s (1 MiB annotation refused by the apiserver); %s; bystander untouched, a new pod Ready in %s, agent pid unchanged",
		256, runningIn.Round(100*time.Millisecond), strings.Join(report, "; "), lateIn.Round(100*time.Millisecond))
}

// trim shortens an event message for the test's log line.
func trim(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}
