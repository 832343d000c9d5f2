package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/csidriver"
)

// ensureCSIDriverObject creates the e2e driver's CSIDriver object, shared
// by the tests that mount its volumes: no attach (the test plays no
// attacher for these), pod info on mount, persistent and inline ephemeral
// volumes.
func ensureCSIDriverObject(t *testing.T) {
	t.Helper()
	obj := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: e2eCSIDriver},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired: ptr.To(false),
			PodInfoOnMount: ptr.To(true),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{
				storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
		},
	}
	_, err := env.cp.Client().StorageV1().CSIDrivers().Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CSIDriver: %v", err)
	}
}

// csiPV creates a PersistentVolume of the e2e driver with volume handle
// handle, reserved for claim of the node's namespace and of class
// "csi-e2e", deleted when the test ends.
func (n *podNode) csiPV(t *testing.T, handle, claim string) *v1.PersistentVolume {
	t.Helper()
	core := env.cp.Client().CoreV1()
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: handle},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              "csi-e2e",
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: e2eCSIDriver, VolumeHandle: handle}},
			ClaimRef: &v1.ObjectReference{Namespace: n.ns, Name: claim},
		},
	}
	pv, err := core.PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PV %s: %v", handle, err)
	}
	t.Cleanup(func() {
		_ = core.PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	return pv
}

// mountsUnder returns the mount points under dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// TestCSIVolumesOnContainerd mounts the e2e CSI driver's volumes on a
// containerd node: a StatefulSet of 3 with volumeClaimTemplates on static
// PVs whose data survives a pod's deletion and the agent's SIGKILL and
// restart (no stage or publish again, no container restarted), an inline
// ephemeral CSI volume and a generic ephemeral volume that leave no mount
// or directory behind, and a driver killed mid-way: FailedMount with the
// driver's error, then Running once it is back.
func TestCSIVolumesOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	n := newContainerdPodNode(t, "ctr-csi")
	d := startCSIDriver(t, n.testNode, 0)
	waitRegistration(t, d)
	ensureCSIDriverObject(t)
	t.Run("StatefulSet", func(t *testing.T) { testCSIStatefulSet(t, n, d) })
	t.Run("inline and generic ephemeral", func(t *testing.T) { testCSIEphemeral(t, n, d) })
	t.Run("driver killed", func(t *testing.T) { testCSIDriverKilled(t, n, d) })
}

