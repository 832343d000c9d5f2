package cgroupdriver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/cgroupdriver"
)

// fakeCgroupV1 makes a directory tree shaped like a cgroup v1
// /sys/fs/cgroup: one directory per hierarchy.
func fakeCgroupV1() string {
	root, err := os.MkdirTemp("", "cgroupfs")
	if err != nil {
		panic(err)
	}
	for _, h := range []string{"cpu", "memory", "pids"} {
		if err := os.Mkdir(filepath.Join(root, h), 0o755); err != nil {
			panic(err)
		}
	}
	return root
}

func burstablePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "1234-abcd"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "web",
			Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
				Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("256Mi")},
			},
		}}},
	}
}

// Create a pod's cgroup with the cgroupfs driver on a fake cgroup v1 tree
// and get the cgroup parent to give the runtime for the pod's sandbox.
func Example() {
	root := fakeCgroupV1()
	defer os.RemoveAll(root)

	m, err := cgroupdriver.New(cgroupdriver.Options{
		CgroupDriver: cgroupdriver.DriverCgroupfs,
		FS:           cgroupdriver.FSOptions{Root: root},
		PodPidsLimit: 512,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	pod := burstablePod()
	parent, err := m.EnsurePod(ctx, pod)
	if err != nil {
		panic(err)
	}
	fmt.Println("QoS class:", cgroupdriver.PodQOS(pod))
	fmt.Println("cgroup parent:", parent)
	for _, f := range []string{"cpu/kubepods/burstable/pod1234-abcd/cpu.shares", "pids/kubepods/burstable/pod1234-abcd/pids.max"} {
		v, _ := os.ReadFile(filepath.Join(root, f))
		fmt.Printf("%s = %s\n", filepath.Base(f), v)
	}
	name, _ := m.PodCgroup(pod)
	fmt.Println("with the systemd driver:", name.ToSystemd())

	pods, _ := m.ListPods(ctx)
	fmt.Println("pods with a cgroup:", len(pods))
	if err := m.RemovePod(ctx, pod.UID); err != nil {
		panic(err)
	}
	pods, _ = m.ListPods(ctx)
	fmt.Println("after RemovePod:", len(pods))
	// Output:
	// QoS class: Burstable
	// cgroup parent: /kubepods/burstable/pod1234-abcd
	// cpu.shares = 256
	// pids.max = 512
	// with the systemd driver: /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice
	// pods with a cgroup: 1
	// after RemovePod: 0
}

// loggingDriver wraps the configured driver and prints what is created.
type loggingDriver struct {
	cgroupdriver.Driver
}

func (d loggingDriver) Create(ctx context.Context, n cgroupdriver.Name, r cgroupdriver.ResourceConfig) error {
	fmt.Printf("create %s %s\n", d.Literal(n), r)
	return d.Driver.Create(ctx, n, r)
}

// Wire the Module into an application and wrap its driver with
// fx.Decorate: the Manager uses the decorated driver.
func ExampleModule() {
	root := fakeCgroupV1()
	defer os.RemoveAll(root)

	var m *cgroupdriver.Manager
	app := fx.New(
		fx.NopLogger,
		fx.Supply(cgroupdriver.Options{FS: cgroupdriver.FSOptions{Root: root}}),
		cgroupdriver.Module,
		fx.Decorate(func(d cgroupdriver.Driver) cgroupdriver.Driver { return loggingDriver{d} }),
		fx.Populate(&m),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = app.Stop(ctx) }()
	if _, err := m.EnsurePod(ctx, burstablePod()); err != nil {
		panic(err)
	}
	// Output:
	// create /kubepods {}
	// create /kubepods/burstable {cpuShares=2}
	// create /kubepods/besteffort {cpuShares=2}
	// create /kubepods/burstable/pod1234-abcd {cpuShares=256 memory=268435456}
}
