package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCSIHandoverFromKubelet hands a node with a CSI volume mounted by the
// upstream kubelet (v1.37.2) over to a nodekit agent: the e2e CSI driver
// registers with the kubelet through the shared plugins_registry, the
// kubelet stages and publishes a claim's volume for a pod (with its
// vol_data.json files), and is stopped; the agent started on the same root
// directory registers the driver again, finds the volume on disk and
// adopts it: the pod keeps running, its container untouched, and the
// driver is asked to stage or publish nothing. Deleting the pod then
// unpublishes and unstages it through the driver and leaves no mount,
// staging path or pod directory; the data stays with the volume.
func TestCSIHandoverFromKubelet(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	const name = "csihov"
	ns := name + "-" + fmt.Sprint(os.Getpid())
	begin := time.Now()
	k := startKubeletNode(t, name, ns)
	d := startNamedCSIDriver(t, k.kubelet.Dir, name, e2eCSIDriver, 0)
	waitRegistration(t, d)
	ensureCSIDriverObject(t)
	newNamespace(t, ns)
	// The pod helpers need only the node's name, directory and namespace.
	n := &podNode{testNode: &testNode{name: name, agent: k.kubelet}, ns: ns}
	pv := n.csiClaim(t, "data", e2eCSIDriver, "static-data", "1Gi", nil)
	handle := pv.Spec.CSI.VolumeHandle
	pod := n.createPod(t, n.claimPod("data", "data"))
	before := waitPods(t, ns, []string{pod.Name}, "Running and Ready under the kubelet", podTimeout, isPodReady)
	waitForHostFileText(t, filepath.Join(d.VolumeDir(handle), "f"), "written-by-data\n")

	root := filepath.Join(k.kubelet.Dir, "root")
	podDir := filepath.Join(root, "pods", string(before[pod.Name].UID))
	volDir := filepath.Join(podDir, "volumes", "kubernetes.io~csi", pv.Name)
	sum := sha256.Sum256([]byte(handle))
	staging := filepath.Join(root, "plugins", "kubernetes.io", "csi", e2eCSIDriver, hex.EncodeToString(sum[:]))
	for _, f := range []string{filepath.Join(volDir, "vol_data.json"), filepath.Join(staging, "vol_data.json")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the kubelet's %v", err)
		}
	}
	mounts := func() []string {
		return append(mountsUnder(t, podDir), mountsUnder(t, staging)...)
	}
	mountedBefore := mounts()
	if !slices.Contains(mountedBefore, filepath.Join(volDir, "mount")) || !slices.Contains(mountedBefore, filepath.Join(staging, "globalmount")) {
		t.Fatalf("the kubelet's mounts %v lack the publish target or the staging path", mountedBefore)
	}
	stages, publishes := d.Calls("NodeStageVolume"), d.Calls("NodePublishVolume")
	snap := snapshotContainers(before)

	agent, _ := k.handOver(t)
	waitRegistration(t, d)
	// A pod created now runs only if the agent syncs pods: by then it has
	// synced the adopted one.
	fresh := n.createPod(t, n.pod("after", "sleep", "3600"))
	waitPods(t, ns, []string{fresh.Name}, "Running and Ready under the agent", podTimeout, isPodReady)
	after := waitPods(t, ns, []string{pod.Name}, "still Running and Ready", podTimeout, isPodReady)
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("containers changed by the handover:\n  %s", strings.Join(changed, "\n  "))
	}
	if s, p := d.Calls("NodeStageVolume"), d.Calls("NodePublishVolume"); s != stages || p != publishes {
		t.Errorf("after the handover the driver was asked to stage %d and publish %d more times, want 0", s-stages, p-publishes)
	}
	if now := mounts(); !slices.Equal(now, mountedBefore) {
		t.Errorf("mounts after the handover %v, were %v", now, mountedBefore)
	}
	m, err := agent.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("kubelet_started_containers_total", nil); got != 1 {
		t.Errorf("the agent started %v containers, want 1 (the new pod's)", got)
	}

	// The agent owns the volume: the pod's deletion unpublishes and
	// unstages it and leaves nothing behind.
	if err := env.cp.Client().CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsGone(t, ns, []string{pod.Name}, podTimeout)
	waitDriverCalls(t, d, "NodeUnpublishVolume", 1)
	waitDriverCalls(t, d, "NodeUnstageVolume", 1)
	waitForCondition(t, "no mount, staging path or directory left of the pod", podTimeout, func() (bool, error) {
		if len(mounts()) > 0 {
			return false, nil
		}
		for _, dir := range []string{podDir, staging} {
			if _, err := os.Stat(dir); err == nil {
				return false, nil
			}
		}
		return true, nil
	})
	waitForHostFileText(t, filepath.Join(d.VolumeDir(handle), "f"), "written-by-data\n")
	t.Logf("CSI handover proof in %s", time.Since(begin).Round(100*time.Millisecond))
}
