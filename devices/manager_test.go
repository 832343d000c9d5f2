package devices

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

const testResource = "example.com/dev"

// fakePlugin is an in-process device plugin on a unix socket.
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	opts    *pluginapi.DevicePluginOptions
	prefer  []string
	updates chan []*pluginapi.Device

	mu       sync.Mutex
	devices  []*pluginapi.Device
	preStart [][]string

	srv    *grpc.Server
	socket string
}

func newFakePlugin(t *testing.T, dir, name string, opts *pluginapi.DevicePluginOptions, devs []*pluginapi.Device) *fakePlugin {
	t.Helper()
	p := &fakePlugin{opts: opts, devices: devs, updates: make(chan []*pluginapi.Device, 4), socket: filepath.Join(dir, name)}
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go p.srv.Serve(lis)
	t.Cleanup(p.srv.Stop)
	return p
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.opts, nil
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	p.mu.Lock()
	devs := p.devices
	p.mu.Unlock()
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	for {
		select {
		case devs := <-p.updates:
			if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *fakePlugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range r.ContainerRequests {
		var ids []string
		for _, id := range p.prefer {
			if slices.Contains(cr.AvailableDeviceIDs, id) && len(ids) < int(cr.AllocationSize) {
				ids = append(ids, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (p *fakePlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range r.ContainerRequests {
		ids := slices.Sorted(slices.Values(cr.DevicesIds))
		car := &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"DEVICES": fmt.Sprint(ids), "SHARED": "plugin"},
			Annotations: map[string]string{"example.com/devices": fmt.Sprint(ids)},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/dev-lib", HostPath: "/opt/dev-lib", ReadOnly: true}},
		}
		for _, id := range ids {
			car.Devices = append(car.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + id, HostPath: "/dev/null", Permissions: "rw"})
			car.CdiDevices = append(car.CdiDevices, &pluginapi.CDIDevice{Name: "example.com/dev=" + id})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}

func (p *fakePlugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	p.preStart = append(p.preStart, r.DevicesIds)
	p.mu.Unlock()
	return &pluginapi.PreStartContainerResponse{}, nil
}

func register(t *testing.T, m *Manager, req *pluginapi.RegisterRequest) error {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+m.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req, grpc.WaitForReady(true))
	return err
}

func devices(n int, unhealthy ...string) []*pluginapi.Device {
	var out []*pluginapi.Device
	for i := range n {
		id := fmt.Sprintf("dev-%d", i)
		h := pluginapi.Healthy
		if slices.Contains(unhealthy, id) {
			h = pluginapi.Unhealthy
		}
		out = append(out, &pluginapi.Device{ID: id, Health: h})
	}
	return out
}

func startManager(t *testing.T, opts Options) (*Manager, func()) {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	waitFor(t, "the registration socket", func() bool { _, err := os.Stat(m.SocketPath()); return err == nil })
	return m, stop
}

// podSet is the active pods a test hands a Manager (Options.ActivePods).
type podSet struct {
	mu   sync.Mutex
	pods map[types.UID]*v1.Pod
}

func newPodSet() *podSet { return &podSet{pods: map[types.UID]*v1.Pod{}} }

func (s *podSet) add(pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[pod.UID] = pod
}

func (s *podSet) remove(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, uid)
}

func (s *podSet) active() []*v1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.pods))
}

// startWithPlugin starts a Manager on opts (startManager) and a fake
// plugin serving devs of testResource on "p.sock" in opts.PluginDir,
// preferring prefer, registers the plugin and waits until the node shows
// its devices (all in capacity, the healthy ones allocatable).
func startWithPlugin(t *testing.T, opts Options, pluginOpts *pluginapi.DevicePluginOptions, devs []*pluginapi.Device, prefer ...string) (*Manager, *fakePlugin, func()) {
	t.Helper()
	m, stop := startManager(t, opts)
	p := newFakePlugin(t, opts.PluginDir, "p.sock", pluginOpts, devs)
	p.prefer = prefer
	if err := register(t, m, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p.sock", ResourceName: testResource}); err != nil {
		t.Fatal(err)
	}
	healthy := 0
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			healthy++
		}
	}
	waitCounts(t, m, int64(len(devs)), int64(healthy))
	return m, p, stop
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

func counts(m *Manager) (int64, int64, bool) {
	c, a, _ := m.Capacity()
	cq, ok := c[testResource]
	aq := a[testResource]
	return cq.Value(), aq.Value(), ok
}

