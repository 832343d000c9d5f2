package dra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const (
	testDriver = "gpu.example.com"
	testNode   = "node-1"
)

// fakeDriver is a DRA driver's kubelet plugin serving the v1 DRAPlugin
// service on a unix socket: each claim it prepares gets the CDI device
// "example.com/gpu=<claim name>" for request "gpu".
type fakeDriver struct {
	drapb.UnimplementedDRAPluginServer
	sock string
	srv  *grpc.Server

	mu         sync.Mutex
	prepares   []string // claim names, one per NodePrepareResources claim
	unprepares []string
	failClaim  string
	// services registers more services on the plugin's server.
	services func(*grpc.Server)
}

func startDriver(t *testing.T) *fakeDriver {
	return startDriverWith(t, nil)
}

// startDriverWith starts a fakeDriver whose server also serves what
// services registers.
func startDriverWith(t *testing.T, services func(*grpc.Server)) *fakeDriver {
	t.Helper()
	dir, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &fakeDriver{sock: filepath.Join(dir, "dra.sock"), services: services}
	d.start(t)
	return d
}

func (d *fakeDriver) start(t *testing.T) {
	t.Helper()
	l, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	d.srv = grpc.NewServer()
	drapb.RegisterDRAPluginServer(d.srv, d)
	if d.services != nil {
		d.services(d.srv)
	}
	go d.srv.Serve(l) //nolint:errcheck // ends with Stop
	t.Cleanup(d.srv.Stop)
}

func (d *fakeDriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		d.prepares = append(d.prepares, c.Name)
		if c.Name == d.failClaim {
			resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Error: "device on fire"}
			continue
		}
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Devices: []*drapb.Device{{
			RequestNames: []string{"gpu"}, PoolName: testNode, DeviceName: "gpu-" + c.Name,
			CdiDeviceIds: []string{"example.com/gpu=" + c.Name},
		}}}
	}
	return resp, nil
}

func (d *fakeDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		d.unprepares = append(d.unprepares, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

func (d *fakeDriver) calls() (prepares, unprepares []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.prepares), slices.Clone(d.unprepares)
}

// allocatedClaim is a claim allocated from testDriver and reserved for pods.
func allocatedClaim(name string, pods ...*v1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: testDriver, Pool: testNode, Device: "gpu-" + name,
			}}},
		}},
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// podWithClaim is a pod whose container "app" uses the claim named claim.
func podWithClaim(name, claim string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
			Containers: []v1.Container{
				{Name: "app", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}},
				{Name: "sidecar"},
			},
		},
	}
}

