package podresources

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
	"k8s.io/utils/ptr"
)

// fakeDevices gives each container the devices in byContainer (by pod UID
// and container name) and counts UpdateAllocatedDevices calls.
type fakeDevices struct {
	mu          sync.Mutex
	updates     int
	byContainer map[[2]string][]*podresourcesv1.ContainerDevices
	allocatable []*podresourcesv1.ContainerDevices
}

func (f *fakeDevices) UpdateAllocatedDevices() {
	f.mu.Lock()
	f.updates++
	f.mu.Unlock()
}

func (f *fakeDevices) ContainerDevices(podUID, name string) []*podresourcesv1.ContainerDevices {
	return f.byContainer[[2]string{podUID, name}]
}

func (f *fakeDevices) AllocatableDevices() []*podresourcesv1.ContainerDevices { return f.allocatable }

func dev(res, id string, numa ...int64) *podresourcesv1.ContainerDevices {
	d := &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: []string{id}}
	for _, n := range numa {
		if d.Topology == nil {
			d.Topology = &podresourcesv1.TopologyInfo{}
		}
		d.Topology.Nodes = append(d.Topology.Nodes, &podresourcesv1.NUMANode{ID: n})
	}
	return d
}

func testPods() []*v1.Pod {
	return []*v1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "ml", UID: types.UID("uid-gpu")},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{
				{Name: "setup"},
				{Name: "sidecar", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)},
			},
			Containers: []v1.Container{{Name: "train"}, {Name: "log"}},
		},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: types.UID("uid-web")},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "nginx"}}},
	}}
}

