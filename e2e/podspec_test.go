package e2e

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/pods"
)

// testContainerRestartRules: a container's restartPolicy and
// restartPolicyRules (ContainerRestartRules, on since 1.35) decide its
// restarts. A Job-like pod (restartPolicy Never) whose container restarts
// on exit code 42 restarts it and stays Running with it running; an
// OnFailure pod whose container says Never is not restarted and ends
// Failed; an exit matching a RestartAllContainers rule restarts all the
// pod's containers in place (testRestartAllContainers).
func testContainerRestartRules(t *testing.T, n *podNode) {
	t.Run("rule restarts exit 42", func(t *testing.T) {
		t.Parallel()
		pod := n.pod("restart-rule-42", "sh", "-c", "if [ -f /data/ran ]; then exec sleep 3600; fi; touch /data/ran; exit 42")
		pod.Spec.RestartPolicy = v1.RestartPolicyNever
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
		c.RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
		pod = n.createPod(t, pod)
		pod = waitForPod(t, pod.Namespace, pod.Name, "Running with the container restarted once", func(p *v1.Pod) bool {
			cs, ok := mainStatus(p)
			return p.Status.Phase == v1.PodRunning && ok && cs.State.Running != nil && cs.RestartCount == 1
		})
		cs, _ := mainStatus(pod)
		if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 42 {
			t.Errorf("last termination %+v, want exit code 42", cs.LastTerminationState)
		}
	})
	t.Run("RestartAllContainers on exit 42", func(t *testing.T) {
		t.Parallel()
		testRestartAllContainers(t, n)
	})
	t.Run("container Never in an OnFailure pod", func(t *testing.T) {
		t.Parallel()
		pod := n.pod("restart-container-never", "sh", "-c", "exit 3")
		pod.Spec.RestartPolicy = v1.RestartPolicyOnFailure
		pod.Spec.Containers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
		pod = n.createPod(t, pod)
		pod = waitForPod(t, pod.Namespace, pod.Name, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		cs, _ := mainStatus(pod)
		if cs.RestartCount != 0 || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 {
			t.Errorf("container %s restarted %d times, want terminated with exit code 3 and never restarted", stateString(cs.State), cs.RestartCount)
		}
	})
}

// testRestartAllContainers: in a Job-like pod (restartPolicy Never), a
// regular container whose exit 42 matches a RestartAllContainers rule
// restarts every container in place, as the kubelet: the init container,
// the sidecar and the other regular container run again in the same
// sandbox, each with restart count 1 and a last termination (the removed
// ones' reason RestartingAllContainers), the pod stays Running and
// initialized, and once all run again the AllContainersRestarting
// condition is False.
func testRestartAllContainers(t *testing.T, n *podNode) {
	pod := n.pod("restart-all", "sh", "-c", "if [ -f /data/ran ]; then exec sleep 3600; fi; touch /data/ran; exit 42")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	main := &pod.Spec.Containers[0]
	main.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	main.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
	main.RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	other := func(name string, command ...string) v1.Container {
		return v1.Container{Name: name, Image: main.Image, ImagePullPolicy: main.ImagePullPolicy, Command: command}
	}
	sidecar := other("sidecar", "sleep", "3600")
	sidecar.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	pod.Spec.InitContainers = []v1.Container{other("init", "true"), sidecar}
	pod.Spec.Containers = append(pod.Spec.Containers, other("regular", "sleep", "3600"))
	pod = n.createPod(t, pod)

	names := []string{"init", "sidecar", "main", "regular"}
	statusOf := func(p *v1.Pod, name string) (v1.ContainerStatus, bool) {
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if cs.Name == name {
				return cs, true
			}
		}
		return v1.ContainerStatus{}, false
	}
	pod = waitForPod(t, pod.Namespace, pod.Name, "every container restarted once and running again", func(p *v1.Pod) bool {
		for _, name := range names {
			cs, ok := statusOf(p, name)
			if !ok || cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
				return false
			}
			if done := name == "init"; (done && cs.State.Terminated == nil) || (!done && cs.State.Running == nil) {
				return false
			}
		}
		return p.Status.Phase == v1.PodRunning
	})
	for _, name := range []string{"init", "sidecar", "regular"} {
		cs, _ := statusOf(pod, name)
		if last := cs.LastTerminationState.Terminated; last.Reason != "RestartingAllContainers" || last.ExitCode != 137 {
			t.Errorf("%s: last termination %+v, want RestartingAllContainers with exit code 137", name, last)
		}
	}
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == v1.AllContainersRestarting && c.Status != v1.ConditionFalse,
			c.Type == v1.PodInitialized && c.Status != v1.ConditionTrue:
			t.Errorf("condition %s=%s (%s) once all run again", c.Type, c.Status, c.Reason)
		}
	}
	// The sandbox stays; the runtime keeps only the new instances.
	if sbs := n.criSandboxes(t, pod.UID); len(sbs) != 1 || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandboxes %v, want the one the pod started with, ready", sbs)
	}
	if got := n.criContainers(t, pod.UID, false); len(got) != len(names) {
		var ids []string
		for _, c := range got {
			ids = append(ids, fmt.Sprintf("%s(%s, attempt %d)", c.Metadata.Name, c.State, c.Metadata.Attempt))
		}
		t.Errorf("runtime containers %v, want one instance of each of %v", ids, names)
	}
}

