package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/e2e/dradriver"
	"github.com/nodekit/nodekit/internal/testenv"
)

// TestDRAOnContainerd: the e2e module's DRA driver, built with
// k8s.io/dynamic-resource-allocation's kubeletplugin helper, registers
// with the agent's plugin manager and publishes a ResourceSlice of 4
// devices on the node; a pod with a ResourceClaimTemplate is scheduled
// (the resourceclaim controller makes its claim, the scheduler allocates
// a device and reserves the claim), prepared before its sandbox (the
// driver's NodePrepareResources; the CDI device's environment variable is
// in the container: the node runs containerd 2), checkpointed in dra_manager_state,
// and unprepared after the pod's deletion. The driver stopped, its
// ResourceSlice is deleted after the kubelet's 30 s grace.
func TestDRAOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	client := env.cp.Client()
	n, cdiDir := newCDIPodNode(t, "ctr-dra")
	d := startDRADriver(t, n, cdiDir, "gpu", false)
	drv, root, nodeDevices := d.drv, d.root, d.nodeDevices
	stopped := false
	d.stop = func() {
		if !stopped {
			drv.Stop()
		}
	}
	tmpl := d.template

	pod := n.pod("dra", "sh", "-c", `env | grep '^DRA_E2E_' | sed 's/^/cdi-env: /'; echo cdi-env-done; sleep 3600`)
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl.Name)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod's resource claim statuses: %+v", pod.Status.ResourceClaimStatuses)
	}
	claimName := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	claim, err := client.ResourceV1().ResourceClaims(n.ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s allocation: %+v", claimName, claim.Status.Allocation)
	}
	device := claim.Status.Allocation.Devices.Results[0].Device

	// Prepared by the driver, before the container started with the CDI
	// device's environment.
	prepared, _, _ := drv.Prepared()
	if got := prepared[claim.UID]; len(got) != 1 || got[0] != device {
		t.Errorf("the driver prepared %v for claim %s, want [%s]", got, claimName, device)
	}
	n.waitForLogLine(t, pod, "main", "the CDI environment", func(l string) bool { return l == "cdi-env-done" })
	logs, err := client.CoreV1().Pods(n.ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "main"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := "cdi-env: " + dradriver.EnvName(device) + "=" + device
	var envLines []string
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.HasPrefix(l, "cdi-env: ") {
			envLines = append(envLines, l)
		}
	}
	if len(envLines) != 1 || envLines[0] != want {
		t.Errorf("the container's DRA_E2E_ environment is %q, want only %q (the CDI device of %s)", envLines, want, device)
	}
	state, err := os.ReadFile(filepath.Join(root, "dra_manager_state"))
	if err != nil || !strings.Contains(string(state), string(claim.UID)) || !strings.Contains(string(state), string(pod.UID)) {
		t.Errorf("dra_manager_state does not hold claim %s of pod %s: %s, %v", claim.UID, pod.UID, state, err)
	}
	// A driver that reports no health: the claim's device is Unknown in
	// the container's allocatedResourcesStatus, as the kubelet reports it.
	waitForClaimHealth(t, pod, drv.CDIKind()+"="+device, v1.ResourceHealthStatusUnknown)

	// Deleted: unprepared, and the checkpoint forgets the claim.
	if err := client.CoreV1().Pods(n.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsGone(t, n.ns, []string{pod.Name}, podTimeout)
	waitForCondition(t, "the claim unprepared", readyTimeout, func() (bool, error) {
		prepared, _, unprepares := drv.Prepared()
		_, still := prepared[claim.UID]
		return !still && unprepares >= 1, nil
	})
	if state, err := os.ReadFile(filepath.Join(root, "dra_manager_state")); err != nil || strings.Contains(string(state), string(claim.UID)) {
		t.Errorf("dra_manager_state after the pod's deletion: %s, %v", state, err)
	}
	_, prepares, _ := drv.Prepared()
	if prepares != 1 {
		t.Errorf("NodePrepareResources was called for %d claims, want 1", prepares)
	}

	// The driver goes away: after the grace its slice is deleted.
	drv.Stop()
	stopped = true
	waitForCondition(t, "the driver's ResourceSlice deleted", readyTimeout+time.Minute, func() (bool, error) {
		c, err := nodeDevices()
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return c == 0, err
	})
}