func newTestManager(t *testing.T, dir string, reg prometheus.Registerer, objs ...runtime.Object) (*Manager, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	m, err := New(Options{Client: client, NodeName: testNode, StateDir: dir, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.reg.closeAll)
	return m, client
}

func register(t *testing.T, m *Manager, d *fakeDriver, services ...string) {
	t.Helper()
	if len(services) == 0 {
		services = []string{drapb.DRAPluginService}
	}
	if err := m.ValidatePlugin(t.Context(), testDriver, d.sock, services); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterPlugin(t.Context(), testDriver, d.sock, services, nil); err != nil {
		t.Fatal(err)
	}
}

func cdiNames(devs []*runtimeapi.CDIDevice) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

const inUseHelp = `
# HELP dra_resource_claims_in_use [ALPHA] The number of ResourceClaims that are currently in use on the node, by driver name (driver_name label value) and across all drivers (special value <any> for driver_name). Note that the sum of all by-driver counts is not the total number of in-use ResourceClaims because the same ResourceClaim might use devices from different drivers. Instead, use the count for the <any> driver_name.
# TYPE dra_resource_claims_in_use gauge`

// Two pods share one claim: it is prepared once, its CDI device goes to
// the containers that use it, and it is unprepared when the last pod
// releases it; the checkpoint follows each step.
func TestPrepareSharedClaim(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := startDriver(t)
	p1, p2 := podWithClaim("p1", "shared"), podWithClaim("p2", "shared")
	reg := prometheus.NewPedanticRegistry()
	m, _ := newTestManager(t, dir, reg, allocatedClaim("shared", p1, p2))
	register(t, m, d)

	for _, p := range []*v1.Pod{p1, p2, p1} {
		if err := m.PrepareResources(ctx, p); err != nil {
			t.Fatalf("prepare %s: %v", p.Name, err)
		}
	}
	if prep, _ := d.calls(); !slices.Equal(prep, []string{"shared"}) {
		t.Errorf("NodePrepareResources calls %v, want one for the shared claim", prep)
	}
	cfg := &runtimeapi.ContainerConfig{CDIDevices: []*runtimeapi.CDIDevice{{Name: "vendor.com/dp=1"}}}
	if err := m.ApplyContainerConfig(ctx, p2, &p2.Spec.Containers[0], cfg); err != nil {
		t.Fatal(err)
	}
	if got := cdiNames(cfg.CDIDevices); !slices.Equal(got, []string{"example.com/gpu=shared", "vendor.com/dp=1"}) {
		t.Errorf("CDI devices of the claim's container %v", got)
	}
	if devs, err := m.CDIDevices(p2, &p2.Spec.Containers[1]); err != nil || devs != nil {
		t.Errorf("container without the claim got %v, %v", devs, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(inUseHelp+`
dra_resource_claims_in_use{driver_name="<any>"} 1
dra_resource_claims_in_use{driver_name="gpu.example.com"} 1
`), "dra_resource_claims_in_use"); err != nil {
		t.Error(err)
	}

	states, err := readCheckpoint(filepath.Join(dir, CheckpointFile))
	if err != nil || len(states) != 1 || len(states[0].PodUIDs) != 2 ||
		!slices.Equal(states[0].DriverState[testDriver].Devices[0].CDIDeviceIDs, []string{"example.com/gpu=shared"}) {
		t.Fatalf("checkpoint after prepare: %+v, %v", states, err)
	}

	if err := m.UnprepareResources(ctx, p1); err != nil {
		t.Fatal(err)
	}
	if _, unprep := d.calls(); len(unprep) != 0 {
		t.Fatalf("claim still used by p2 unprepared: %v", unprep)
	}
	if !m.PodMightNeedToUnprepareResources(p2.UID) || m.PodMightNeedToUnprepareResources(p1.UID) {
		t.Error("claim references after p1's unprepare are wrong")
	}
	for range 2 { // a second call is a no-op
		if err := m.UnprepareResources(ctx, p2); err != nil {
			t.Fatal(err)
		}
	}
	if _, unprep := d.calls(); !slices.Equal(unprep, []string{"shared"}) {
		t.Errorf("NodeUnprepareResources calls %v, want one", unprep)
	}
	if states, err := readCheckpoint(filepath.Join(dir, CheckpointFile)); err != nil || len(states) != 0 {
		t.Errorf("checkpoint after the last unprepare: %+v, %v", states, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(inUseHelp+`
dra_resource_claims_in_use{driver_name="<any>"} 0
`), "dra_resource_claims_in_use"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "dra_operations_duration_seconds"); err != nil || n != 2 {
		t.Errorf("dra_operations_duration_seconds has %d series, want PrepareResources and UnprepareResources", n)
	}
}

// A claim made from a template for the pod (named in its status, owned by
// it) and the claim of its DRA-backed extended resources.
func TestPrepareTemplateAndExtendedResourceClaims(t *testing.T) {
	ctx := t.Context()
	d := startDriver(t)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "uid-p"},
		Spec: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")}},
			Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{
				Claims:   []v1.ResourceClaim{{Name: "gpu", Request: "gpu"}},
				Requests: v1.ResourceList{"example.com/gpu": resource.MustParse("1")},
			}}},
		},
		Status: v1.PodStatus{
			ResourceClaimStatuses: []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-x1")}},
			ExtendedResourceClaimStatus: &v1.PodExtendedResourceClaimStatus{
				ResourceClaimName: "p-extended-resources-x2",
				RequestMappings:   []v1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: "example.com/gpu", RequestName: "gpu"}},
			},
		},
	}
	owned := allocatedClaim("p-gpu-x1", pod)
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: pod.UID, Controller: ptr.To(true)}}
	m, _ := newTestManager(t, t.TempDir(), nil, owned, allocatedClaim("p-extended-resources-x2", pod))
	register(t, m, d)
	if err := m.PrepareResources(ctx, pod); err != nil {
		t.Fatal(err)
	}
	devs, err := m.CDIDevices(pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := cdiNames(devs); !slices.Equal(got, []string{"example.com/gpu=p-gpu-x1", "example.com/gpu=p-extended-resources-x2"}) {
		t.Errorf("CDI devices %v", got)
	}
	if err := m.UnprepareResources(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, unprep := d.calls(); len(unprep) != 2 {
		t.Errorf("unprepared %v, want both claims", unprep)
	}
}

// Every way a pod's claims cannot be prepared fails with the kubelet's
// error, before the pod is added to any claim: deleting it then needs no
// driver call.
func TestPrepareErrors(t *testing.T) {
	pod := podWithClaim("p", "c")
	other := podWithClaim("other", "c")
	notAllocated := allocatedClaim("c", pod)
	notAllocated.Status.Allocation = nil
	notOwned := allocatedClaim("p-gpu-x1", pod)
	templatePod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "uid-p"},
		Spec:       v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")}}},
	}
	withStatus := templatePod.DeepCopy()
	withStatus.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-x1")}}
	for _, tc := range []struct {
		name     string
		pod      *v1.Pod
		claim    *resourceapi.ResourceClaim
		register bool
		want     string
	}{
		{"claim missing", pod, nil, true, `prepare dynamic resources: fetch ResourceClaim c: resourceclaims.resource.k8s.io "c" not found`},
		{"not allocated", pod, notAllocated, true, "prepare dynamic resources: ResourceClaim c: not allocated"},
		{"not reserved", pod, allocatedClaim("c", other), true, "prepare dynamic resources: pod p (uid-p) is not allowed to use ResourceClaim c (uid-c)"},
		{"driver not registered", pod, allocatedClaim("c", pod), false, "prepare dynamic resources: DRA driver gpu.example.com is not registered"},
		{"template claim not created yet", templatePod, nil, true, `prepare dynamic resources: pod "default/p": ResourceClaim not created yet`},
		{"template claim not owned", withStatus, notOwned, true, "prepare dynamic resources: ResourceClaim default/p-gpu-x1 was not created for Pod default/p (Pod is not owner)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.claim != nil {
				objs = append(objs, tc.claim)
			}
			d := startDriver(t)
			m, _ := newTestManager(t, t.TempDir(), nil, objs...)
			if tc.register {
				register(t, m, d)
			}
			err := m.PrepareResources(t.Context(), tc.pod)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if m.PodMightNeedToUnprepareResources(tc.pod.UID) {
				t.Error("a pod that failed validation was added to a claim")
			}
			if err := m.UnprepareResources(t.Context(), tc.pod); err != nil {
				t.Errorf("unprepare after a failed validation: %v", err)
			}
			if prep, unprep := d.calls(); len(prep)+len(unprep) != 0 {
				t.Errorf("driver called: %v %v", prep, unprep)
			}
		})
	}
}

