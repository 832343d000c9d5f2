package csi

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// fakeNodeServer is a CSI driver's Node service answering NodeGetInfo.
type fakeNodeServer struct {
	csipb.UnimplementedNodeServer
	info *csipb.NodeGetInfoResponse
}

func (s *fakeNodeServer) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return s.info, nil
}

// startDriver serves a CSI Node service at a socket in a temporary
// directory and returns the socket's path.
func startDriver(t *testing.T, info *csipb.NodeGetInfoResponse) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "csi.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csipb.RegisterNodeServer(srv, &fakeNodeServer{info: info})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return path
}

func newTestDrivers(t *testing.T, objs ...any) (*Drivers, *fake.Clientset, *prometheus.Registry) {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}}}
	client := fake.NewClientset(node)
	for _, o := range objs {
		if err := client.Tracker().Add(o.(*storagev1.CSINode)); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	d, err := NewDrivers(DriversOptions{NodeName: "n1", Client: client, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return d, client, reg
}

func getNode(t *testing.T, c *fake.Clientset) *v1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func getCSINode(t *testing.T, c *fake.Clientset) *storagev1.CSINode {
	t.Helper()
	n, err := c.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRegisterPublishesNodeInfo(t *testing.T) {
	ctx := context.Background()
	d, client, reg := newTestDrivers(t)
	ep := startDriver(t, &csipb.NodeGetInfoResponse{
		NodeId:             "node-a",
		MaxVolumesPerNode:  7,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{"topology.example.com/zone": "z1", "topology.example.com/node": "n1"}},
	})
	if err := d.ValidatePlugin(ctx, "a.csi.example.com", ep, []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	if err := d.RegisterPlugin(ctx, "a.csi.example.com", ep, []string{"1.0.0"}, nil); err != nil {
		t.Fatal(err)
	}
	ep2 := startDriver(t, &csipb.NodeGetInfoResponse{NodeId: "node-b"})
	if err := d.RegisterPlugin(ctx, "b.csi.example.com", "unix://"+ep2, []string{"1.5.0"}, nil); err != nil {
		t.Fatal(err)
	}

	node := getNode(t, client)
	if got, want := node.Annotations[AnnotationNodeID], `{"a.csi.example.com":"node-a","b.csi.example.com":"node-b"}`; got != want {
		t.Errorf("annotation %s = %s, want %s", AnnotationNodeID, got, want)
	}
	if node.Labels["topology.example.com/zone"] != "z1" || node.Labels["topology.example.com/node"] != "n1" || node.Labels["kubernetes.io/hostname"] != "n1" {
		t.Errorf("labels %v, want the topology added", node.Labels)
	}
	cn := getCSINode(t, client)
	if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].Kind != "Node" || cn.OwnerReferences[0].UID != "uid-1" || cn.OwnerReferences[0].APIVersion != "v1" {
		t.Errorf("CSINode owners %+v, want the Node", cn.OwnerReferences)
	}
	if cn.Annotations[v1.MigratedPluginsAnnotationKey] != migratedPlugins {
		t.Errorf("migrated plugins %q", cn.Annotations[v1.MigratedPluginsAnnotationKey])
	}
	if len(cn.Spec.Drivers) != 2 {
		t.Fatalf("CSINode drivers %+v, want 2", cn.Spec.Drivers)
	}
	a := cn.Spec.Drivers[0]
	if a.Name != "a.csi.example.com" || a.NodeID != "node-a" || strings.Join(a.TopologyKeys, ",") != "topology.example.com/node,topology.example.com/zone" ||
		a.Allocatable == nil || *a.Allocatable.Count != 7 {
		t.Errorf("driver a %+v", a)
	}
	if b := cn.Spec.Drivers[1]; b.Name != "b.csi.example.com" || b.NodeID != "node-b" || b.Allocatable != nil || len(b.TopologyKeys) != 0 {
		t.Errorf("driver b %+v", b)
	}

	// The volume plugin's client reaches the driver.
	nc, err := d.NodeClient("a.csi.example.com")
	if err != nil {
		t.Fatal(err)
	}
	info, err := nc.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || info.NodeId != "node-a" {
		t.Fatalf("NodeGetInfo through NodeClient: %v, %v", info, err)
	}
	if n, err := testutil.GatherAndCount(reg, "csi_operations_seconds"); err != nil || n != 2 {
		t.Errorf("csi_operations_seconds series %d, %v; want one per driver", n, err)
	}
	if got := strings.Join(d.Registered(), ","); got != "a.csi.example.com,b.csi.example.com" {
		t.Errorf("Registered() = %s", got)
	}

	// A registration again with the same answer changes nothing.
	rv := getCSINode(t, client).ResourceVersion
	d.DeRegisterPlugin(ctx, "a.csi.example.com", "elsewhere") // not its endpoint: ignored
	if getCSINode(t, client).ResourceVersion != rv {
		t.Error("a de-registration of another endpoint changed the CSINode")
	}

	d.DeRegisterPlugin(ctx, "a.csi.example.com", ep)
	if _, err := d.NodeClient("a.csi.example.com"); err == nil || err.Error() != "driver name a.csi.example.com not found in the list of registered CSI drivers" {
		t.Errorf("NodeClient of a de-registered driver: %v", err)
	}
	node = getNode(t, client)
	if got := node.Annotations[AnnotationNodeID]; got != `{"b.csi.example.com":"node-b"}` {
		t.Errorf("annotation after de-registration %s", got)
	}
	if cn := getCSINode(t, client); len(cn.Spec.Drivers) != 1 || cn.Spec.Drivers[0].Name != "b.csi.example.com" {
		t.Errorf("CSINode drivers after de-registration %+v", cn.Spec.Drivers)
	}
	d.DeRegisterPlugin(ctx, "b.csi.example.com", "unix://"+ep2)
	if _, ok := getNode(t, client).Annotations[AnnotationNodeID]; ok {
		t.Error("annotation left after the last driver went")
	}
}

func TestValidateVersions(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newTestDrivers(t)
	if err := d.ValidatePlugin(ctx, "x", "/x.sock", nil); err == nil || !strings.Contains(err.Error(), "empty list for supported versions") {
		t.Errorf("no versions: %v", err)
	}
	if err := d.ValidatePlugin(ctx, "x", "/x.sock", []string{"0.3.0", "2.0.0"}); err == nil || !strings.Contains(err.Error(), "None of the versions specified") {
		t.Errorf("no 1.x version: %v", err)
	}
	ep := startDriver(t, &csipb.NodeGetInfoResponse{NodeId: "id"})
	if err := d.RegisterPlugin(ctx, "x", ep, []string{"1.2.0"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.ValidatePlugin(ctx, "x", "/other.sock", []string{"1.2.0"}); err == nil || !strings.Contains(err.Error(), "already registered with a higher supported version") {
		t.Errorf("same version again: %v", err)
	}
	if err := d.ValidatePlugin(ctx, "x", "/other.sock", []string{"1.3.0"}); err != nil {
		t.Errorf("a newer version: %v", err)
	}
}

func TestRegisterFailuresLeaveTheDriverOut(t *testing.T) {
	ctx := context.Background()
	d, client, _ := newTestDrivers(t)
	short := time.Second

	// No node ID.
	ep := startDriver(t, &csipb.NodeGetInfoResponse{})
	if err := d.RegisterPlugin(ctx, "x", ep, []string{"1.0.0"}, &short); err == nil || !strings.Contains(err.Error(), "driverNodeID must not be empty") {
		t.Errorf("empty node ID: %v", err)
	}
	// A topology label the node has with another value.
	ep = startDriver(t, &csipb.NodeGetInfoResponse{NodeId: "id", AccessibleTopology: &csipb.Topology{Segments: map[string]string{"kubernetes.io/hostname": "other"}}})
	if err := d.RegisterPlugin(ctx, "x", ep, []string{"1.0.0"}, &short); err == nil || !strings.Contains(err.Error(), "detected topology value collision") {
		t.Errorf("topology collision: %v", err)
	}
	// Nobody listening.
	if err := d.RegisterPlugin(ctx, "x", filepath.Join(t.TempDir(), "none.sock"), []string{"1.0.0"}, &short); err == nil {
		t.Error("a driver not listening registered")
	}
	if _, err := d.NodeClient("x"); err == nil {
		t.Error("a driver that failed to register has a client")
	}
	if _, ok := getNode(t, client).Annotations[AnnotationNodeID]; ok {
		t.Error("a failed registration annotated the node")
	}
}

func TestRunInitializesCSINode(t *testing.T) {
	stale := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "old"}}},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "gone", NodeID: "x"}}},
	}
	d, client, _ := newTestDrivers(t, stale)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cn, err := client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
		if err == nil && len(cn.OwnerReferences) == 1 && cn.OwnerReferences[0].UID == "uid-1" {
			if len(cn.Spec.Drivers) != 0 || cn.Annotations[v1.MigratedPluginsAnnotationKey] != migratedPlugins {
				t.Errorf("CSINode %+v, want empty with the migrated plugins", cn)
			}
			break
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("CSINode not replaced: %+v, %v", cn, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// fakeRegistration is a NodeRegistration whose Node is registered when the
// test closes ch.
type fakeRegistration struct {
	ch      chan struct{}
	node    *v1.Node
	created bool
}

func (f *fakeRegistration) NodeCreated() bool { return f.created }

func (f *fakeRegistration) Registered() <-chan struct{} { return f.ch }

func (f *fakeRegistration) RegisteredNode() *v1.Node {
	select {
	case <-f.ch:
		return f.node
	default:
		return nil
	}
}

// With a Registration, Run waits for the Node to be registered without a
// request and takes the CSINode's owner from it: no GET of the Node.
func TestRunWaitsForTheRegistration(t *testing.T) {
	client := fake.NewClientset()
	reg := &fakeRegistration{ch: make(chan struct{}), node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-2"}}}
	d, err := NewDrivers(DriversOptions{NodeName: "n1", Client: client, Registration: reg})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v before the Node was registered", err)
	case <-time.After(50 * time.Millisecond):
	}
	if n := len(client.Actions()); n != 0 {
		t.Fatalf("%d requests before the Node was registered, want 0: %v", n, client.Actions())
	}
	close(reg.ch)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range client.Actions() {
		got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if want := []string{"get csinodes", "create csinodes"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("requests = %q, want %q", got, want)
	}
	cn, err := client.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].UID != "uid-2" {
		t.Errorf("ownerReferences = %+v, want the registered node's", cn.OwnerReferences)
	}
}

// A Node that registering created has no CSINode of its own yet: Run
// CREATEs it without reading it first; a CSINode left by an earlier Node of
// the name (AlreadyExists) is read, replaced and created again.
func TestRunCreatesTheCSINodeOfANewNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want []string
	}{
		{name: "new", want: []string{"create csinodes"}},
		{
			name: "stale",
			objs: []runtime.Object{&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1", OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "old"}}}}},
			want: []string{"create csinodes", "get csinodes", "delete csinodes", "get csinodes", "create csinodes"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objs...)
			reg := &fakeRegistration{ch: make(chan struct{}), node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-2"}}, created: true}
			close(reg.ch)
			d, err := NewDrivers(DriversOptions{NodeName: "n1", Client: client, Registration: reg})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range client.Actions() {
				got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("requests = %q, want %q", got, tc.want)
			}
			cn, err := client.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].UID != "uid-2" {
				t.Errorf("ownerReferences = %+v, want the registered node's", cn.OwnerReferences)
			}
		})
	}
}