func testCSIStatefulSet(t *testing.T, n *podNode, d *csidriver.Driver) {
	ctx := t.Context()
	const name = "web"
	for i := range 3 {
		n.csiPV(t, fmt.Sprintf("%s-data-%s-%d", n.ns, name, i), fmt.Sprintf("data-%s-%d", name, i))
	}
	labels := map[string]string{"app": name}
	spec := n.podSpec("sh", "-c", "cat /data/who 2>/dev/null || hostname > /data/who; echo ready; sleep 3600")
	spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](3),
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: v1.PersistentVolumeClaimSpec{
					AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					StorageClassName: ptr.To("csi-e2e"),
					Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	if _, err := env.cp.Client().AppsV1().StatefulSets(n.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := []string{name + "-0", name + "-1", name + "-2"}
	pods := waitPods(t, n.ns, names, "Running and Ready", podTimeout, isPodReady)
	for i, p := range names {
		host := filepath.Join(d.VolumeDir(fmt.Sprintf("%s-data-%s-%d", n.ns, name, i)), "who")
		waitForHostFileText(t, host, p+"\n")
	}

	// A pod deleted comes back (the same claim) and reads what it wrote.
	old := pods[names[0]]
	if err := env.cp.Client().CoreV1().Pods(n.ns).Delete(ctx, names[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	back := waitPods(t, n.ns, names[:1], "back, Running and Ready", podTimeout, func(p *v1.Pod) bool {
		return p.UID != old.UID && isPodReady(p)
	})[names[0]]
	n.waitForLogLine(t, back, "main", "the data written before the deletion", func(l string) bool { return l == names[0] })

	// The agent SIGKILLed and restarted: nothing staged, published or
	// started again.
	pods = waitPods(t, n.ns, names, "Running and Ready", podTimeout, isPodReady)
	snap := snapshotContainers(pods)
	stages, publishes := d.Calls("NodeStageVolume"), d.Calls("NodePublishVolume")
	n.agent.Kill()
	if err := n.agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	probe := n.createPod(t, n.pod("after-restart", "sleep", "3600"))
	waitPods(t, n.ns, []string{probe.Name}, "Running", podTimeout, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	after := waitPods(t, n.ns, names, "Running and Ready", podTimeout, isPodReady)
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("containers restarted by the agent's restart:\n  %s", strings.Join(changed, "\n  "))
	}
	if s, p := d.Calls("NodeStageVolume"), d.Calls("NodePublishVolume"); s != stages || p != publishes {
		t.Errorf("after the restart the driver was asked to stage %d and publish %d more times, want 0", s-stages, p-publishes)
	}
}

// waitForHostFileText waits until path on the host holds want.
func waitForHostFileText(t *testing.T, path, want string) {
	t.Helper()
	waitForCondition(t, path, podTimeout, func() (bool, error) {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == want, nil
	})
}

func testCSIEphemeral(t *testing.T, n *podNode, d *csidriver.Driver) {
	ctx := t.Context()
	pod := n.pod("inline", "sh", "-c", "echo inline > /inline/f; echo generic > /generic/f; echo written; sleep 3600")
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "inline", MountPath: "/inline"}, {Name: "generic", MountPath: "/generic"}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: e2eCSIDriver}}},
		{Name: "generic", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
			VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: v1.PersistentVolumeClaimSpec{
				AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				StorageClassName: ptr.To("csi-e2e"),
				Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
			}}}}},
	}
	// The ephemeral-volume controller names the claim <pod>-<volume>.
	n.csiPV(t, n.ns+"-generic", "inline-generic")
	created := n.createPod(t, pod)
	n.waitForLogLine(t, created, "main", "the files written", func(l string) bool { return l == "written" })
	waitForHostFileText(t, filepath.Join(d.VolumeDir(n.ns+"-generic"), "f"), "generic\n")
	podDir := filepath.Join(n.agent.Dir, "root", "pods", string(created.UID))
	if len(mountsUnder(t, podDir)) == 0 {
		t.Fatalf("no mounts under %s while the pod runs", podDir)
	}

	if err := env.cp.Client().CoreV1().Pods(n.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsGone(t, n.ns, []string{pod.Name}, podTimeout)
	// The generic volume's staging directory, the kubelet's
	// plugins/kubernetes.io/csi/<driver>/<sha256 of the handle>.
	sum := sha256.Sum256([]byte(n.ns + "-generic"))
	staging := filepath.Join(n.agent.Dir, "root", "plugins", "kubernetes.io", "csi", e2eCSIDriver, hex.EncodeToString(sum[:]))
	waitForCondition(t, "no mount, staging path or directory left of the pod", podTimeout, func() (bool, error) {
		if len(mountsUnder(t, podDir)) > 0 || len(mountsUnder(t, staging)) > 0 {
			return false, nil
		}
		for _, dir := range []string{podDir, staging} {
			if _, err := os.Stat(dir); err == nil {
				return false, nil
			}
		}
		return true, nil
	})
	// The inline volume's directory went with it.
	if entries, err := filepath.Glob(filepath.Join(filepath.Dir(d.VolumeDir("x")), "csi-*")); err != nil || len(entries) > 0 {
		t.Errorf("the inline volume's data is left: %v %v", entries, err)
	}
	// The generic volume's data stays with its PV (Retain); the inline
	// volume's goes with the pod.
	waitForHostFileText(t, filepath.Join(d.VolumeDir(n.ns+"-generic"), "f"), "generic\n")
}

func testCSIDriverKilled(t *testing.T, n *podNode, d *csidriver.Driver) {
	n.csiPV(t, n.ns+"-late", "late")
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: n.ns},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: ptr.To("csi-e2e"),
			VolumeName:       n.ns + "-late",
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := env.cp.Client().CoreV1().PersistentVolumeClaims(n.ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	pod := n.pod("late", "sh", "-c", "echo late > /data/f; echo written; sleep 3600")
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "late"}}}}
	created := n.createPod(t, pod)
	ev := waitForPodEvent(t, n.ns, pod.Name, "FailedMount")
	t.Logf("FailedMount with the driver down: %s", ev.Message)
	if !strings.Contains(ev.Message, e2eCSIDriver) && !strings.Contains(ev.Message, "rpc error") {
		t.Errorf("FailedMount %q names neither the driver nor its error", ev.Message)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	n.waitForLogLine(t, created, "main", "the file written once the driver is back", func(l string) bool { return l == "written" })
	waitForHostFileText(t, filepath.Join(d.VolumeDir(n.ns+"-late"), "f"), "late\n")
}