// A claim the driver fails stays unprepared and the pod stays on it (a
// retry prepares it; a deletion unprepares it); a pod without claims needs
// nothing.
func TestPrepareDriverFailure(t *testing.T) {
	ctx := t.Context()
	d := startDriver(t)
	d.failClaim = "c"
	pod := podWithClaim("p", "c")
	m, _ := newTestManager(t, t.TempDir(), nil, allocatedClaim("c", pod))
	register(t, m, d)
	err := m.PrepareResources(ctx, pod)
	if want := "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: device on fire"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	if _, err := m.CDIDevices(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatalf("CDI devices of an unprepared claim in the cache: %v", err)
	}
	d.mu.Lock()
	d.failClaim = ""
	d.mu.Unlock()
	if err := m.PrepareResources(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if prep, _ := d.calls(); !slices.Equal(prep, []string{"c", "c"}) {
		t.Errorf("prepare calls %v, want the failed one retried", prep)
	}
	if err := m.PrepareResources(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}); err != nil {
		t.Errorf("pod without claims: %v", err)
	}
}

// A restarted Manager (or a nodekit agent taking over from a kubelet)
// reads the checkpoint: running containers' claims keep their CDI devices,
// and a pod's deletion unprepares what the previous process prepared; the
// v1beta1 service of an older driver is spoken as well.
func TestRestartKeepsClaims(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := startDriver(t)
	pod := podWithClaim("p", "c")
	claim := allocatedClaim("c", pod)
	m1, _ := newTestManager(t, dir, nil, claim)
	register(t, m1, d)
	if err := m1.PrepareResources(ctx, pod); err != nil {
		t.Fatal(err)
	}
	m1.reg.closeAll()

	m2, _ := newTestManager(t, dir, nil, claim)
	devs, err := m2.CDIDevices(pod, &pod.Spec.Containers[0])
	if err != nil || !slices.Equal(cdiNames(devs), []string{"example.com/gpu=c"}) {
		t.Fatalf("CDI devices after restart: %v, %v", cdiNames(devs), err)
	}
	// An older driver's v1beta1 service, called through the kubelet's
	// wrapper.
	beta := startBetaDriver(t, d)
	if err := m2.RegisterPlugin(ctx, testDriver, beta.sock, []string{drapbv1beta1.DRAPluginService}, nil); err != nil {
		t.Fatal(err)
	}
	if err := m2.UnprepareResources(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, unprep := d.calls(); !slices.Equal(unprep, []string{"c"}) {
		t.Errorf("unprepare after restart %v", unprep)
	}
	beta.mu.Lock()
	defer beta.mu.Unlock()
	if !beta.used {
		t.Error("the v1beta1 service was not called")
	}
}

// betaDriver serves the v1beta1 DRAPlugin service, passing the calls to a
// fakeDriver.
type betaDriver struct {
	drapbv1beta1.UnimplementedDRAPluginServer
	inner *fakeDriver
	sock  string
	mu    sync.Mutex
	used  bool
}

func startBetaDriver(t *testing.T, inner *fakeDriver) *betaDriver {
	t.Helper()
	b := &betaDriver{inner: inner, sock: inner.sock + ".beta"}
	l, err := net.Listen("unix", b.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	drapbv1beta1.RegisterDRAPluginServer(srv, b)
	go srv.Serve(l) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return b
}

func (b *betaDriver) NodeUnprepareResources(ctx context.Context, req *drapbv1beta1.NodeUnprepareResourcesRequest) (*drapbv1beta1.NodeUnprepareResourcesResponse, error) {
	b.mu.Lock()
	b.used = true
	b.mu.Unlock()
	claims := make([]*drapb.Claim, 0, len(req.Claims))
	for _, c := range req.Claims {
		claims = append(claims, &drapb.Claim{Namespace: c.Namespace, Uid: c.Uid, Name: c.Name})
	}
	resp, err := b.inner.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
	if err != nil {
		return nil, err
	}
	out := &drapbv1beta1.NodeUnprepareResourcesResponse{Claims: map[string]*drapbv1beta1.NodeUnprepareResourceResponse{}}
	for uid := range resp.Claims {
		out.Claims[uid] = &drapbv1beta1.NodeUnprepareResourceResponse{}
	}
	return out, nil
}

// Results that skip node operations need the DRAOptionalNodeOperations
// gate, off in the kubelet v1.37: a claim all of whose results of a driver
// skip an operation is refused as the kubelet refuses it; one that skips
// it for some results only is prepared as usual.
func TestSkipNodeOperations(t *testing.T) {
	claim := func(skips ...[]resourceapi.SkipNodeOperation) *resourceapi.ResourceClaim {
		c := allocatedClaim("c")
		c.Status.Allocation.Devices.Results = nil
		for i, s := range skips {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Request: "gpu", Driver: testDriver, Pool: testNode, Device: fmt.Sprintf("gpu-%d", i), SkipNodeOperations: s,
			})
		}
		return c
	}
	prep := []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources}
	all := []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}
	for _, tc := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		refused bool
	}{
		{"none", claim(nil, nil), false},
		{"some results", claim(prep, nil), false},
		{"every result, one operation", claim(prep, prep), true},
		{"every result, all and one", claim(all, prep), true},
		{"every result, all", claim(all, all), true},
	} {
		_, err := newClaimInfo(tc.claim)
		if refused := err != nil; refused != tc.refused {
			t.Errorf("%s: error %v, want refused %v", tc.name, err, tc.refused)
		}
	}
}