func waitCounts(t *testing.T, m *Manager, capacity, allocatable int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("capacity %d, allocatable %d", capacity, allocatable), func() bool {
		c, a, ok := counts(m)
		return ok && c == capacity && a == allocatable
	})
}

func testPod(uid string, n int64) *v1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "default", UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      "c",
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{testResource: q}, Requests: v1.ResourceList{testResource: q}},
		}}},
	}
}

func envMap(cfg *runtimeapi.ContainerConfig) map[string]string {
	out := map[string]string{}
	for _, e := range cfg.Envs {
		out[e.Key] = string(e.Value)
	}
	return out
}

func TestRegisterRejectsBadRequests(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "device-plugins")
	m, _ := startManager(t, Options{PluginDir: dir})
	newFakePlugin(t, dir, "p.sock", &pluginapi.DevicePluginOptions{}, devices(1))
	for _, tc := range []struct {
		req  *pluginapi.RegisterRequest
		want string
	}{
		{&pluginapi.RegisterRequest{Version: "v1alpha", Endpoint: "p.sock", ResourceName: testResource},
			"requested device plugin version v1alpha is not supported; supported versions are [v1beta1]"},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p.sock", ResourceName: "cpu"}, `the ResourceName "cpu" is invalid`},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p.sock", ResourceName: "kubernetes.io/dev"}, `the ResourceName "kubernetes.io/dev" is invalid`},
	} {
		err := register(t, m, tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%v) = %v, want %q", tc.req, err, tc.want)
		}
	}
	if _, _, ok := counts(m); ok {
		t.Error("a rejected plugin's resource is on the node")
	}
}

