package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/csidriver"
)

// The e2e CSI driver's other names on the node of TestCSINodeOperations: one
// whose CSIDriver requires attachment, one that fails and goes away. Short:
// the registration socket <node dir>/root/plugins_registry/<name>-reg.sock
// must fit a unix socket address (107 bytes).
const (
	e2eAttachCSIDriver = "att.e2e.nodekit.io"
	e2eFlakyCSIDriver  = "flk.e2e.nodekit.io"
)

// csiNodeSyncFrequency is the agent's --sync-frequency in
// TestCSINodeOperations: the volume manager looks for claims to expand on
// the node at every resync, as the kubelet at every pod sync.
const csiNodeSyncFrequency = 5 * time.Second

// ensureNamedCSIDriverObject creates the CSIDriver of the e2e driver
// called name (persistent volumes, no pod info), shared by the tests that
// use the name.
func ensureNamedCSIDriverObject(t *testing.T, name string, attachRequired bool) {
	t.Helper()
	obj := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(attachRequired),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}
	_, err := env.cp.Client().StorageV1().CSIDrivers().Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CSIDriver %s: %v", name, err)
	}
}

// waitForAttachment waits for the VolumeAttachment the attach/detach
// controller makes for pv on node and checks its spec.
func waitForAttachment(t *testing.T, pv *v1.PersistentVolume, node string) *storagev1.VolumeAttachment {
	t.Helper()
	name := attachmentName(pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.Driver, node)
	var va *storagev1.VolumeAttachment
	waitForCondition(t, "the attach/detach controller's VolumeAttachment "+name, podTimeout, func() (bool, error) {
		var err error
		va, err = env.cp.Client().StorageV1().VolumeAttachments().Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if va.Spec.Attacher != pv.Spec.CSI.Driver || va.Spec.NodeName != node || ptr.Deref(va.Spec.Source.PersistentVolumeName, "") != pv.Name {
		t.Fatalf("VolumeAttachment spec %+v, want attacher %s, node %s, PV %s", va.Spec, pv.Spec.CSI.Driver, node, pv.Name)
	}
	return va
}

// markAttached plays the external attacher: the VolumeAttachment name is
// attached, with metadata as its attachment metadata.
func markAttached(t *testing.T, name string, metadata map[string]string) {
	t.Helper()
	vas := env.cp.Client().StorageV1().VolumeAttachments()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		va, err := vas.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		va.Status.Attached = true
		va.Status.AttachmentMetadata = metadata
		_, err = vas.UpdateStatus(t.Context(), va, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("mark %s attached: %v", name, err)
	}
}

// waitForDetach waits until the attach/detach controller deleted the
// VolumeAttachment name and dropped the volume unique from the node's
// volumesAttached, and requires the node not to report it in volumesInUse
// any more (the controller detaches no volume in use).
func waitForDetach(t *testing.T, name, node string, unique v1.UniqueVolumeName) {
	t.Helper()
	waitForCondition(t, "the attach/detach controller deleting "+name, podTimeout, func() (bool, error) {
		_, err := env.cp.Client().StorageV1().VolumeAttachments().Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	n := waitForNode(t, node, "the volume out of volumesAttached", podTimeout, func(n *v1.Node) bool {
		return !slices.ContainsFunc(n.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == unique })
	})
	if slices.Contains(n.Status.VolumesInUse, unique) {
		t.Errorf("the volume was detached while the node still reported it in volumesInUse %v", n.Status.VolumesInUse)
	}
}

// csiClaim creates a PersistentVolume of driver (volume handle and name
// <namespace>-<name>, of size and class, with attrs as its volume
// attributes) and the claim name of n's namespace pre-bound to it. The PV
// is deleted when the test ends.
func (n *podNode) csiClaim(t *testing.T, name, driver, class, size string, attrs map[string]string) *v1.PersistentVolume {
	t.Helper()
	core := env.cp.Client().CoreV1()
	q := resource.MustParse(size)
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: n.ns + "-" + name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: q},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: n.ns + "-" + name, VolumeAttributes: attrs}},
			ClaimRef: &v1.ObjectReference{Namespace: n.ns, Name: name},
		},
	}
	pv, err := core.PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PV %s: %v", n.ns+"-"+name, err)
	}
	t.Cleanup(func() { _ = core.PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{}) })
	spec := claimSpec(pv)
	spec.Resources.Requests = v1.ResourceList{v1.ResourceStorage: q}
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns}, Spec: spec}
	if _, err := core.PersistentVolumeClaims(n.ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PVC %s: %v", name, err)
	}
	return pv
}