// testSysctls: a safe sysctl is set in the pod's sandbox; an unsafe one
// the node does not allow fails the pod at admission with SysctlForbidden
// and a warning event, as the kubelet.
func testSysctls(t *testing.T, n *podNode) {
	t.Run("unsafe refused", func(t *testing.T) {
		t.Parallel()
		pod := n.pod("sysctl-unsafe", "sleep", "3600")
		pod.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.msgmax", Value: "10000"}}}
		pod = n.createPod(t, pod)
		pod = waitForPod(t, pod.Namespace, pod.Name, "Failed by admission", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		const want = `Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted`
		if pod.Status.Reason != "SysctlForbidden" || pod.Status.Message != want {
			t.Errorf("status %q: %q, want SysctlForbidden: %q", pod.Status.Reason, pod.Status.Message, want)
		}
		if ev := waitForPodEvent(t, pod.Namespace, pod.Name, "SysctlForbidden"); ev.Type != v1.EventTypeWarning {
			t.Errorf("SysctlForbidden event of type %s, want Warning", ev.Type)
		}
	})
}

// testSafeSysctlApplied: a safe sysctl reaches the pod's network namespace.
func testSafeSysctlApplied(t *testing.T, n *podNode) {
	pod := n.pod("sysctl-safe", "sh", "-c", "cat /proc/sys/net/ipv4/ip_local_port_range > /dev/termination-log")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "20000 21000"}}}
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	cs, _ := mainStatus(pod)
	if got := strings.Join(strings.Fields(cs.State.Terminated.Message), " "); got != "20000 21000" {
		t.Errorf("net.ipv4.ip_local_port_range in the pod = %q, want 20000 21000", got)
	}
}

// testActiveDeadline: a pod that runs past its activeDeadlineSeconds is
// stopped and Failed with reason DeadlineExceeded, as the kubelet.
func testActiveDeadline(t *testing.T, n *podNode) {
	pod := n.pod("active-deadline", "sleep", "3600")
	pod.Spec.ActiveDeadlineSeconds = ptr.To[int64](3)
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Failed for its deadline", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if pod.Status.Reason != "DeadlineExceeded" || pod.Status.Message != "Pod was active on the node longer than the specified deadline" {
		t.Errorf("status %q: %q, want DeadlineExceeded", pod.Status.Reason, pod.Status.Message)
	}
	waitForPodEvent(t, pod.Namespace, pod.Name, "DeadlineExceeded")
}

