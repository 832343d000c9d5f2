package volume

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func claim(name, uid, pvName string, phase v1.PersistentVolumeClaimPhase) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pvName},
		Status:     v1.PersistentVolumeClaimStatus{Phase: phase},
	}
}

func boundPV(name, claimUID string, src v1.PersistentVolumeSource) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: src,
			ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "data", UID: types.UID(claimUID)},
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		},
	}
}

func claimVolume(name, claimName string, readOnly bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claimName, ReadOnly: readOnly}}}
}

// TestClaimWaitsUntilBound: a Pending claim is a processing error in the
// kubelet's words, retried on a short back-off without per-try events; once
// the claim is bound to a hostPath PV the PV's path mounts, read-only when
// the pod's claim says so.
func TestClaimWaitsUntilBound(t *testing.T) {
	f := newFixture(t, []runtime.Object{claim("data", "c1", "", v1.ClaimPending)}, nil)
	dir := t.TempDir()
	pod := testPod("u1", claimVolume("data", "data", true))
	_, err := f.m.MountPod(f.ctx, pod)
	want := "unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC ns/data: PVC is not bound"
	if err == nil || err.Error() != want {
		t.Fatalf("MountPod: %v, want %s", err, want)
	}
	if e := f.events(); len(e) != 0 {
		t.Errorf("events for a pending claim before the pod's timeout: %q", e)
	}
	// The claim binds.
	f.client.CoreV1().PersistentVolumes().Create(f.ctx, boundPV("pv-host", "c1", v1.PersistentVolumeSource{
		HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr(v1.HostPathDirectory)}}), metav1.CreateOptions{})
	f.client.CoreV1().PersistentVolumeClaims("ns").Update(f.ctx, claim("data", "c1", "pv-host", v1.ClaimBound), metav1.UpdateOptions{})
	// Until the back-off ends, the last error.
	if _, err := f.m.MountPod(f.ctx, pod); err == nil || !strings.Contains(err.Error(), "PVC is not bound") {
		t.Errorf("MountPod within the back-off: %v", err)
	}
	f.clock.Step(maxClaimRetryDelay)
	got, err := f.m.MountPod(f.ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if m := got["data"]; m.Path != dir || !m.ReadOnly || m.SELinuxRelabel {
		t.Errorf("mounted %+v, want the PV's path %s read-only", m, dir)
	}
	if pv := f.m.PodVolumes("u1"); len(pv) != 1 || pv[0].Plugin != PluginHostPath {
		t.Errorf("PodVolumes %+v", pv)
	}
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the hostPath PV's directory after the unmount: %v", err)
	}
}

// TestClaimErrors: the kubelet's refusals, each naming the claim or PV.
func TestClaimErrors(t *testing.T) {
	deleting := claim("deleting", "c2", "pv-2", v1.ClaimBound)
	deleting.DeletionTimestamp = &metav1.Time{}
	deleting.Finalizers = []string{"example.com/other"}
	hostSrc := v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/tmp"}}
	block := boundPV("pv-block", "c5", hostSrc)
	block.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
	nfs := boundPV("pv-nfs", "c6", v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}})
	objs := []runtime.Object{
		deleting,
		claim("elsewhere", "c3", "pv-3", v1.ClaimBound), boundPV("pv-3", "other", hostSrc),
		claim("nopv", "c4", "pv-4", v1.ClaimBound),
		claim("block", "c5", "pv-block", v1.ClaimBound), block,
		claim("nfs", "c6", "pv-nfs", v1.ClaimBound), nfs,
	}
	f := newFixture(t, objs, nil)
	for _, tc := range []struct {
		claim, want string
		summary     bool
	}{
		{"missing", `error processing PVC ns/missing: failed to fetch PVC from API server: persistentvolumeclaims "missing" not found`, false},
		{"deleting", "error processing PVC ns/deleting: PVC is being deleted", false},
		{"elsewhere", "error processing PVC ns/elsewhere: found PV object pv-3 but its pv.Spec.ClaimRef.UID other does not point to claim.UID c3", false},
		{"nopv", `error processing PVC ns/nopv: failed to fetch PV pv-4 from API server: persistentvolumes "pv-4" not found`, false},
		{"block", "volume v has volumeMode Block, but is specified in volumeMounts", false},
		{"nfs", `failed to get Plugin from volumeSpec for volume "v" err=no volume plugin matched: PersistentVolume pv-nfs: nfs volumes are not supported by this node agent`, true},
	} {
		pod := testPod(types.UID("u-"+tc.claim), claimVolume("v", tc.claim, false))
		_, err := f.m.MountPod(f.ctx, pod)
		if err == nil || !strings.HasSuffix(err.Error(), "failed to process volumes=[v]: "+tc.want) {
			t.Errorf("claim %s: %v, want ...%s", tc.claim, err, tc.want)
		}
		if e := f.events(); (len(e) == 1) != tc.summary {
			t.Errorf("claim %s: events %q, want a summary: %v", tc.claim, e, tc.summary)
		}
	}
	// A raw block device use of a Block PV is refused loudly, at once.
	pod := testPod("u-dev", claimVolume("v", "block", false))
	pod.Spec.Containers[0].VolumeMounts = nil
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "v", DevicePath: "/dev/xvda"}}
	_, err := f.m.MountPod(f.ctx, pod)
	want := "volume v (PV pv-block) has volumeMode Block: raw block volumes (volumeDevices) are not supported by this node agent"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("block device: %v, want ...%s", err, want)
	}
	if e := f.events(); len(e) != 1 || !strings.Contains(e[0], want) {
		t.Errorf("block device events %q", e)
	}
}

