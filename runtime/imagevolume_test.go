package runtime_test

import (
	"context"
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

// TestImageGCAsksNoContainerStatus: the image GC knows the images the
// containers mount from the pod manager, which recorded them when it
// created the containers (a shared runtime.ImageMounts): a collection asks
// the runtime for no container's status. An ImageGC started afresh (the
// agent restarted) asks for each container's status once, on its first
// collection, and never again; it keeps the image volumes either way.
func TestImageGCAsksNoContainerStatus(t *testing.T) {
	mounts := runtime.NewImageMounts()
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) { o.ImageMounts = mounts })
	for _, ref := range []string{"tools:1", "unused:1", "unused:2"} {
		img, err := fakecri.NewImage(ref, 10<<20)
		if err != nil {
			t.Fatal(err)
		}
		h.cri.AddImage(img)
	}
	for _, pod := range []*v1.Pod{
		imageVolumePod("a", "tools:1", v1.PullIfNotPresent, v1.VolumeMount{Name: "tools", MountPath: "/tools"}),
		newPod("b", ctr("app", "sleep", "3600")),
	} {
		if res := h.sync(pod, nil); res.Err != nil || len(res.Waiting) != 0 {
			t.Fatalf("sync %s: %+v", pod.Name, res)
		}
	}
	newGC := func(m *runtime.ImageMounts) *runtime.ImageGC {
		gc, err := runtime.NewImageGC(runtime.ImageGCOptions{Runtime: h.client.RuntimeService(), Images: h.client.ImageService(),
			FsStats: func(context.Context) (uint64, uint64, error) { return 100 << 20, 50 << 20, nil }, Clock: h.clk, ImageMounts: m})
		if err != nil {
			t.Fatal(err)
		}
		return gc
	}
	collect := func(gc *runtime.ImageGC, step time.Duration) int {
		t.Helper()
		before := h.cri.Calls("ContainerStatus")
		h.clk.Step(step)
		if err := gc.DeleteUnusedImages(h.ctx); err != nil {
			t.Fatal(err)
		}
		return h.cri.Calls("ContainerStatus") - before
	}
	kept := func(what string) {
		t.Helper()
		var refs []string
		for _, img := range h.cri.Images() {
			refs = append(refs, img.GetRepoTags()...)
		}
		if !slices.Contains(refs, "docker.io/library/tools:1") {
			t.Errorf("%s: images %q, the image volume tools:1 removed", what, refs)
		}
	}

	gc := newGC(mounts)
	for i := range 3 {
		if n := collect(gc, 3*time.Minute); n != 0 {
			t.Errorf("collection %d with the pod manager's mounts: %d ContainerStatus calls, want 0", i, n)
		}
	}
	kept("the pod manager's mounts")

	// The agent restarted: nothing recorded, the containers are the
	// runtime's.
	containers, err := h.client.RuntimeService().ListContainers(h.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	gc = newGC(runtime.NewImageMounts())
	if n, want := collect(gc, 3*time.Minute), len(containers); n != want || want < 2 {
		t.Errorf("first collection after a restart: %d ContainerStatus calls, want %d (one per container)", n, want)
	}
	for i := range 2 {
		if n := collect(gc, 3*time.Minute); n != 0 {
			t.Errorf("collection %d after a restart: %d ContainerStatus calls, want 0", i+2, n)
		}
	}
	kept("after a restart")
}
