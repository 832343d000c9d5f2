package runtime_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

func imageVolumePod(name, ref string, policy v1.PullPolicy, mounts ...v1.VolumeMount) *v1.Pod {
	c := ctr("app", "sleep", "3600")
	c.VolumeMounts = mounts
	pod := newPod(name, c)
	pod.Spec.Volumes = []v1.Volume{{Name: "tools", VolumeSource: v1.VolumeSource{
		Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}}
	return pod
}

// TestImageVolumeMounts: an image volume's image is pulled with the
// volume's pullPolicy and the pod's pull secrets, and each container
// mounting it gets a CRI mount of the pulled image, read-only, its subPath
// the image_sub_path, as the kubelet's.
func TestImageVolumeMounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) { o.Registerer = reg })
	img, err := fakecri.NewImage("registry.example.com/team/tools:1", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	id := h.cri.AddPullable(img)
	must(t, h.cri.RequireAuth("registry.example.com/team/tools", "alice", "s3cret"))
	secret := v1.Secret{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(
		`{"auths":{"registry.example.com":{"username":"alice","password":"s3cret"}}}`)}}
	pod := imageVolumePod("imgvol", "registry.example.com/team/tools:1", v1.PullIfNotPresent,
		v1.VolumeMount{Name: "tools", MountPath: "/tools"},
		v1.VolumeMount{Name: "tools", MountPath: "/bin-only", SubPath: "bin"})

	res := h.sync(pod, nil, secret)
	if res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("sync: %+v", res)
	}
	if n := h.cri.Calls("PullImage"); n != 1 {
		t.Errorf("PullImage called %d times, want 1 (the volume's image)", n)
	}
	mounts := map[string]bool{}
	for _, m := range h.cri.ContainerConfig(h.container(pod, "app").ID).Mounts {
		if m.Image == nil {
			continue
		}
		mounts[m.ContainerPath] = true
		if m.Image.Image != id || m.Image.UserSpecifiedImage != "registry.example.com/team/tools:1" || !m.Readonly || m.HostPath != "" {
			t.Errorf("image mount %s = %v, want image %s read-only without a host path", m.ContainerPath, m, id)
		}
		if want := map[string]string{"/tools": "", "/bin-only": "bin"}[m.ContainerPath]; m.ImageSubPath != want {
			t.Errorf("image mount %s: image_sub_path %q, want %q", m.ContainerPath, m.ImageSubPath, want)
		}
	}
	if !mounts["/tools"] || !mounts["/bin-only"] {
		t.Errorf("image mounts %v, want /tools and /bin-only", mounts)
	}
	wantEvents(t, h.events(), `Normal Pulling Pulling image "registry.example.com/team/tools:1"`,
		`Normal Pulled Successfully pulled image "registry.example.com/team/tools:1"`, "Normal Created", "Normal Started")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kubelet_image_volume_mounted_succeed_total Number of successful image volume mounts.