// waitDriverCalls waits until the driver was asked method want times.
func waitDriverCalls(t *testing.T, d *csidriver.Driver, method string, want int) {
	t.Helper()
	waitForCondition(t, fmt.Sprintf("%d %s calls", want, method), podTimeout, func() (bool, error) {
		if got := d.Calls(method); got > want {
			return false, fmt.Errorf("%d %s calls, want %d", got, method, want)
		}
		return d.Calls(method) == want, nil
	})
}

// TestCSINodeOperations proves on a containerd node, with the e2e CSI
// driver registered under three names, what a CSI driver's node side needs
// beyond mounting: a volume whose CSIDriver requires attachment waits for
// the attach/detach controller and is detached after its pod; a claim
// grows online; a driver failing a call or going away disturbs no other
// pod. The subtests share the node and run in parallel.
func TestCSINodeOperations(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	n := newContainerdPodNode(t, "csiops", "--sync-frequency="+csiNodeSyncFrequency.String())
	ensureCSIDriverObject(t)
	ensureNamedCSIDriverObject(t, e2eAttachCSIDriver, true)
	ensureNamedCSIDriverObject(t, e2eFlakyCSIDriver, false)
	main := startCSIDriver(t, n.testNode, 0)
	waitRegistration(t, main)
	attach := startNamedCSIDriver(t, n.agent.Dir, n.name, e2eAttachCSIDriver, 0)
	waitRegistration(t, attach)
	flaky := startNamedCSIDriver(t, n.agent.Dir, n.name, e2eFlakyCSIDriver, 0)
	waitRegistration(t, flaky)
	t.Run("attach required", func(t *testing.T) {
		t.Parallel()
		testCSIAttach(t, n, attach)
	})
	t.Run("online expansion", func(t *testing.T) {
		t.Parallel()
		testCSIOnlineExpansion(t, n, main)
	})
	t.Run("failing driver", func(t *testing.T) {
		t.Parallel()
		testCSIFailingDriver(t, n, main, flaky)
	})
}

