package volume

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestImageVolume: an image volume is the kubernetes.io/image plugin's, as
// the kubelet's: MountPod hands it over read-only without a host path and
// leaves nothing on the node; the runtime mounts the image.
func TestImageVolume(t *testing.T) {
	f := newFixture(t, nil, nil)
	pod := testPod("img", v1.Volume{Name: "tools", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "busybox", PullPolicy: v1.PullIfNotPresent}}})
	got, err := f.m.MountPod(f.ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := got["tools"]; !ok || m != (Mounted{ReadOnly: true}) {
		t.Errorf("image volume mounted as %+v (present %v), want read-only without a path", m, ok)
	}
	if _, err := os.Stat(filepath.Join(f.m.podsDir, "img", "volumes", "kubernetes.io~image")); !os.IsNotExist(err) {
		t.Errorf("an image volume left a directory on the node: %v", err)
	}
	if events := f.events(); len(events) != 0 {
		t.Errorf("events %q for an image volume", events)
	}
	if err := f.m.UnmountPod(f.ctx, "img"); err != nil {
		t.Fatal(err)
	}
}