func TestValidatePlugin(t *testing.T) {
	m, _ := newTestManager(t, t.TempDir(), nil)
	err := m.ValidatePlugin(t.Context(), testDriver, "/x.sock", []string{"v1alpha4.Node"})
	if err == nil || !strings.Contains(err.Error(), `none of services supported by the plugin (["v1alpha4.Node"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])`) {
		t.Errorf("unsupported version: %v", err)
	}
	if err := m.ValidatePlugin(t.Context(), testDriver, "/x.sock", nil); err == nil {
		t.Error("no versions accepted")
	}
	d := startDriver(t)
	register(t, m, d)
	if err := m.RegisterPlugin(t.Context(), testDriver, d.sock, []string{drapb.DRAPluginService}, nil); err == nil {
		t.Error("the same endpoint registered twice")
	}
}

// deletions records the field selectors of ResourceSlice collection
// deletions.
type deletions struct {
	mu   sync.Mutex
	sels []string
}

func (d *deletions) react(client *fake.Clientset) {
	client.PrependReactor("delete-collection", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.sels = append(d.sels, a.(k8stesting.DeleteCollectionAction).GetListRestrictions().Fields.String())
		return true, nil, nil
	})
}

func (d *deletions) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.sels)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// At start the node's ResourceSlices are deleted; a driver whose plugin
// went away (socket deregistered, or connection lost) has its slices
// deleted after the wiping delay, unless a plugin of it is back in time.
func TestResourceSlicesWiped(t *testing.T) {
	client := fake.NewClientset()
	var del deletions
	del.react(client)
	const delay = 300 * time.Millisecond
	// On a fake clock: "back within the delay" does not depend on how
	// fast a loaded machine reconnects.
	clk := testingclock.NewFakeClock(time.Now())
	m, err := New(Options{Client: client, NodeName: testNode, StateDir: t.TempDir(), WipingDelay: delay, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	all := "spec.nodeName=" + testNode
	drv := fmt.Sprintf("spec.driver=%s,spec.nodeName=%s", testDriver, testNode)
	waitFor(t, "the start's deletion", func() bool { return slices.Equal(del.list(), []string{all}) })

	d := startDriver(t)
	register(t, m, d)
	connected := func() bool {
		m.reg.mu.Lock()
		defer m.reg.mu.Unlock()
		ps := m.reg.plugins[testDriver]
		return len(ps) == 1 && ps[0].connected
	}
	waitFor(t, "the plugin's connection", connected)
	// Deregistered and back within the delay: nothing deleted.
	m.DeRegisterPlugin(ctx, testDriver, d.sock)
	register(t, m, d)
	waitFor(t, "the plugin's connection", connected)
	pending := func() bool {
		m.reg.mu.Lock()
		defer m.reg.mu.Unlock()
		return m.reg.wipes[testDriver] != nil
	}
	if pending() {
		t.Fatal("a wipe is still pending for a driver whose plugin came back in time")
	}
	if got := del.list(); len(got) != 1 {
		t.Fatalf("deletions %v after a plugin came back in time", got)
	}
	// wipe waits for the pending wipe, then lets the delay pass.
	wipe := func() {
		t.Helper()
		waitFor(t, "a pending wipe", pending)
		clk.Step(delay)
	}
	// The plugin dies: its connection ends, the driver's slices go.
	d.srv.Stop()
	wipe()
	waitFor(t, "the driver's slices deleted", func() bool { return slices.Equal(del.list(), []string{all, drv}) })
	// The wipe is forgotten after its deletion: a deregistration before
	// would find it pending and schedule none.
	waitFor(t, "the wipe done", func() bool { return !pending() })
	// Its deregistration later schedules nothing new once done.
	m.DeRegisterPlugin(ctx, testDriver, d.sock)
	wipe()
	waitFor(t, "a second deletion after the deregistration", func() bool { return len(del.list()) == 3 })
	if got := del.list(); got[2] != drv {
		t.Errorf("deletions %v", got)
	}
}

// The pod resources API's view of a container's prepared claims, as the
// kubelet's GetDynamicResources.
func TestDynamicResourcesForPodResources(t *testing.T) {
	d := startDriver(t)
	pod := podWithClaim("p", "c")
	m, _ := newTestManager(t, t.TempDir(), nil, allocatedClaim("c", pod))
	register(t, m, d)
	if got := m.DynamicResources(pod, &pod.Spec.Containers[0]); len(got) != 0 {
		t.Errorf("before prepare: %v", got)
	}
	if err := m.PrepareResources(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	got := m.DynamicResources(pod, &pod.Spec.Containers[0])
	if len(got) != 1 || got[0].ClaimName != "c" || got[0].ClaimNamespace != "default" || len(got[0].ClaimResources) != 1 {
		t.Fatalf("dynamic resources %v", got)
	}
	r := got[0].ClaimResources[0]
	if r.DriverName != testDriver || r.PoolName != testNode || r.DeviceName != "gpu-c" || len(r.CdiDevices) != 1 || r.CdiDevices[0].Name != "example.com/gpu=c" {
		t.Errorf("claim resource %v", r)
	}
	if got := m.DynamicResources(pod, &pod.Spec.Containers[1]); len(got) != 0 {
		t.Errorf("container without claims: %v", got)
	}
}

// A pod no claim of the cache lists leaves the checkpoint as it is: most
// pods have no claims, and their end rewrote it for nothing. After a
// failed write the cache is written all the same.
func TestUnprepareWithoutClaimsKeepsTheCheckpoint(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, CheckpointFile)
	m, _ := newTestManager(t, dir, nil)
	plain := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain", UID: "uid-plain"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	if err := m.UnprepareResources(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint written for a pod without claims: %v", err)
	}

	m.mu.Lock()
	m.unsynced = true
	m.mu.Unlock()
	if err := m.UnprepareResources(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if states, err := readCheckpoint(path); err != nil || len(states) != 0 {
		t.Fatalf("checkpoint after a failed write: %+v, %v", states, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("checkpoint not written again after a failed write: %v", err)
	}
}