# TYPE kubelet_image_volume_mounted_succeed_total counter
kubelet_image_volume_mounted_succeed_total 2
# HELP kubelet_image_volume_requested_total Number of requested image volumes.
# TYPE kubelet_image_volume_requested_total counter
kubelet_image_volume_requested_total 1
`), "kubelet_image_volume_requested_total", "kubelet_image_volume_mounted_succeed_total"); err != nil {
		t.Error(err)
	}

	// pullPolicy Never with the image absent: the container waits with
	// ErrImageNeverPull and nothing is pulled.
	never := imageVolumePod("never", "registry.example.com/team/absent:1", v1.PullNever, v1.VolumeMount{Name: "tools", MountPath: "/tools"})
	res = h.sync(never, nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrImageNeverPull) {
		t.Errorf("image volume with pullPolicy Never, absent: %+v", res.Waiting)
	}
	if n := h.cri.Calls("PullImage"); n != 1 {
		t.Errorf("PullImage called %d times after a Never volume, want 1", n)
	}

	// An absolute or escaping subPath fails the container as the kubelet's.
	bad := imageVolumePod("bad", "busybox", v1.PullIfNotPresent, v1.VolumeMount{Name: "tools", MountPath: "/t", SubPath: "../x"})
	if w := h.sync(bad, nil).Waiting["app"]; !errors.Is(w.Reason, podstate.ErrCreateContainerConfig) ||
		w.Message != "unable to provision SubPath `../x`: must not contain '..'" {
		t.Errorf("image volume subPath ../x: %+v", w)
	}
}

// TestImageVolumePullFailure: a failed pull of an image volume's image
// keeps the containers mounting it waiting with ErrImagePull, then
// ImagePullBackOff, with the Failed event on the container, as the
// kubelet's; a container not mounting it starts.
func TestImageVolumePullFailure(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	c := ctr("app", "sleep", "3600")
	c.VolumeMounts = []v1.VolumeMount{{Name: "tools", MountPath: "/tools"}}
	other := ctr("other", "sleep", "3600")
	pod := newPod("pullfail", c, other)
	pod.Spec.Volumes = []v1.Volume{{Name: "tools", VolumeSource: v1.VolumeSource{
		Image: &v1.ImageVolumeSource{Reference: "registry.example.com/nowhere:1", PullPolicy: v1.PullAlways}}}}

	res := h.sync(pod, nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrImagePull) || !strings.Contains(w.Message, "not found") {
		t.Fatalf("first sync: %+v", res.Waiting)
	}
	if res.RetryAt.IsZero() {
		t.Error("a failed image volume pull asks for no retry at the back-off's end")
	}
	if c := h.container(pod, "other"); c.State != podstate.ContainerStateRunning {
		t.Errorf("container other, mounting no image volume, is %s", c.State)
	}
	wantEvents(t, h.events(), `Normal Pulling Pulling image "registry.example.com/nowhere:1"`,
		`Warning Failed Failed to pull image "registry.example.com/nowhere:1"`, "Warning Failed Error: ErrImagePull")
	res = h.sync(pod, nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrImagePullBackOff) {
		t.Fatalf("second sync: %+v", res.Waiting)
	}
	wantEvents(t, h.events(), `Normal BackOff Back-off pulling image "registry.example.com/nowhere:1"`, "Warning Failed Error: ImagePullBackOff")
}

// TestImageVolumeRuntimeRefuses: a runtime that cannot mount the image
// fails CreateContainer; the container waits with CreateContainerError and
// the runtime's message, and the mount counts as failed.
func TestImageVolumeRuntimeRefuses(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) { o.Registerer = reg })
	must(t, h.cri.SetError("CreateContainer", status.Error(codes.Unknown, "ImageVolumeMountFailed: failed to mount image busybox")))
	pod := imageVolumePod("refused", "busybox", v1.PullIfNotPresent, v1.VolumeMount{Name: "tools", MountPath: "/tools"})
	res := h.sync(pod, nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrCreateContainer) || w.Message != "ImageVolumeMountFailed: failed to mount image busybox" {
		t.Fatalf("runtime refusing the image mount: %+v", res.Waiting)
	}
	if got := counterValue(t, reg, "kubelet_image_volume_mounted_errors_total"); got != 1 {
		t.Errorf("kubelet_image_volume_mounted_errors_total = %v, want 1", got)
	}
}

// TestImageGCKeepsImageVolumes: an image a container mounts as an image
// volume is in use, as the kubelet's handleImageVolumes: neither image
// garbage collection nor DeleteUnusedImages removes it.
func TestImageGCKeepsImageVolumes(t *testing.T) {
	h := newImageGCHarness(t, nil)
	h.add("tools:1", 10, false)
	h.add("unused:1", 10, false)
	pod := imageVolumePod("gc", "tools:1", v1.PullIfNotPresent, v1.VolumeMount{Name: "tools", MountPath: "/tools"})
	if res := h.sync(pod, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	// Seen once, then past the minimum age.
	if err := h.gc.DeleteUnusedImages(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.clk.Step(3 * time.Minute)
	if err := h.gc.DeleteUnusedImages(h.ctx); err != nil {
		t.Fatal(err)
	}
	refs := h.refs()
	if !slices.Contains(refs, "docker.io/library/tools:1") || slices.Contains(refs, "docker.io/library/unused:1") {
		t.Errorf("images after DeleteUnusedImages %q: want tools:1 (an image volume) kept, unused:1 removed", refs)
	}
}
