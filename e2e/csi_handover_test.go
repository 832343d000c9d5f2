package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// TestCSIHandoverFromKubelet hands a node with an attached CSI volume
// mounted by the upstream kubelet (v1.37.2) over to a nodekit agent: the
// e2e CSI driver registers with the kubelet through the shared
// plugins_registry under a name whose CSIDriver requires attachment; the
// test plays the external attacher on the attach/detach controller's
// VolumeAttachment; the kubelet stages and publishes the claim's volume
// for a pod (with its vol_data.json files) and is stopped. The agent
// started on the same root directory registers the driver again, finds the
// volume on disk and adopts it: every node status from the handover on
// keeps the volume in volumesInUse (so the controller cannot detach it),
// the pod keeps running, its container untouched, and the driver is asked
// to stage or publish nothing. Deleting the pod then unpublishes and
// unstages it through the driver, leaves no mount, staging path or pod
// directory, and the controller detaches the volume; the data stays with
// it.
func TestCSIHandoverFromKubelet(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	const name = "csihov"
	ns := name + "-" + fmt.Sprint(os.Getpid())
	begin := time.Now()
	k := startKubeletNode(t, name, ns, "")
	d := startNamedCSIDriver(t, k.kubelet.Dir, name, e2eAttachCSIDriver, 0)
	waitRegistration(t, d)
	ensureNamedCSIDriverObject(t, e2eAttachCSIDriver, true)
	newNamespace(t, ns)
	// The pod helpers need only the node's name, directory and namespace.
	n := &podNode{testNode: &testNode{name: name, agent: k.kubelet}, ns: ns}
	pv := n.csiClaim(t, "data", e2eAttachCSIDriver, "static-data", "1Gi", nil)
	handle := pv.Spec.CSI.VolumeHandle
	unique := v1.UniqueVolumeName("kubernetes.io/csi/" + e2eAttachCSIDriver + "^" + handle)
	pod := n.createPod(t, n.claimPod("data", "data"))
	va := waitForAttachment(t, pv, name)
	markAttached(t, va.Name, nil)
	before := waitPods(t, ns, []string{pod.Name}, "Running and Ready under the kubelet", podTimeout, isPodReady)
	waitForHostFileText(t, filepath.Join(d.VolumeDir(handle), "f"), "written-by-data\n")

	root := filepath.Join(k.kubelet.Dir, "root")
	podDir := filepath.Join(root, "pods", string(before[pod.Name].UID))
	volDir := filepath.Join(podDir, "volumes", "kubernetes.io~csi", pv.Name)
	sum := sha256.Sum256([]byte(handle))
	staging := filepath.Join(root, "plugins", "kubernetes.io", "csi", e2eAttachCSIDriver, hex.EncodeToString(sum[:]))
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
	node := waitForNode(t, name, "the volume in volumesInUse and volumesAttached under the kubelet", time.Minute, func(n *v1.Node) bool {
		return slices.Contains(n.Status.VolumesInUse, unique) &&
			slices.ContainsFunc(n.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == unique })
	})
	stopWatch := watchVolumeInUse(t, name, node.ResourceVersion, unique)

	agent, agentStart := k.handOver(t)
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
	byAgent := 0
	for _, n := range stopWatch() {
		if readyCondition(n).LastHeartbeatTime.Time.After(agentStart.Add(-time.Second)) {
			byAgent++
		}
	}
	if byAgent == 0 {
		t.Error("no node status written by the agent was seen: volumesInUse across the handover is unchecked")
	}

	// The agent owns the volume: the pod's deletion unpublishes and
	// unstages it and leaves nothing behind; then it is detached.
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
	waitForDetach(t, va.Name, name, unique)
	waitForHostFileText(t, filepath.Join(d.VolumeDir(handle), "f"), "written-by-data\n")
	t.Logf("CSI handover proof in %s", time.Since(begin).Round(100*time.Millisecond))
}

// watchVolumeInUse watches the Node from resourceVersion on and fails the
// test for every version whose status.volumesInUse lacks unique. The
// returned func stops the watch and returns the versions it saw.
func watchVolumeInUse(t *testing.T, node, resourceVersion string, unique v1.UniqueVolumeName) func() []*v1.Node {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	nodes := env.cp.Client().CoreV1().Nodes()
	w, err := watchtools.NewRetryWatcherWithContext(ctx, resourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
			return nodes.Watch(ctx, o)
		},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var seen []*v1.Node
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*v1.Node)
			if !ok {
				continue
			}
			seen = append(seen, n)
			if !slices.Contains(n.Status.VolumesInUse, unique) {
				t.Errorf("node %s version %s reports volumesInUse %v without the mounted volume %s", node, n.ResourceVersion, n.Status.VolumesInUse, unique)
			}
		}
	}()
	return func() []*v1.Node {
		w.Stop()
		cancel()
		<-done
		return seen
	}
}