// testPodSpecAdmission: what the node does not do is refused with the
// kubelet's reason and a warning event, never run without it (a user
// namespace on a runtime without them: FailedCreatePodSandBox, as the
// kubelet, while on containerd 2 the pod runs; AppArmor on a host without
// it, while on a host with it the pod runs); a request for an extended resource the node does not
// advertise is dropped before the fit check, as the kubelet does, and the
// pod runs.
func testPodSpecAdmission(t *testing.T, n *podNode) {
	refused := func(t *testing.T, pod *v1.Pod, reason, message string) {
		t.Helper()
		pod = n.createPod(t, pod)
		pod = waitForPod(t, pod.Namespace, pod.Name, "Failed by admission", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if pod.Status.Reason != reason || pod.Status.Message != "Pod was rejected: "+message {
			t.Errorf("status %q: %q, want %s: %q", pod.Status.Reason, pod.Status.Message, reason, message)
		}
		if ev := waitForPodEvent(t, pod.Namespace, pod.Name, reason); ev.Type != v1.EventTypeWarning {
			t.Errorf("%s event of type %s, want Warning", reason, ev.Type)
		}
		if got := n.criSandboxes(t, pod.UID); len(got) != 0 {
			t.Errorf("a refused pod got sandboxes: %v", got)
		}
	}
	t.Run("hostUsers false", func(t *testing.T) {
		t.Parallel()
		pod := n.pod("userns", "sleep", "3600")
		pod.Spec.HostUsers = ptr.To(false)
		pod = n.createPod(t, pod)
		if n.containerd != nil && n.containerd.Series == cluster.ContainerdSeries2 {
			waitForPod(t, pod.Namespace, pod.Name, "Running in a user namespace", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
			return
		}
		// containerd 1.6 reports no runtime handlers, fakecri none with
		// user namespaces: the sandbox fails as on a kubelet, the pod
		// stays Pending and never runs.
		ev := waitForPodEvent(t, pod.Namespace, pod.Name, "FailedCreatePodSandBox")
		const want = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
		if ev.Type != v1.EventTypeWarning || ev.Message != want {
			t.Errorf("%s event %q, want Warning %q", ev.Type, ev.Message, want)
		}
		got, err := env.cp.Client().CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1.PodPending {
			t.Errorf("pod refused by the runtime is %s, want Pending", got.Status.Phase)
		}
		if sbs := n.criSandboxes(t, pod.UID); len(sbs) != 0 {
			t.Errorf("a pod the runtime cannot run in a user namespace got sandboxes: %v", sbs)
		}
	})
	t.Run("AppArmor", func(t *testing.T) {
		t.Parallel()
		pod := n.pod("apparmor", "sleep", "3600")
		pod.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
		if pods.HostAppArmorEnabled() {
			pod = n.createPod(t, pod)
			waitForPod(t, pod.Namespace, pod.Name, "Running on a host with AppArmor", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
			return
		}
		refused(t, pod, "AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host")
	})
	t.Run("extended resource not advertised", func(t *testing.T) {
		t.Parallel()
		pod := n.pod("extended-missing", "sleep", "3600")
		pod.Spec.NodeSelector = nil
		pod.Spec.NodeName = n.name // the scheduler would not place it
		pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
			Requests: v1.ResourceList{"example.com/widget": resource.MustParse("1")},
			Limits:   v1.ResourceList{"example.com/widget": resource.MustParse("1")},
		}
		pod = n.createPod(t, pod)
		waitForPod(t, pod.Namespace, pod.Name, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	})
}

// testHostnameOverride: spec.hostnameOverride is the hostname the pod's
// containers see.
func testHostnameOverride(t *testing.T, n *podNode) {
	pod := n.pod("hostname-override", "sh", "-c", "hostname > /dev/termination-log")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.HostnameOverride = ptr.To("custom.host-name")
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	cs, _ := mainStatus(pod)
	if got := strings.TrimSpace(cs.State.Terminated.Message); got != "custom.host-name" {
		t.Errorf("hostname in the pod = %q, want custom.host-name", got)
	}
}

// testReadinessGates: a pod with two readiness gates is Running but not
// Ready (ReadinessGatesNotReady) until another writer sets both gate
// conditions True through the status subresource, then Ready; one gate set
// False makes it not Ready again, as upstream's "should support pod
// readiness gates [NodeConformance]".
func testReadinessGates(t *testing.T, n *podNode) {
	const gateA, gateB = "k8s.io/test-condition1", "k8s.io/test-condition2"
	pod := n.pod("readiness-gates", "sleep", "3600")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gateA}, {ConditionType: gateB}}
	pod = n.createPod(t, pod)
	notReady := func(p *v1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady {
				return p.Status.Phase == v1.PodRunning && c.Status == v1.ConditionFalse && c.Reason == "ReadinessGatesNotReady"
			}
		}
		return false
	}
	waitForPod(t, pod.Namespace, pod.Name, "Running, not Ready for want of its gates", notReady)
	setGates := func(a, b v1.ConditionStatus) {
		t.Helper()
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q},{"type":%q,"status":%q}]}}`, gateA, a, gateB, b)
		if _, err := env.cp.Client().CoreV1().Pods(pod.Namespace).Patch(t.Context(), pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("patch the status of pod %s/%s: %v", pod.Namespace, pod.Name, err)
		}
	}
	setGates(v1.ConditionTrue, v1.ConditionTrue)
	waitForPod(t, pod.Namespace, pod.Name, "Ready once both gates are True", isPodReady)
	setGates(v1.ConditionTrue, v1.ConditionFalse)
	waitForPod(t, pod.Namespace, pod.Name, "not Ready again once one gate is False", notReady)
}
