package volume_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/mount-utils"

	"github.com/nodekit/nodekit/volume"
)

// greetingPlugin serves inline CSI volumes of the driver
// "greeting.example.com" without a CSI driver: each volume holds one file,
// written with the kubelet's atomic layout.
type greetingPlugin struct{}

func (greetingPlugin) Name() string { return "example.com/greeting" }

func (greetingPlugin) CanSupport(vol *v1.Volume) bool {
	return vol.CSI != nil && vol.CSI.Driver == "greeting.example.com"
}

func (greetingPlugin) SetUp(ctx context.Context, v *volume.VolumeContext) (volume.Mounted, error) {
	if err := os.MkdirAll(v.Path, 0o755); err != nil {
		return volume.Mounted{}, err
	}
	w, err := volume.NewAtomicWriter(v.Path, "greeting volume "+v.Name)
	if err != nil {
		return volume.Mounted{}, err
	}
	msg := "hello from " + v.Pod.Name + "\n"
	if err := w.Write(ctx, map[string]volume.FileProjection{"greeting": {Data: []byte(msg), Mode: 0o444}}, nil); err != nil {
		return volume.Mounted{}, err
	}
	return volume.Mounted{Path: v.Path, ReadOnly: true}, nil
}

func (greetingPlugin) TearDown(_ context.Context, v *volume.VolumeContext) error {
	return os.RemoveAll(v.Path)
}

// An embedder adds a volume plugin to the "volume_plugins" value group; the
// Manager then mounts the volumes it supports like the built-in kinds.
func ExamplePlugin() {
	root, _ := os.MkdirTemp("", "volume-example")
	defer os.RemoveAll(root)

	var m *volume.Manager
	app := fx.New(
		fx.NopLogger,
		// A fake mounter: this example mounts nothing for real.
		fx.Supply(volume.Options{RootDir: root, Mounter: mount.NewFakeMounter(nil)}),
		volume.AsPlugin(greetingPlugin{}),
		volume.Module,
		fx.Populate(&m),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer app.Stop(ctx)

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "1234"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "hello", MountPath: "/etc/hello"}}}},
			Volumes: []v1.Volume{{Name: "hello", VolumeSource: v1.VolumeSource{
				CSI: &v1.CSIVolumeSource{Driver: "greeting.example.com"},
			}}},
		},
	}
	mounted, err := m.MountPod(ctx, pod)
	if err != nil {
		fmt.Println(err)
		return
	}
	rel, _ := filepath.Rel(root, mounted["hello"].Path)
	data, _ := os.ReadFile(filepath.Join(mounted["hello"].Path, "greeting"))
	fmt.Println(rel, mounted["hello"].ReadOnly)
	fmt.Print(string(data))
	fmt.Println(m.UnmountPod(ctx, pod.UID))
	// Output:
	// pods/1234/volumes/example.com~greeting/hello true
	// hello from web
	// <nil>
}
