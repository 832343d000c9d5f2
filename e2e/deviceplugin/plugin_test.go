package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/devices"
)

// The sample plugin against nodekit's device manager in-process: it
// registers, its 4 devices are allocatable, a container asking for 2 gets
// SAMPLE_DEVICES and 2 device nodes, and stopping it drops allocatable.
func TestSamplePluginWithDeviceManager(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "device-plugins")
	m, err := devices.New(devices.Options{PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "kubelet.sock", func() bool { _, err := os.Stat(m.SocketPath()); return err == nil })

	p, err := Start(ctx, dir, "sample", "example.com/sample", 4)
	if err != nil {
		t.Fatal(err)
	}
	allocatable := func() int64 {
		_, a, _ := m.Capacity()
		q := a["example.com/sample"]
		return q.Value()
	}
	waitFor(t, "4 allocatable", func() bool { return allocatable() == 4 })

	two := v1.ResourceList{"example.com/sample": resource.MustParse("2")}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-p"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Limits: two, Requests: two}}}}}
	if err := m.Allocate(ctx, pod); err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{}
	if err := m.ApplyContainerConfig(ctx, pod, &pod.Spec.Containers[0], cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Envs) != 1 || cfg.Envs[0].Key != "SAMPLE_DEVICES" || string(cfg.Envs[0].Value) != "dev-0,dev-1" {
		t.Errorf("envs = %v, want SAMPLE_DEVICES=dev-0,dev-1", cfg.Envs)
	}
	if len(cfg.Devices) != 2 || cfg.Devices[0].ContainerPath != "/dev/sample-dev-0" || cfg.Devices[0].HostPath != "/dev/null" {
		t.Errorf("devices = %v", cfg.Devices)
	}

	p.Stop()
	waitFor(t, "0 allocatable", func() bool { return allocatable() == 0 })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The plugin registers again with a device manager that restarted on the
// same directory (which removed its socket), as a vendor's plugin does
// when the kubelet restarts.
func TestSamplePluginRegistersAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "device-plugins")
	run := func() (*devices.Manager, func()) {
		m, err := devices.New(devices.Options{PluginDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		waitFor(t, "kubelet.sock", func() bool { _, err := os.Stat(m.SocketPath()); return err == nil })
		return m, func() { cancel(); <-done }
	}
	allocatable := func(m *devices.Manager) int64 {
		_, a, _ := m.Capacity()
		q := a["example.com/sample"]
		return q.Value()
	}
	m, stop := run()
	p, err := Start(context.Background(), dir, "sample", "example.com/sample", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	waitFor(t, "4 allocatable", func() bool { return allocatable(m) == 4 })
	stop()

	m2, stop2 := run()
	defer stop2()
	waitFor(t, "4 allocatable on the restarted manager", func() bool { return allocatable(m2) == 4 })
}