// attachmentName is the VolumeAttachment the attach/detach controller
// makes for a CSI volume on a node: csi-<sha256 of handle, driver, node>.
func attachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// testCSIAttach: the attach/detach controller of the kube-controller-manager
// makes the VolumeAttachment of a pod's volume whose CSIDriver requires
// attachment; no external-attacher runs here, so the test plays it by
// setting the attachment's status.attached. Until then the node reports
// the volume in volumesInUse and the pod waits in ContainerCreating with
// no driver call and no FailedMount event (the kubelet only logs "Volume
// not attached according to node status"); attached, the controller lists
// it in volumesAttached, the pod runs and the driver's NodeStageVolume gets
// the attachment's metadata; the pod deleted, the volume leaves
// volumesInUse, and only then does the controller detach it (delete the
// attachment, drop it from volumesAttached).
func testCSIAttach(t *testing.T, n *podNode, d *csidriver.Driver) {
	ctx := t.Context()
	pv := n.csiClaim(t, "attached", e2eAttachCSIDriver, "static-attached", "1Gi", nil)
	handle := pv.Spec.CSI.VolumeHandle
	unique := v1.UniqueVolumeName("kubernetes.io/csi/" + e2eAttachCSIDriver + "^" + handle)
	vaName := attachmentName(handle, e2eAttachCSIDriver, n.name)

	pod := n.createPod(t, n.claimPod("attached", "attached"))
	waitForAttachment(t, pv, n.name)
	waitForNode(t, n.name, "the volume in volumesInUse while it is not attached", podTimeout, func(node *v1.Node) bool {
		return slices.Contains(node.Status.VolumesInUse, unique)
	})
	// The agent has seen the node status with the volume in use and still
	// waits for the attachment.
	waitForCondition(t, "the agent waiting for the attachment", podTimeout, func() (bool, error) {
		b, err := os.ReadFile(n.agent.LogPath)
		return strings.Contains(string(b), fmt.Sprintf(`Volume not attached according to node status for volume \"%s\"`, pv.Name)), err
	})
	waitForPod(t, n.ns, pod.Name, "Pending, waiting in ContainerCreating", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return p.Status.Phase == v1.PodPending && ok && cs.State.Waiting != nil && cs.State.Waiting.Reason == "ContainerCreating"
	})
	if c := d.Calls("NodeStageVolume") + d.Calls("NodePublishVolume"); c != 0 {
		t.Errorf("the driver was asked to stage or publish %d times before the attachment", c)
	}
	for _, ev := range podEvents(t, n.ns, pod.Name) {
		if ev.Reason == "FailedMount" {
			t.Errorf("FailedMount while waiting for the attachment (the kubelet records none before 2m3s): %s", ev.Message)
		}
	}

	// The external attacher's part.
	markAttached(t, vaName, map[string]string{"e2e-device": "/dev/e2e-" + handle})
	n.waitForLogLine(t, pod, "main", "the pod running on the attached volume", func(l string) bool { return l == "written" })
	waitForNode(t, n.name, "the volume in volumesAttached", podTimeout, func(node *v1.Node) bool {
		return slices.ContainsFunc(node.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == unique })
	})
	if got := d.StageContext(handle)["e2e-device"]; got != "/dev/e2e-"+handle {
		t.Errorf("NodeStageVolume's publish context has e2e-device %q, want the attachment's /dev/e2e-%s", got, handle)
	}
	waitForHostFileText(t, filepath.Join(d.VolumeDir(handle), "f"), "written-by-attached\n")

	// Detach after the pod: the volume leaves volumesInUse first.
	start := time.Now()
	if err := env.cp.Client().CoreV1().Pods(n.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsGone(t, n.ns, []string{pod.Name}, podTimeout)
	waitForDetach(t, vaName, n.name, unique)
	waitDriverCalls(t, d, "NodeUnpublishVolume", 1)
	waitDriverCalls(t, d, "NodeUnstageVolume", 1)
	t.Logf("pod deleted → volume detached: %s", time.Since(start).Round(100*time.Millisecond))
}