// draSetup is a DRA driver of the e2e module running on a node, with a
// DeviceClass of its devices and a ResourceClaimTemplate asking for one.
type draSetup struct {
	drv      *dradriver.Driver
	root     string // the agent's root directory
	name     string // the driver's and the DeviceClass's name
	template *resourceapi.ResourceClaimTemplate
	// nodeDevices counts the devices of the driver's ResourceSlices of
	// the node.
	nodeDevices func() (int, error)
	// stop, when set, replaces drv.Stop at the test's cleanup.
	stop func()
}

// startDRADriver starts the e2e DRA driver (4 devices) named
// <prefix><pid>.nk.dev on node n, waits for its ResourceSlice, and creates
// a DeviceClass of its devices and a ResourceClaimTemplate "gpu" in n's
// namespace asking for one device.
func startDRADriver(t *testing.T, n *podNode, cdiDir, prefix string, health bool) *draSetup {
	t.Helper()
	ctx := t.Context()
	client := env.cp.Client()
	root := filepath.Join(n.agent.Dir, "root")
	// Short: the registration socket's path must fit a unix socket's 108 bytes.
	driverName := fmt.Sprintf("%s%d.nk.dev", prefix, os.Getpid())
	drv, err := dradriver.Start(ctx, dradriver.Options{
		Name: driverName, NodeName: n.name, Client: client, RootDir: root, CDIDir: cdiDir, Devices: 4, Health: health,
	})
	if err != nil {
		t.Fatal(err)
	}
	d := &draSetup{drv: drv, root: root, name: driverName}
	t.Cleanup(func() {
		if d.stop != nil {
			d.stop()
			return
		}
		drv.Stop()
	})
	sliceSelector := metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + n.name + "," + resourceapi.ResourceSliceSelectorDriver + "=" + driverName}
	d.nodeDevices = func() (int, error) {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, sliceSelector)
		if err != nil {
			return 0, err
		}
		count := 0
		for _, s := range slices.Items {
			count += len(s.Spec.Devices)
		}
		return count, nil
	}
	waitForCondition(t, "the driver's ResourceSlice with 4 devices", readyTimeout, func() (bool, error) {
		c, err := d.nodeDevices()
		return c == 4, err
	})

	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driverName)},
		}}},
	}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{}) //nolint:errcheck // best effort
	})
	d.template = &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: n.ns, Name: "gpu"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}},
		}}},
	}
	if _, err := client.ResourceV1().ResourceClaimTemplates(n.ns).Create(ctx, d.template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return d
}

// runClaimPod runs a pod named name whose container uses a claim made from
// d's template and sleeps; it returns the running pod and its claim.
func (d *draSetup) runClaimPod(t *testing.T, n *podNode, name string) (*v1.Pod, *resourceapi.ResourceClaim) {
	t.Helper()
	pod := n.pod(name, "sleep", "3600")
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(d.template.Name)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	pod = n.createPod(t, pod)
	pod = waitForPod(t, pod.Namespace, pod.Name, "Running and Ready", isPodReady)
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s's resource claim statuses: %+v", name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := env.cp.Client().ResourceV1().ResourceClaims(n.ns).Get(t.Context(), *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod, claim
}

// waitForClaimHealth waits until the status of pod's container "main"
// reports its claim "gpu" with exactly the device resourceID at health.
func waitForClaimHealth(t *testing.T, pod *v1.Pod, resourceID string, health v1.ResourceHealthStatus) {
	t.Helper()
	waitForPod(t, pod.Namespace, pod.Name, fmt.Sprintf("claim:gpu %s %s in allocatedResourcesStatus", resourceID, health), func(p *v1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				if cs.Name == "main" && rs.Name == "claim:gpu" {
					return len(rs.Resources) == 1 && string(rs.Resources[0].ResourceID) == resourceID && rs.Resources[0].Health == health
				}
			}
		}
		return false
	})
}

