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
	root := filepath.Join(n.agent.Dir, "root")
	// Short: the registration socket's path must fit a unix socket's 108 bytes.
	driverName := fmt.Sprintf("gpu%d.nk.dev", os.Getpid())
	drv, err := dradriver.Start(ctx, dradriver.Options{
		Name: driverName, NodeName: n.name, Client: client, RootDir: root, CDIDir: cdiDir, Devices: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			drv.Stop()
		}
	})
	sliceSelector := metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + n.name + "," + resourceapi.ResourceSliceSelectorDriver + "=" + driverName}
	nodeDevices := func() (int, error) {
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
		c, err := nodeDevices()
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
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: n.ns, Name: "gpu"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}},
		}}},
	}
	if _, err := client.ResourceV1().ResourceClaimTemplates(n.ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

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