// TestGenericEphemeralVolume: the claim <pod>-<volume> is used only when
// the pod owns it.
func TestGenericEphemeralVolume(t *testing.T) {
	dir := t.TempDir()
	pvc := claim("web-scratch", "c1", "pv-eph", v1.ClaimBound)
	pv := boundPV("pv-eph", "c1", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}})
	f := newFixture(t, []runtime.Object{pvc, pv}, nil)
	pod := testPod("u1", v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{}}}})
	_, err := f.m.MountPod(f.ctx, pod)
	want := "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("MountPod: %v, want ...%s", err, want)
	}
	pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "u1", Controller: ptr(true)}}
	f.client.CoreV1().PersistentVolumeClaims("ns").Update(f.ctx, pvc, metav1.UpdateOptions{})
	f.clock.Step(maxClaimRetryDelay)
	got, err := f.m.MountPod(f.ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got["scratch"].Path != dir {
		t.Errorf("mounted %+v, want %s", got["scratch"], dir)
	}
}

// TestLocalPersistentVolume: a local PV mounts only on a node its node
// affinity selects (a FailedMount in the kubelet's words otherwise), as a
// bind mount of its path on pods/<uid>/volumes/kubernetes.io~local-volume/
// <pv> with the PV's mount options; the teardown unmounts it, removes the
// empty directory and leaves the data.
func TestLocalPersistentVolume(t *testing.T) {
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pv := boundPV("pv-local", "c1", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: data}})
	pv.Spec.MountOptions = []string{"noexec"}
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{"node-1"}}}}}}}
	labels := map[string]string{"kubernetes.io/hostname": "node-2"}
	f := newFixture(t, []runtime.Object{claim("data", "c1", "pv-local", v1.ClaimBound), pv},
		func(o *Options) { o.NodeLabels = func() map[string]string { return labels } })
	pod := testPod("u1", claimVolume("data", "data", false))
	_, err := f.m.MountPod(f.ctx, pod)
	want := `MountVolume.NodeAffinity check failed for volume "pv-local" : no matching NodeSelectorTerms`
	if err == nil || !strings.HasSuffix(err.Error(), "failed to process volumes=[]: "+want) {
		t.Fatalf("MountPod on another node: %v, want ...%s", err, want)
	}
	if e := f.events(); len(e) != 1 || e[0] != "Warning FailedMount "+want {
		t.Errorf("events %q", e)
	}
	labels = map[string]string{"kubernetes.io/hostname": "node-1"}
	f.clock.Step(maxRetryDelay)
	got, err := f.m.MountPod(f.ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	path := f.volDir("u1", PluginLocal, "pv-local")
	if m := got["data"]; m.Path != path || m.ReadOnly || !m.SELinuxRelabel {
		t.Errorf("mounted %+v, want %s", m, path)
	}
	mps, _ := f.mounter.List()
	if len(mps) != 1 || mps[0].Device != data || mps[0].Path != path || !slices.Equal(mps[0].Opts, []string{"bind", "noexec"}) {
		t.Errorf("mounts %+v, want %s bind-mounted on %s with noexec", mps, data, path)
	}
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if mps, _ := f.mounter.List(); len(mps) != 0 {
		t.Errorf("mounts after the unmount: %+v", mps)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("volume directory after the unmount: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "keep")); err != nil {
		t.Errorf("the local PV's data after the unmount: %v", err)
	}
}
