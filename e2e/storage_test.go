package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// staticClaim creates a PersistentVolume of src named after the test's
// namespace and a claim "name" pre-bound to it (staticPV); the
// controller-manager's binder makes both Bound. The PV is deleted when the
// test ends (the namespace's deletion takes the claim).
func (n *podNode) staticClaim(t *testing.T, name string, src v1.PersistentVolumeSource, affinity *v1.VolumeNodeAffinity) *v1.PersistentVolume {
	t.Helper()
	pv := n.staticPV(t, name, src, affinity)
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
		Spec:       claimSpec(pv),
	}
	if _, err := env.cp.Client().CoreV1().PersistentVolumeClaims(n.ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PVC: %v", err)
	}
	return pv
}

// claimSpec is the spec of a claim of 1Gi pre-bound to pv.
func claimSpec(pv *v1.PersistentVolume) v1.PersistentVolumeClaimSpec {
	return v1.PersistentVolumeClaimSpec{
		AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		StorageClassName: ptr.To(pv.Spec.StorageClassName),
		VolumeName:       pv.Name,
		Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}

// staticPV creates a PersistentVolume of src reserved for claim name of
// the test's namespace, deleted when the test ends.
func (n *podNode) staticPV(t *testing.T, name string, src v1.PersistentVolumeSource, affinity *v1.VolumeNodeAffinity) *v1.PersistentVolume {
	t.Helper()
	core := env.cp.Client().CoreV1()
	class := "static-" + name
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: n.ns + "-" + name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        src,
			NodeAffinity:                  affinity,
			ClaimRef:                      &v1.ObjectReference{Namespace: n.ns, Name: name},
		},
	}
	pv, err := core.PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PV: %v", err)
	}
	t.Cleanup(func() {
		_ = core.PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	return pv
}

// claimPod is a pod writing a line to /data/f of claim name and sleeping.
func (n *podNode) claimPod(name, claim string) *v1.Pod {
	pod := n.pod(name, "sh", "-c", "echo written-by-"+name+" > /data/f && echo written; sleep 3600")
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	return pod
}

// waitForHostFile waits until path on the host holds want.
func waitForHostFile(t *testing.T, path, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(path)
		last = strings.TrimSpace(string(b))
		return last == want, nil
	})
	if err != nil {
		t.Fatalf("host file %s: %q, want %q: %v", path, last, want, err)
	}
}

// testClaimHostPathPV: a pod's claim bound to a hostPath PV runs, and what
// its container writes is in the PV's directory on the host.
func testClaimHostPathPV(t *testing.T, n *podNode) {
	dir := t.TempDir()
	n.staticClaim(t, "host-data", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{
		Path: dir, Type: ptr.To(v1.HostPathDirectory)}}, nil)
	start := time.Now()
	pod := n.createPod(t, n.claimPod("host-claim", "host-data"))
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	t.Logf("hostPath PV claim: pod Ready %v after create", time.Since(start).Round(time.Millisecond))
	waitForHostFile(t, filepath.Join(dir, "f"), "written-by-host-claim")
}

// testClaimLocalPV: a pod's claim bound to a local PV (node affinity to
// this node) runs with the PV's path bind-mounted on the kubelet's
// kubernetes.io~local-volume/<pv> directory; what it writes is on the
// host; deleted, the pod leaves no mount and the data stays.
func testClaimLocalPV(t *testing.T, n *podNode) {
	dir := t.TempDir()
	pv := n.staticClaim(t, "local-data", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}},
		&v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{n.name}}}}}}})
	start := time.Now()
	pod := n.createPod(t, n.claimPod("local-claim", "local-data"))
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	t.Logf("local PV claim: pod Ready %v after create", time.Since(start).Round(time.Millisecond))
	waitForHostFile(t, filepath.Join(dir, "f"), "written-by-local-claim")
	mnt := filepath.Join(n.podDir(pod), "volumes", "kubernetes.io~local-volume", pv.Name)
	if !mountedUnder(t, mnt) {
		t.Errorf("nothing mounted on %s while the pod runs", mnt)
	}
	if err := env.cp.Client().CoreV1().Pods(n.ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		_, statErr := os.Stat(n.podDir(pod))
		return os.IsNotExist(statErr) && !mountedUnder(t, n.podDir(pod)), nil
	})
	if err != nil {
		t.Fatalf("pod directory %s still there (or mounted) after the pod was deleted: %v", n.podDir(pod), err)
	}
	waitForHostFile(t, filepath.Join(dir, "f"), "written-by-local-claim")
}

// testGenericEphemeralPV: a pod's generic ephemeral volume gets the claim
// <pod>-<volume> from the ephemeral-volume controller, owned by the pod and
// bound here to a hostPath PV reserved for it; the pod runs and writes to
// the PV's directory.
func testGenericEphemeralPV(t *testing.T, n *podNode) {
	dir := t.TempDir()
	pv := n.staticPV(t, "eph-claim-scratch", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{
		Path: dir, Type: ptr.To(v1.HostPathDirectory)}}, nil)
	pod := n.pod("eph-claim", "sh", "-c", "echo written-by-eph-claim > /data/f && echo written; sleep 3600")
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/data"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: claimSpec(pv)}}}}}
	start := time.Now()
	pod = n.createPod(t, pod)
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	t.Logf("generic ephemeral volume: pod Ready %v after create", time.Since(start).Round(time.Millisecond))
	waitForHostFile(t, filepath.Join(dir, "f"), "written-by-eph-claim")
}
