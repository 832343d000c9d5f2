package volume

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// BenchmarkMountPodNoChange measures a sync of a pod whose volumes are set
// up: what every pod sync pays.
func BenchmarkMountPodNoChange(b *testing.B) {
	f := newFixture(b, []runtime.Object{configMap("cfg", map[string]string{"k": "v"}), secret("s", map[string]string{"k": "v"})}, nil)
	pod := testPod("u1",
		cmVolume("c", "cfg", nil),
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
		v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "d", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
		v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/"}}},
	)
	if _, err := f.m.MountPod(f.ctx, pod); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.m.MountPod(f.ctx, pod); err != nil {
			b.Fatal(err)
		}
	}
}