// serve runs a Server on a socket in a temporary directory and returns it
// with a v1 client and the client's connection.
func serve(t *testing.T, opts Options) (*Server, *grpc.ClientConn) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join(t.TempDir(), "pod-resources")
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if _, err := os.Stat(s.SocketPath()); !os.IsNotExist(err) {
			t.Errorf("the socket is left after Run: %v", err)
		}
	})
	waitFor(t, "the socket", func() bool {
		fi, err := os.Stat(s.SocketPath())
		return err == nil && fi.Mode().Type() == os.ModeSocket
	})
	conn, err := grpc.NewClient("unix://"+s.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, conn
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

func TestListGetAllocatable(t *testing.T) {
	devs := &fakeDevices{
		byContainer: map[[2]string][]*podresourcesv1.ContainerDevices{
			{"uid-gpu", "train"}:   {dev("example.com/gpu", "gpu-0", 0), dev("example.com/gpu", "gpu-1", 1)},
			{"uid-gpu", "sidecar"}: {dev("example.com/nic", "nic-0")},
			{"uid-gpu", "setup"}:   {dev("example.com/gpu", "gpu-0", 0)},
		},
		allocatable: []*podresourcesv1.ContainerDevices{dev("example.com/gpu", "gpu-0", 0), dev("example.com/gpu", "gpu-1", 1), dev("example.com/nic", "nic-0")},
	}
	reg := prometheus.NewRegistry()
	_, conn := serve(t, Options{ActivePods: testPods, Devices: devs, Registerer: reg})
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	ctx := context.Background()

	list, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	gpu := &podresourcesv1.PodResources{Name: "gpu", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{
		{Name: "sidecar", Devices: []*podresourcesv1.ContainerDevices{dev("example.com/nic", "nic-0")}},
		{Name: "train", Devices: []*podresourcesv1.ContainerDevices{dev("example.com/gpu", "gpu-0", 0), dev("example.com/gpu", "gpu-1", 1)}},
		{Name: "log"},
	}}
	web := &podresourcesv1.PodResources{Name: "web", Namespace: "default", Containers: []*podresourcesv1.ContainerResources{{Name: "nginx"}}}
	want := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{gpu, web}}
	if !proto.Equal(list, want) {
		t.Errorf("List =\n%v\nwant (the regular init container left out, the sidecar in)\n%v", list, want)
	}
	if devs.updates != 1 {
		t.Errorf("List freed the inactive pods' devices %d times, want once", devs.updates)
	}

	got, err := client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: "gpu", PodNamespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.PodResources, gpu) {
		t.Errorf("Get = %v, want %v", got.PodResources, gpu)
	}
	_, err = client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: "gpu", PodNamespace: "default"})
	if s, _ := status.FromError(err); err == nil || s.Code() != codes.Unknown || s.Message() != "pod gpu in namespace default not found" {
		t.Errorf("Get of a pod not active = %v, want the kubelet's error", err)
	}

	alloc, err := client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (&podresourcesv1.AllocatableResourcesResponse{Devices: devs.allocatable}); !proto.Equal(alloc, want) {
		t.Errorf("GetAllocatableResources = %v, want %v (no CPUs or memory without their managers)", alloc, want)
	}

	alpha, err := v1alpha1.NewPodResourcesListerClient(conn).List(ctx, &v1alpha1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantAlpha := &v1alpha1.ListPodResourcesResponse{PodResources: []*v1alpha1.PodResources{
		{Name: "gpu", Namespace: "ml", Containers: []*v1alpha1.ContainerResources{
			{Name: "train", Devices: []*v1alpha1.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"gpu-0"}}, {ResourceName: "example.com/gpu", DeviceIds: []string{"gpu-1"}}}},
			{Name: "log"},
		}},
		{Name: "web", Namespace: "default", Containers: []*v1alpha1.ContainerResources{{Name: "nginx"}}},
	}}
	if !proto.Equal(alpha, wantAlpha) {
		t.Errorf("v1alpha1 List = %v, want %v", alpha, wantAlpha)
	}

	const wantMetrics = `
# HELP kubelet_pod_resources_endpoint_errors_get [ALPHA] Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_errors_get counter
kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"} 1
# HELP kubelet_pod_resources_endpoint_requests_get [ALPHA] Number of requests to the PodResource Get endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_get counter
kubelet_pod_resources_endpoint_requests_get{server_api_version="v1"} 2
# HELP kubelet_pod_resources_endpoint_requests_get_allocatable [ALPHA] Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_get_allocatable counter
kubelet_pod_resources_endpoint_requests_get_allocatable{server_api_version="v1"} 1
# HELP kubelet_pod_resources_endpoint_requests_list [ALPHA] Number of requests to the PodResource List endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_list counter
kubelet_pod_resources_endpoint_requests_list{server_api_version="v1"} 1
# HELP kubelet_pod_resources_endpoint_requests_total [ALPHA] Cumulative number of requests to the PodResource endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_total counter
kubelet_pod_resources_endpoint_requests_total{server_api_version="v1"} 4
kubelet_pod_resources_endpoint_requests_total{server_api_version="v1alpha1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantMetrics)); err != nil {
		t.Error(err)
	}
}

// Calls beyond the rate limit's burst are refused with the kubelet's
// ResourceExhausted; a refill rate of one call an hour keeps the test from
// depending on timing.
func TestRateLimit(t *testing.T) {
	_, conn := serve(t, Options{ActivePods: testPods, QPS: 1.0 / 3600, Burst: 2})
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	for i := range 2 {
		if _, err := client.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{}); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	_, err := client.GetAllocatableResources(context.Background(), &podresourcesv1.AllocatableResourcesRequest{})
	if s, _ := status.FromError(err); s.Code() != codes.ResourceExhausted || s.Message() != "rejected by rate limit" {
		t.Errorf("the call beyond the burst = %v, want ResourceExhausted: rejected by rate limit", err)
	}
}

// The directory is created 0750, and a stale socket (here any file) left
// by a previous run is replaced.
func TestSocketDirAndStaleSocket(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pod-resources")
	_, conn := serve(t, Options{Dir: dir, ActivePods: func() []*v1.Pod { return nil }})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Errorf("%s has mode %04o, want 0750", dir, fi.Mode().Perm())
	}
	if _, err := podresourcesv1.NewPodResourcesListerClient(conn).List(context.Background(), &podresourcesv1.ListPodResourcesRequest{}); err != nil {
		t.Fatal(err)
	}

	stale := filepath.Join(t.TempDir(), "pod-resources")
	if err := os.MkdirAll(stale, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, SocketName), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, conn = serve(t, Options{Dir: stale, ActivePods: func() []*v1.Pod { return nil }})
	if _, err := podresourcesv1.NewPodResourcesListerClient(conn).List(context.Background(), &podresourcesv1.ListPodResourcesRequest{}); err != nil {
		t.Fatalf("List on the socket that replaced a stale file: %v", err)
	}
	if entries, _ := os.ReadDir(stale); len(entries) != 1 {
		t.Errorf("%s holds %d entries, want the socket only (no temporary name left)", stale, len(entries))
	}
}

// A directory too deep for a unix socket address is logged, not fatal:
// Run serves nothing and returns when its context ends.
func TestSocketPathTooLongKeepsRunning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100), "pod-resources")
	s, err := New(Options{Dir: dir, ActivePods: func() []*v1.Pod { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v before its context ended", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestNewRequires(t *testing.T) {
	if _, err := New(Options{ActivePods: func() []*v1.Pod { return nil }}); err == nil || !strings.Contains(err.Error(), "Dir is required") {
		t.Errorf("New without Dir = %v", err)
	}
	if _, err := New(Options{Dir: "/x"}); err == nil || !strings.Contains(err.Error(), "ActivePods is required") {
		t.Errorf("New without ActivePods = %v", err)
	}
}