func TestLifecycle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "device-plugins")
	clk := clocktesting.NewFakePassiveClock(time.Now())
	active := newPodSet()
	opts := Options{PluginDir: dir, Clock: clk, ActivePods: active.active}
	m, p, stop := startWithPlugin(t, opts, &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}, devices(4), "dev-3", "dev-1")
	ctx := context.Background()

	// An unhealthy device leaves allocatable, not capacity.
	p.updates <- devices(4, "dev-0")
	waitCounts(t, m, 4, 3)
	node := &v1.Node{}
	if err := m.SetNodeStatus(ctx, node); err != nil {
		t.Fatal(err)
	}
	if c, a := node.Status.Capacity[testResource], node.Status.Allocatable[testResource]; c.Value() != 4 || a.Value() != 3 {
		t.Errorf("node capacity %s allocatable %s, want 4 and 3", c.String(), a.String())
	}

	// The plugin's preferred devices are allocated.
	pod1 := testPod("uid-1", 2)
	active.add(pod1)
	if err := m.Allocate(ctx, pod1); err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{
		Envs:        []*runtimeapi.KeyValue{{Key: "SHARED", Value: []byte("container")}},
		Annotations: map[string]string{"example.com/devices": "mine"},
	}
	if err := m.ApplyContainerConfig(ctx, pod1, &pod1.Spec.Containers[0], cfg); err != nil {
		t.Fatal(err)
	}
	if got := envMap(cfg)["DEVICES"]; got != "[dev-1 dev-3]" {
		t.Errorf("DEVICES env = %q, want [dev-1 dev-3]", got)
	}
	if last := cfg.Envs[len(cfg.Envs)-1]; last.Key != "SHARED" || string(last.Value) != "container" {
		t.Errorf("the container's own env must come last (it wins): %v", cfg.Envs)
	}
	if len(cfg.Devices) != 2 || cfg.Devices[0].ContainerPath != "/dev/dev-1" || cfg.Devices[1].ContainerPath != "/dev/dev-3" {
		t.Errorf("devices = %v", cfg.Devices)
	}
	if len(cfg.Mounts) != 1 || cfg.Mounts[0].HostPath != "/opt/dev-lib" || !cfg.Mounts[0].Readonly {
		t.Errorf("mounts = %v", cfg.Mounts)
	}
	if cfg.Annotations["example.com/devices"] != "mine" {
		t.Errorf("a device annotation overrode the container's: %v", cfg.Annotations)
	}
	if len(cfg.CDIDevices) != 2 || cfg.CDIDevices[0].Name != "example.com/dev=dev-1" {
		t.Errorf("CDI devices = %v", cfg.CDIDevices)
	}
	p.mu.Lock()
	preStart := slices.Clone(p.preStart)
	p.mu.Unlock()
	if len(preStart) != 1 || fmt.Sprint(preStart[0]) != "[dev-1 dev-3]" {
		t.Errorf("PreStartContainer calls = %v, want one for [dev-1 dev-3]", preStart)
	}

	// Only dev-2 is left healthy and free.
	pod2 := testPod("uid-2", 2)
	active.add(pod2)
	err := m.Allocate(ctx, pod2)
	var aerr *AdmissionError
	if !errors.As(err, &aerr) || aerr.Reason() != "UnexpectedAdmissionError" ||
		err.Error() != "Allocate failed due to requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1, which is unexpected" {
		t.Fatalf("Allocate of a pod asking too much = %v", err)
	}

	// The checkpoint holds the allocation in the kubelet's format: a new
	// manager on the same directory knows pod1's devices without the plugin.
	m2, err := New(Options{PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cfg2 := &runtimeapi.ContainerConfig{}
	if err := m2.ApplyContainerConfig(ctx, pod1, &pod1.Spec.Containers[0], cfg2); err != nil {
		t.Fatal(err)
	}
	if got := envMap(cfg2)["DEVICES"]; got != "[dev-1 dev-3]" {
		t.Errorf("after a restart DEVICES env = %q, want [dev-1 dev-3]", got)
	}

	// An agent restart before the plugin registers again: a running
	// container keeps its devices while the sources are not ready; a
	// container that does not run (a node reboot) cannot get them.
	notReady := func() bool { return false }
	for _, tc := range []struct {
		running bool
		want    string
	}{
		{true, ""},
		{false, "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/dev, which is unexpected"},
	} {
		m3, err := New(Options{PluginDir: dir, SourcesReady: notReady, ContainerRunning: func(string, string) bool { return tc.running }})
		if err != nil {
			t.Fatal(err)
		}
		err = m3.Allocate(ctx, pod1)
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || err.Error() != tc.want)) {
			t.Errorf("after a restart, container running %v: Allocate = %v, want %q", tc.running, err, tc.want)
		}
	}

	// pod1 terminates: its devices are free for the next pod.
	active.remove(pod1.UID)
	pod3 := testPod("uid-3", 3)
	if err := m.Allocate(ctx, pod3); err != nil {
		t.Fatalf("Allocate after pod1 terminated: %v", err)
	}

	// The plugin goes away: allocatable drops to 0, capacity stays for the
	// grace period, then the resource leaves the node.
	p.srv.Stop()
	waitCounts(t, m, 4, 0)
	clk.SetTime(clk.Now().Add(EndpointStopGracePeriod - time.Second))
	waitCounts(t, m, 4, 0)
	clk.SetTime(clk.Now().Add(2 * time.Second))
	node = &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{testResource: resource.MustParse("4")}, Allocatable: v1.ResourceList{testResource: resource.MustParse("0")}}}
	if err := m.SetNodeStatus(ctx, node); err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Status.Capacity[testResource]; ok {
		t.Errorf("the resource is still in capacity after the grace period: %v", node.Status.Capacity)
	}
	if _, ok := node.Status.Allocatable[testResource]; ok {
		t.Errorf("the resource is still in allocatable after the grace period: %v", node.Status.Allocatable)
	}

	// The plugin restarts and registers again.
	newFakePlugin(t, dir, "p2.sock", &pluginapi.DevicePluginOptions{}, devices(4))
	if err := register(t, m, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p2.sock", ResourceName: testResource}); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, m, 4, 4)
	stop()
	if _, err := os.Stat(m.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("the registration socket is left after Run: %v", err)
	}
}

// TestSocketPathTooLongKeepsRunning: a plugin directory too deep for a unix
// socket address (an agent whose root directory is a deep temporary one)
// leaves the node without device plugins, with an error line, and does not
// stop the agent: Run returns nil once its context ends, and the node
// advertises no devices.
func TestSocketPathTooLongKeepsRunning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	m, err := New(Options{PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Run returned before its context ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run with a socket path of %d bytes: %v, want nil", len(m.SocketPath()), err)
	}
	if capacity, allocatable, _ := m.Capacity(); len(capacity) != 0 || len(allocatable) != 0 {
		t.Errorf("capacity %v, allocatable %v without a registration socket, want none", capacity, allocatable)
	}
}
