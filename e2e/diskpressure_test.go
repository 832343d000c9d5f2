package e2e

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// The disk pressure node's root filesystem and thresholds: a tmpfs of
// diskPressureFsMiB, evictionHard nodefs.available at half of it, and a
// fill that leaves a quarter free. Nothing but the node's own files is on
// that tmpfs (a few hundred KiB), so both sides of the threshold have a
// quarter of it, 16 MiB, to spare.
const (
	diskPressureFsMiB        = 64
	diskPressureThresholdMiB = diskPressureFsMiB / 2
	diskPressureFillMiB      = diskPressureFsMiB * 3 / 4
	// diskPressureTransitionPeriod is the node's
	// evictionPressureTransitionPeriod: short, so the test sees the
	// condition clear.
	diskPressureTransitionPeriod = 20 * time.Second
)

// TestDiskPressureOnContainerd: the eviction manager's nodefs.available
// signal as the kubelet's, on a containerd node, in the shape of
// TestPIDPressureOnContainerd. The node's root directory (--root-dir, its
// nodefs: the kubelet measures the filesystem it is on) is a tmpfs of its
// own: the host's disk, which every test shares and whose free space moves
// with them, is neither measured nor written to. evictionHard
// nodefs.available sits at half of it; a BestEffort pod that writes three
// quarters of it into an emptyDir crosses it. Under that pressure the node
// turns DiskPressure=True with the kubelet's reason and message and the
// disk-pressure taint, and the pod that wrote is evicted (Failed, Evicted,
// the kubelet's message for ephemeral-storage) — not the pod beside it,
// which uses less than the ephemeral storage it requests (so the ranking
// does not hang on when the emptyDir was last measured). Its eviction
// removes its emptyDir and lifts the pressure: the condition clears once
// the transition period has passed, and the taint goes.
//
// The kubelet reclaims node-level resources before it evicts (dead
// containers, unused images); this test must not delete an image another
// test needs. It cannot: the node has a containerd of its own (its own
// root and content store, the images imported into it when it starts, see
// newContainerdPodNodeWith), so nothing it deletes is another node's; and
// with nodefs on the tmpfs and the images on the host's disk the image
// filesystem is dedicated, where the kubelet's nodefs signal reclaims
// nothing at all (buildSignalToNodeReclaimFuncs). The test checks that the
// node's containerd still holds every image it held before the pressure.
func TestDiskPressureOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	const name = "ctr-disk"
	rootDir := t.TempDir()
	if err := syscall.Mount("tmpfs", rootDir, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0755", diskPressureFsMiB)); err != nil {
		t.Fatalf("mount a tmpfs for the node's root directory: %v", err)
	}
	// Registered before the node: runs once the agent stopped and the
	// containerd removed the pods (the secrets' tmpfs mounts under it too).
	t.Cleanup(func() {
		if err := cluster.UnmountUnder(rootDir); err != nil {
			t.Error(err)
		}
	})
	threshold := fmt.Sprintf("%dMi", diskPressureThresholdMiB)
	n := newContainerdPodNodeWith(t, name, nodeOptions{
		updateFrequency: 2 * time.Second,
		extraArgs:       []string{"--root-dir=" + rootDir},
		kubeletConfig: map[string]any{
			"evictionHard": map[string]string{
				"memory.available":   "100Mi",
				"nodefs.available":   threshold,
				"nodefs.inodesFree":  "1%",
				"imagefs.available":  "1%",
				"imagefs.inodesFree": "1%",
			},
			"evictionPressureTransitionPeriod": diskPressureTransitionPeriod.String(),
		},
	})
	t.Logf("node root directory: a %d MiB tmpfs; evictionHard nodefs.available<%s; fill %d MiB", diskPressureFsMiB, threshold, diskPressureFillMiB)
	images := dialCRI(t, n.containerd).Images
	imagesBefore := imageRefs(t, images)

	diskPressure.wait(t, n.name, false, "", readyTimeout)

	few := n.pod("few", "sleep", "3600")
	few.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Mi")}
	few = n.createPod(t, few)
	waitForPod(t, few.Namespace, few.Name, "Running and Ready", isPodReady)
	fill := n.pod("fill", "sh", "-c",
		fmt.Sprintf(`dd if=/dev/zero of=/data/fill bs=1048576 count=%d && echo filled && exec sleep 3600`, diskPressureFillMiB))
	fill.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	fill.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	fill = n.createPod(t, fill)
	diskPressure.wait(t, n.name, true, "", podTimeout)
	pressureAt := time.Now()

	got := waitForPod(t, fill.Namespace, fill.Name, "evicted", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	wantMessage := "The node was low on resource: ephemeral-storage. Threshold quantity: " + threshold + ", available: "
	if got.Status.Reason != "Evicted" || !strings.HasPrefix(got.Status.Message, wantMessage) {
		t.Errorf("pod fill: reason %q message %q, want Evicted, %s…\n%s", got.Status.Reason, got.Status.Message, wantMessage, describePod(t, got))
	}
	t.Logf("pod fill evicted %s after the pressure was seen: %s", time.Since(pressureAt).Round(100*time.Millisecond), got.Status.Message)

	// Its emptyDir gone, the pressure lifts: the condition clears after
	// the transition period, the taint goes, and the other pod never
	// stopped.
	diskPressure.wait(t, n.name, false, "after the eviction", podTimeout)
	t.Logf("DiskPressure=False and untainted %s after the pressure was seen (transition period %s)",
		time.Since(pressureAt).Round(100*time.Millisecond), diskPressureTransitionPeriod)
	checkNotEvicted(t, few)
	imagesAfter := imageRefs(t, images)
	for _, ref := range imagesBefore {
		if !slices.Contains(imagesAfter, ref) {
			t.Errorf("image %s was deleted from the node's containerd under disk pressure", ref)
		}
	}
}

// imageRefs lists the image references (tags, else IDs) a runtime holds.
func imageRefs(t *testing.T, images runtimeapi.ImageServiceClient) []string {
	t.Helper()
	resp, err := images.ListImages(t.Context(), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatalf("CRI ListImages: %v", err)
	}
	var refs []string
	for _, img := range resp.Images {
		if len(img.RepoTags) == 0 {
			refs = append(refs, img.Id)
		}
		refs = append(refs, img.RepoTags...)
	}
	return refs
}