// TestDRAAcrossAgentRestartOnContainerd: a pod's claim prepared by the e2e
// DRA driver stays prepared across the agent's SIGKILL and restart, as
// with the kubelet: the restarted agent reads dra_manager_state, does not
// call NodePrepareResources for it again, leaves the pod's container
// running (0 restarts), prepares a new pod's claim once the driver has
// registered again, and unprepares the first claim when its pod is
// deleted. The driver reports its devices' health: Healthy, then
// Unhealthy after the restart, in the pod's allocatedResourcesStatus.
func TestDRAAcrossAgentRestartOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	n, cdiDir := newCDIPodNode(t, "ctr-drar")
	d := startDRADriver(t, n, cdiDir, "r", true)
	first, claim := d.runClaimPod(t, n, "dra-before")
	if prepared, prepares, _ := d.drv.Prepared(); prepares != 1 || len(prepared[claim.UID]) != 1 {
		t.Fatalf("before the restart the driver prepared %v in %d calls, want claim %s once", prepared, prepares, claim.UID)
	}
	device := claim.Status.Allocation.Devices.Results[0].Device
	waitForClaimHealth(t, first, d.drv.CDIKind()+"="+device, v1.ResourceHealthStatusHealthy)
	snap := snapshotContainers(map[string]*v1.Pod{first.Name: first})

	n.agent.Kill()
	if err := n.agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A new pod's claim is prepared: the driver registered with the
	// restarted agent, which has synced the pods it found running.
	second, claim2 := d.runClaimPod(t, n, "dra-after")
	after := waitPods(t, n.ns, []string{first.Name}, "Running and Ready", podTimeout, isPodReady)
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("containers restarted by the agent's restart:\n  %s", strings.Join(changed, "\n  "))
	}
	if prepared, prepares, _ := d.drv.Prepared(); prepares != 2 || len(prepared[claim.UID]) != 1 || len(prepared[claim2.UID]) != 1 {
		t.Errorf("after the restart the driver prepared %v in %d calls, want claims %s and %s once each", prepared, prepares, claim.UID, claim2.UID)
	}
	state, err := os.ReadFile(filepath.Join(d.root, "dra_manager_state"))
	if err != nil || !strings.Contains(string(state), string(claim.UID)) || !strings.Contains(string(state), string(first.UID)) {
		t.Errorf("dra_manager_state after the restart does not hold claim %s of pod %s: %s, %v", claim.UID, first.UID, state, err)
	}
	// The restarted agent watches the driver's health again: a device
	// turning unhealthy shows in the running pod's status.
	d.drv.SetHealth(device, false)
	waitForClaimHealth(t, first, d.drv.CDIKind()+"="+device, v1.ResourceHealthStatusUnhealthy)

	// Deleted after the restart: the checkpointed claim is unprepared.
	client := env.cp.Client()
	for _, p := range []*v1.Pod{first, second} {
		if err := client.CoreV1().Pods(n.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPodsGone(t, n.ns, []string{first.Name, second.Name}, podTimeout)
	waitForCondition(t, "both claims unprepared", readyTimeout, func() (bool, error) {
		prepared, _, unprepares := d.drv.Prepared()
		return len(prepared) == 0 && unprepares == 2, nil
	})
	if state, err := os.ReadFile(filepath.Join(d.root, "dra_manager_state")); err != nil || strings.Contains(string(state), string(claim.UID)) || strings.Contains(string(state), string(claim2.UID)) {
		t.Errorf("dra_manager_state after the pods' deletion: %s, %v", state, err)
	}
	if _, prepares, unprepares := d.drv.Prepared(); prepares != 2 || unprepares != 2 {
		t.Errorf("NodePrepareResources/NodeUnprepareResources were called for %d/%d claims, want 2/2", prepares, unprepares)
	}
}

// newCDIPodNode starts a node on containerd 2, whose CRI applies CDI
// devices, and returns it with the directory its containerd reads CDI
// specs from. Without containerd 2 the test skips, or fails under CI.
func newCDIPodNode(t *testing.T, name string) (*podNode, string) {
	t.Helper()
	if err := cluster.CheckContainerdSeries(cluster.ContainerdSeries2); err != nil {
		if testenv.InCI() {
			t.Fatalf("containerd 2 unavailable (required under CI): %v", err)
		}
		t.Skipf("containerd 2 unavailable: %v", err)
	}
	n := newContainerdPodNodeWith(t, name, nodeOptions{containerdSeries: cluster.ContainerdSeries2})
	if n.containerd.CDISpecDir == "" {
		t.Fatalf("containerd %s of node %s reads no CDI specs", n.containerd.Series, name)
	}
	return n, n.containerd.CDISpecDir
}
