package dra

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// healthServer is a fake driver's DRAResourceHealth service: it sends
// each report put on reports, or answers Unimplemented.
type healthServer struct {
	drahealthv1.UnimplementedDRAResourceHealthServer
	reports       chan *drahealthv1.NodeWatchResourcesResponse
	unimplemented bool
}

func (h *healthServer) NodeWatchResources(_ *drahealthv1.NodeWatchResourcesRequest, s drahealthv1.DRAResourceHealth_NodeWatchResourcesServer) error {
	if h.unimplemented {
		return status.Error(codes.Unimplemented, "no health")
	}
	for {
		select {
		case r := <-h.reports:
			if err := s.Send(r); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func healthReport(device string, health drahealthv1.HealthStatus, message string) *drahealthv1.NodeWatchResourcesResponse {
	return &drahealthv1.NodeWatchResourcesResponse{Devices: []*drahealthv1.DeviceHealth{{
		Device:          &drahealthv1.DeviceIdentifier{PoolName: testNode, DeviceName: device},
		Health:          health,
		Message:         message,
		LastUpdatedTime: time.Now().Unix(),
	}}}
}

func TestAllocatedResourcesStatus(t *testing.T) {
	ctx := t.Context()
	hs := &healthServer{reports: make(chan *drahealthv1.NodeWatchResourcesResponse, 4)}
	d := startDriverWith(t, func(s *grpc.Server) { drahealthv1.RegisterDRAResourceHealthServer(s, hs) })
	pod := podWithClaim("p1", "c1")
	pod.Spec.Containers[0].Resources.Claims[0].Request = "gpu"
	m, _ := newTestManager(t, t.TempDir(), nil, allocatedClaim("c1", pod))
	register(t, m, d, drapb.DRAPluginService, drahealthv1.DRAResourceHealthService)
	if err := m.PrepareResources(ctx, pod); err != nil {
		t.Fatal(err)
	}
	other := v1.ResourceStatus{Name: "example.com/dp", Resources: []v1.ResourceHealth{{ResourceID: "dev-0", Health: v1.ResourceHealthStatusHealthy}}}
	statuses := func() []v1.ResourceStatus {
		s := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "app", AllocatedResourcesStatus: []v1.ResourceStatus{other}}, {Name: "sidecar"}}}
		m.UpdateAllocatedResourcesStatus(pod, s)
		if s.ContainerStatuses[1].AllocatedResourcesStatus != nil {
			t.Errorf("container without claims got %v", s.ContainerStatuses[1].AllocatedResourcesStatus)
		}
		return s.ContainerStatuses[0].AllocatedResourcesStatus
	}
	want := func(h v1.ResourceHealthStatus, msg string) []v1.ResourceStatus {
		rh := v1.ResourceHealth{ResourceID: "example.com/gpu=c1", Health: h}
		if msg != "" {
			rh.Message = &msg
		}
		return []v1.ResourceStatus{other, {Name: "claim:gpu/gpu", Resources: []v1.ResourceHealth{rh}}}
	}
	// No report yet: Unknown.
	if got := statuses(); !reflect.DeepEqual(got, want(v1.ResourceHealthStatusUnknown, "")) {
		t.Errorf("before any report: %v", got)
	}
	// The driver reports the claim's device unhealthy: the pod is synced.
	hs.reports <- healthReport("gpu-c1", drahealthv1.HealthStatus_UNHEALTHY, "ECC errors")
	select {
	case uid := <-m.HealthUpdates():
		if uid != types.UID("uid-p1") {
			t.Errorf("health update for %s", uid)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no health update for the pod")
	}
	if got := statuses(); !reflect.DeepEqual(got, want(v1.ResourceHealthStatusUnhealthy, "ECC errors")) {
		t.Errorf("after the unhealthy report: %v", got)
	}
	// A device no claim holds: no pod to sync. The same report again
	// changes nothing.
	hs.reports <- healthReport("gpu-other", drahealthv1.HealthStatus_HEALTHY, "")
	hs.reports <- healthReport("gpu-c1", drahealthv1.HealthStatus_UNHEALTHY, "ECC errors")
	hs.reports <- healthReport("gpu-c1", drahealthv1.HealthStatus_HEALTHY, "")
	select {
	case uid := <-m.HealthUpdates():
		if uid != types.UID("uid-p1") {
			t.Errorf("health update for %s", uid)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no health update for the pod's device turning healthy")
	}
	if got := statuses(); !reflect.DeepEqual(got, want(v1.ResourceHealthStatusHealthy, "")) {
		t.Errorf("after the healthy report: %v", got)
	}
	select {
	case uid := <-m.HealthUpdates():
		t.Errorf("extra health update for %s", uid)
	default:
	}

	// The plugin goes: its health is forgotten (Unknown).
	m.DeRegisterPlugin(ctx, testDriver, d.sock)
	waitFor(t, "the health forgotten", func() bool {
		return reflect.DeepEqual(statuses(), want(v1.ResourceHealthStatusUnknown, ""))
	})
}

func TestHealthCacheTimeout(t *testing.T) {
	var c healthCache
	t0 := time.Now()
	h := deviceHealth{health: v1.ResourceHealthStatusHealthy, updated: t0, timeout: 10 * time.Second}
	if changed, _, _ := c.update("d", map[string]deviceHealth{"p/a": h, "p/b": h}, t0); len(changed) != 2 {
		t.Errorf("first report changed %v", changed)
	}
	if got := c.get("d", "p", "a", t0.Add(5*time.Second)).health; got != v1.ResourceHealthStatusHealthy {
		t.Errorf("fresh report: %s", got)
	}
	if got := c.get("d", "p", "a", t0.Add(11*time.Second)).health; got != v1.ResourceHealthStatusUnknown {
		t.Errorf("stale report: %s", got)
	}
	// b is not reported any more: once stale it turns Unknown (a change)
	// and is forgotten.
	t1 := t0.Add(11 * time.Second)
	h.updated = t1
	changed, _, _ := c.update("d", map[string]deviceHealth{"p/a": h}, t1)
	if !reflect.DeepEqual(changed, []string{"p/b"}) {
		t.Errorf("changed %v, want p/b turning Unknown", changed)
	}
	if _, ok := c.drivers["d"]["p/b"]; ok {
		t.Error("stale device kept")
	}
}

// TestHealthCheckpoint: the devices' reported health is kept in
// <state dir>/dra_health_state, the kubelet's file and format, so that a
// restarted agent reports it until it times out instead of Unknown; a
// driver whose health stream ended is cleared from it.
func TestHealthCheckpoint(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, HealthCheckpointFile)
	now := time.Now()
	c := healthCache{path: path}
	h := deviceHealth{health: v1.ResourceHealthStatusUnhealthy, message: "ECC errors", updated: now, timeout: time.Minute}
	if _, _, err := c.update("example.com", map[string]deviceHealth{"pool/gpu-0": h}, now); err != nil {
		t.Fatal(err)
	}
	// Restarted: a new Manager on the same directory.
	m, _ := newTestManager(t, dir, nil)
	if err := m.load(); err != nil {
		t.Fatal(err)
	}
	if got := m.health.get("example.com", "pool", "gpu-0", now.Add(time.Second)); got.health != v1.ResourceHealthStatusUnhealthy || got.message != "ECC errors" {
		t.Errorf("after a restart: %+v, want the checkpointed Unhealthy, ECC errors", got)
	}
	if got := m.health.get("example.com", "pool", "gpu-0", now.Add(2*time.Minute)); got.health != v1.ResourceHealthStatusUnknown {
		t.Errorf("after a restart, past the report's timeout: %s, want Unknown", got.health)
	}
	// The stream ended: cleared in the file too.
	if err := c.clear("example.com"); err != nil {
		t.Fatal(err)
	}
	c2 := healthCache{path: path}
	if err := c2.load(); err != nil {
		t.Fatal(err)
	}
	if got := c2.get("example.com", "pool", "gpu-0", now); got.health != v1.ResourceHealthStatusUnknown {
		t.Errorf("after the driver was cleared: %s, want Unknown", got.health)
	}

	// A checkpoint the kubelet wrote (state.DevicesHealthMap; a zero
	// timeout is the default one) is read.
	kubelets := fmt.Sprintf(`{"example.com":{"Devices":{"pool/gpu-1":{"PoolName":"pool","DeviceName":"gpu-1","Health":"Healthy","LastUpdated":%q,"HealthCheckTimeout":0,"Message":"ok"}}}}`,
		now.Format(time.RFC3339Nano))
	if err := os.WriteFile(path, []byte(kubelets), 0o600); err != nil {
		t.Fatal(err)
	}
	c3 := healthCache{path: path}
	if err := c3.load(); err != nil {
		t.Fatal(err)
	}
	if got := c3.get("example.com", "pool", "gpu-1", now.Add(DefaultHealthTimeout-time.Second)); got.health != v1.ResourceHealthStatusHealthy || got.message != "ok" {
		t.Errorf("the kubelet's checkpoint: %+v, want Healthy, ok", got)
	}
	// Written back in the same shape.
	if _, _, err := c3.update("example.com", map[string]deviceHealth{"pool/gpu-1": {health: v1.ResourceHealthStatusUnhealthy, updated: now, timeout: DefaultHealthTimeout}}, now); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]struct {
		Devices map[string]struct {
			PoolName, DeviceName, Health string
			HealthCheckTimeout           time.Duration
		}
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if d := back["example.com"].Devices["pool/gpu-1"]; d.PoolName != "pool" || d.DeviceName != "gpu-1" || d.Health != "Unhealthy" || d.HealthCheckTimeout != DefaultHealthTimeout {
		t.Errorf("checkpoint written %s", data)
	}

	// An unreadable checkpoint: logged, the health starts empty, the
	// Manager works.
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	m2, _ := newTestManager(t, dir, nil)
	if err := m2.load(); err != nil {
		t.Errorf("a broken health checkpoint failed the Manager: %v", err)
	}
}

func TestHealthStreamUnimplementedStops(t *testing.T) {
	d := startDriverWith(t, func(s *grpc.Server) {
		drahealthv1.RegisterDRAResourceHealthServer(s, &healthServer{unimplemented: true})
	})
	m, _ := newTestManager(t, t.TempDir(), nil)
	register(t, m, d, drapb.DRAPluginService, drahealthv1.DRAResourceHealthService)
	// The watch ends by itself (closeAll would wait for it otherwise).
	done := make(chan struct{})
	go func() { m.reg.watches.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the health watch of a driver answering Unimplemented did not stop")
	}
}