// testCSIOnlineExpansion grows a claim whose pod runs: the test plays the
// external-resizer (the claim's request raised, which the StorageClass's
// allowVolumeExpansion permits; the PV's capacity raised; the claim's
// allocatedResources, allocatedResourceStatuses NodeResizePending and the
// FileSystemResizePending condition), and the agent does the kubelet's
// part at its next resync: NodeExpandVolume, then the claim's
// status.capacity set and its resize status cleared, and a
// FileSystemResizeSuccessful event. The volume is a tmpfs of the driver's
// that grows in place: the container sees the new size.
func testCSIOnlineExpansion(t *testing.T, n *podNode, d *csidriver.Driver) {
	ctx := t.Context()
	const oldSize, newSize = 16 << 20, 32 << 20
	class := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: n.ns + "-expandable"},
		Provisioner:          e2eCSIDriver,
		AllowVolumeExpansion: ptr.To(true),
	}
	classes := env.cp.Client().StorageV1().StorageClasses()
	if _, err := classes.Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = classes.Delete(context.Background(), class.Name, metav1.DeleteOptions{}) })
	pv := n.csiClaim(t, "grow", e2eCSIDriver, class.Name, "16Mi", map[string]string{csidriver.TmpfsSizeKey: strconv.Itoa(oldSize)})
	handle := pv.Spec.CSI.VolumeHandle

	pod := n.pod("grow", "sh", "-c", `last=; while :; do s=$(df -k /data | awk 'NR==2{print $2}'); [ "$s" != "$last" ] && echo "size $s" && last=$s; sleep 1; done`)
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "grow"}}}}
	pod = n.createPod(t, pod)
	sizeLine := func(bytes int) string { return fmt.Sprintf("size %d", bytes>>10) }
	n.waitForLogLine(t, pod, "main", "the volume's size in the container", func(l string) bool { return l == sizeLine(oldSize) })
	waitForPod(t, n.ns, pod.Name, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	// The external-resizer's part.
	core := env.cp.Client().CoreV1()
	q := *resource.NewQuantity(newSize, resource.BinarySI)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := core.PersistentVolumeClaims(n.ns).Get(ctx, "grow", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Spec.Resources.Requests[v1.ResourceStorage] = q
		_, err = core.PersistentVolumeClaims(n.ns).Update(ctx, pvc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("raise the claim's request: %v", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := core.PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv.Spec.Capacity[v1.ResourceStorage] = q
		_, err = core.PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("raise the PV's capacity: %v", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := core.PersistentVolumeClaims(n.ns).Get(ctx, "grow", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: q}
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{
			v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
		pvc.Status.Conditions = append(pvc.Status.Conditions, v1.PersistentVolumeClaimCondition{
			Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue, LastTransitionTime: metav1.Now(),
			Message: "Waiting for user to (re-)start a pod to finish file system resize of volume on node."})
		_, err = core.PersistentVolumeClaims(n.ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("leave the claim's expansion to the node: %v", err)
	}
	start := time.Now()

	waitForCondition(t, "the claim's new capacity recorded by the agent", podTimeout, func() (bool, error) {
		pvc, err := core.PersistentVolumeClaims(n.ns).Get(ctx, "grow", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pvc.Status.Capacity.Storage().Equal(q), nil
	})
	t.Logf("claim left to the node → capacity recorded: %s", time.Since(start).Round(100*time.Millisecond))
	pvc, err := core.PersistentVolumeClaims(n.ns).Get(ctx, "grow", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]; ok {
		t.Errorf("claim's allocatedResourceStatuses still has storage %s", st)
	}
	for _, c := range pvc.Status.Conditions {
		if c.Type == v1.PersistentVolumeClaimFileSystemResizePending || c.Type == v1.PersistentVolumeClaimNodeResizeError {
			t.Errorf("claim still has the condition %s: %s", c.Type, c.Message)
		}
	}
	if got := d.Expanded(handle); got != newSize {
		t.Errorf("the driver's NodeExpandVolume got %d bytes, want %d", got, newSize)
	}
	ev := waitForPodEvent(t, n.ns, pod.Name, "FileSystemResizeSuccessful")
	if !strings.Contains(ev.Message, pv.Name) {
		t.Errorf("FileSystemResizeSuccessful %q does not name the volume %s", ev.Message, pv.Name)
	}
	n.waitForLogLine(t, pod, "main", "the new size in the container", func(l string) bool { return l == sizeLine(newSize) })
	if p := waitForPod(t, n.ns, pod.Name, "Running", isPodReady); p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the container restarted %d times during the expansion", p.Status.ContainerStatuses[0].RestartCount)
	}
}

// testCSIFailingDriver: the driver failing NodePublishVolume of one volume
// gives its pod FailedMount events naming the volume with the driver's
// message, while a pod already running on another volume of the same
// driver and a new one keep or get their volumes; the pod mounts once the
// driver succeeds. Another driver going away (its sockets removed) is
// de-registered: the CSINode and the node's annotation lose it alone, and
// its running pod keeps running; it comes back and the pod's deletion
// unpublishes and unstages through it.
func testCSIFailingDriver(t *testing.T, n *podNode, main, flaky *csidriver.Driver) {
	ctx := t.Context()
	n.csiClaim(t, "steady", e2eCSIDriver, "static-steady", "1Gi", nil)
	badPV := n.csiClaim(t, "bad", e2eCSIDriver, "static-bad", "1Gi", nil)
	n.csiClaim(t, "newcomer", e2eCSIDriver, "static-newcomer", "1Gi", nil)
	n.csiClaim(t, "flaky", e2eFlakyCSIDriver, "static-flaky", "1Gi", nil)

	steady := n.createPod(t, n.claimPod("steady", "steady"))
	flakyPod := n.createPod(t, n.claimPod("flaky", "flaky"))
	running := waitPods(t, n.ns, []string{steady.Name, flakyPod.Name}, "Running and Ready", podTimeout, isPodReady)
	snap := snapshotContainers(running)

	const msg = "injected NodePublishVolume failure"
	main.FailPublish(badPV.Spec.CSI.VolumeHandle, msg)
	bad := n.createPod(t, n.claimPod("bad", "bad"))
	ev := waitForPodEvent(t, n.ns, bad.Name, "FailedMount")
	want := fmt.Sprintf("MountVolume.SetUp failed for volume %q : rpc error: code = Internal desc = %s", badPV.Name, msg)
	if ev.Message != want {
		t.Errorf("FailedMount %q, want %q", ev.Message, want)
	}
	newcomer := n.createPod(t, n.claimPod("newcomer", "newcomer"))
	waitPods(t, n.ns, []string{newcomer.Name}, "Running and Ready beside the failing volume", podTimeout, isPodReady)
	if p, err := env.cp.Client().CoreV1().Pods(n.ns).Get(ctx, bad.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if p.Status.Phase != v1.PodPending {
		t.Errorf("the pod of the failing volume is %s, want Pending", p.Status.Phase)
	}
	main.FailPublish(badPV.Spec.CSI.VolumeHandle, "")
	n.waitForLogLine(t, bad, "main", "the pod mounted once the driver succeeds", func(l string) bool { return l == "written" })

	// The flaky driver goes away: de-registered, alone.
	flaky.Stop()
	waitForCondition(t, "the gone driver out of the CSINode, the others in", time.Minute, func() (bool, error) {
		cn, err := env.cp.Client().StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var names []string
		for _, d := range cn.Spec.Drivers {
			names = append(names, d.Name)
		}
		return !slices.Contains(names, e2eFlakyCSIDriver) && slices.Contains(names, e2eCSIDriver) && slices.Contains(names, e2eAttachCSIDriver), nil
	})
	waitForNode(t, n.name, "the gone driver out of the node ID annotation", time.Minute, func(node *v1.Node) bool {
		ids, err := nodeCSIIDs(node)
		_, flakyIn := ids[e2eFlakyCSIDriver]
		return err == nil && !flakyIn && ids[e2eCSIDriver] != ""
	})
	after := waitPods(t, n.ns, []string{steady.Name, flakyPod.Name}, "still Running and Ready", podTimeout, isPodReady)
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("containers restarted by the failures:\n  %s", strings.Join(changed, "\n  "))
	}

	// Back again: the pod's deletion goes through it.
	if err := flaky.Start(); err != nil {
		t.Fatal(err)
	}
	waitRegistration(t, flaky)
	if err := env.cp.Client().CoreV1().Pods(n.ns).Delete(ctx, flakyPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsGone(t, n.ns, []string{flakyPod.Name}, podTimeout)
	waitDriverCalls(t, flaky, "NodeUnpublishVolume", 1)
	waitDriverCalls(t, flaky, "NodeUnstageVolume", 1)
}
