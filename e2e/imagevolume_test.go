package e2e

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/internal/testenv"
)

// TestImageVolumeOnContainerd2: a pod with an image volume (the locally
// built busybox image, present on the node) runs on containerd 2, whose
// CRI mounts images: the container reads a file of the image through the
// whole-image mount and through a subPath mount, and cannot write to
// either (image volumes are read-only).
func TestImageVolumeOnContainerd2(t *testing.T) {
	requireContainerd(t)
	if err := cluster.CheckContainerdSeries(cluster.ContainerdSeries2); err != nil {
		testenv.Unavailable(t, "containerd 2: %v", err)
	}
	n := newContainerdPodNodeWith(t, "ctr-imagevol", nodeOptions{containerdSeries: cluster.ContainerdSeries2})
	pod := n.pod("imagevol", "sh", "-c",
		"cat /vol/etc/group; cat /etc-vol/passwd; "+
			"if touch /vol/x 2>/dev/null || touch /etc-vol/x 2>/dev/null; then echo writable; exit 1; fi; echo done")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Volumes = []v1.Volume{{Name: "img", VolumeSource: v1.VolumeSource{
		Image: &v1.ImageVolumeSource{Reference: cluster.BusyboxImage, PullPolicy: v1.PullIfNotPresent}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "img", MountPath: "/vol"},
		{Name: "img", MountPath: "/etc-vol", SubPath: "etc"},
	}
	n.createPod(t, pod)
	got := waitForPod(t, n.ns, pod.Name, "to succeed", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	logs, err := env.cp.Client().CoreV1().Pods(n.ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "main"}).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodSucceeded {
		t.Fatalf("pod with an image volume: phase %s, logs %q\n%s", got.Status.Phase, logs, describePod(t, got))
	}
	for _, want := range []string{"nogroup:x:65534:", "nobody:x:65534:65534:", "done"} {
		if !strings.Contains(string(logs), want) {
			t.Errorf("logs %q lack %q (the image's /etc/group through /vol, /etc/passwd through the subPath /etc-vol)", logs, want)
		}
	}
}
