package csi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/mount-utils"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/volume"
)

// fakeNode is a CSI node service on a fake mounter: staging and publishing
// record a mount, unpublishing and unstaging remove it, as a hostpath
// driver does. Its calls are logged; fail makes the next calls of a method
// fail.
type fakeNode struct {
	csipb.NodeClient // nil: unexpected calls panic
	mounter          *mount.FakeMounter
	stage            bool

	mu        sync.Mutex
	calls     []string
	publish   []*csipb.NodePublishVolumeRequest
	stageReq  []*csipb.NodeStageVolumeRequest
	statsReq  []*csipb.NodeGetVolumeStatsRequest
	expandReq []*csipb.NodeExpandVolumeRequest
	noStats   bool
	fail      map[string]error
}

func (f *fakeNode) record(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method)
	return f.fail[method]
}

func (f *fakeNode) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.DeleteFunc(f.calls, func(c string) bool { return c == "NodeGetCapabilities" })
	f.calls = nil
	return out
}

func (f *fakeNode) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest, ...grpc.CallOption) (*csipb.NodeGetCapabilitiesResponse, error) {
	if err := f.record("NodeGetCapabilities"); err != nil {
		return nil, err
	}
	resp := &csipb.NodeGetCapabilitiesResponse{}
	capability := func(t csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
		return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}}
	}
	if f.stage {
		resp.Capabilities = append(resp.Capabilities, capability(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME))
	}
	if !f.noStats {
		resp.Capabilities = append(resp.Capabilities, capability(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS))
	}
	resp.Capabilities = append(resp.Capabilities, capability(csipb.NodeServiceCapability_RPC_EXPAND_VOLUME))
	return resp, nil
}

func (f *fakeNode) NodeGetVolumeStats(_ context.Context, r *csipb.NodeGetVolumeStatsRequest, _ ...grpc.CallOption) (*csipb.NodeGetVolumeStatsResponse, error) {
	if err := f.record("NodeGetVolumeStats"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.statsReq = append(f.statsReq, r)
	f.mu.Unlock()
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Available: 700, Total: 1000, Used: 300},
		{Unit: csipb.VolumeUsage_INODES, Available: 90, Total: 100, Used: 10},
	}}, nil
}

func (f *fakeNode) NodeExpandVolume(_ context.Context, r *csipb.NodeExpandVolumeRequest, _ ...grpc.CallOption) (*csipb.NodeExpandVolumeResponse, error) {
	if err := f.record("NodeExpandVolume"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.expandReq = append(f.expandReq, r)
	f.mu.Unlock()
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: r.CapacityRange.RequiredBytes}, nil
}

func (f *fakeNode) NodeStageVolume(_ context.Context, r *csipb.NodeStageVolumeRequest, _ ...grpc.CallOption) (*csipb.NodeStageVolumeResponse, error) {
	if err := f.record("NodeStageVolume"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.stageReq = append(f.stageReq, r)
	f.mu.Unlock()
	return &csipb.NodeStageVolumeResponse{}, f.mounter.Mount("/dev/"+r.VolumeId, r.StagingTargetPath, "ext4", nil)
}

func (f *fakeNode) NodeUnstageVolume(_ context.Context, r *csipb.NodeUnstageVolumeRequest, _ ...grpc.CallOption) (*csipb.NodeUnstageVolumeResponse, error) {
	if err := f.record("NodeUnstageVolume"); err != nil {
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, f.mounter.Unmount(r.StagingTargetPath)
}

func (f *fakeNode) NodePublishVolume(_ context.Context, r *csipb.NodePublishVolumeRequest, _ ...grpc.CallOption) (*csipb.NodePublishVolumeResponse, error) {
	if err := f.record("NodePublishVolume"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.publish = append(f.publish, r)
	f.mu.Unlock()
	if err := os.MkdirAll(r.TargetPath, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if notMnt, _ := f.mounter.IsLikelyNotMountPoint(r.TargetPath); !notMnt {
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	src := r.StagingTargetPath
	if src == "" {
		src = "/dev/" + r.VolumeId
	}
	return &csipb.NodePublishVolumeResponse{}, f.mounter.Mount(src, r.TargetPath, "", []string{"bind"})
}

func (f *fakeNode) NodeUnpublishVolume(_ context.Context, r *csipb.NodeUnpublishVolumeRequest, _ ...grpc.CallOption) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := f.record("NodeUnpublishVolume"); err != nil {
		return nil, err
	}
	if err := f.mounter.Unmount(r.TargetPath); err != nil {
		return nil, err
	}
	return &csipb.NodeUnpublishVolumeResponse{}, os.Remove(r.TargetPath)
}

// fakeDrivers is the registry: the drivers registered by name.
type fakeDrivers struct {
	mu      sync.Mutex
	clients map[string]csipb.NodeClient
}

func (d *fakeDrivers) NodeClient(name string) (csipb.NodeClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.clients[name]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
}

func (d *fakeDrivers) set(name string, c csipb.NodeClient) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clients[name] = c
}

const testDriver = "hostpath.csi.example.com"

// fixture is a volume.Manager with the CSI plugin on fakes.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	root     string
	client   *fake.Clientset
	mounter  *mount.FakeMounter
	clock    *clocktesting.FakeClock
	recorder *record.FakeRecorder
	node     *fakeNode
	drivers  *fakeDrivers
	plugin   *Plugin
	m        *volume.Manager
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	_, ctx := ktesting.NewTestContext(t)
	f := &fixture{t: t, ctx: ctx, root: t.TempDir(), client: fake.NewClientset(objs...), mounter: mount.NewFakeMounter(nil),
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), recorder: record.NewFakeRecorder(100)}
	f.node = &fakeNode{mounter: f.mounter, stage: true}
	f.drivers = &fakeDrivers{clients: map[string]csipb.NodeClient{testDriver: f.node}}
	f.restart(nil)
	return f
}

// restart builds a new plugin and Manager on the same root and mounts, as
// an agent restarted.
func (f *fixture) restart(podKnown func(types.UID) bool) {
	var err error
	f.plugin, err = NewPlugin(PluginOptions{RootDir: f.root, NodeName: "node-1", Drivers: f.drivers, Client: f.client})
	if err != nil {
		f.t.Fatal(err)
	}
	f.m, err = volume.New(volume.Options{RootDir: f.root, NodeName: "node-1", Client: f.client, Mounter: f.mounter,
		Clock: f.clock, Recorder: f.recorder, Plugins: []volume.Plugin{f.plugin}, PodKnown: podKnown})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// nextEvent waits for the next event.
func (f *fixture) nextEvent(t *testing.T) string {
	t.Helper()
	select {
	case e := <-f.recorder.Events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
		return ""
	}
}

func boolPtr(b bool) *bool { return &b }

func csiDriverObject(attach bool, modes ...storagev1.VolumeLifecycleMode) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: boolPtr(attach), PodInfoOnMount: boolPtr(true), VolumeLifecycleModes: modes}}
}

// claimAndPV is a claim "data" in namespace ns bound to a CSI PV.
func claimAndPV(pvName, handle string) []runtime.Object {
	return []runtime.Object{
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "claim-1"},
			Spec: v1.PersistentVolumeClaimSpec{VolumeName: pvName}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}},
		&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: handle,
				FSType: "ext4", VolumeAttributes: map[string]string{"size": "1Gi"}}},
			AccessModes:  []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			MountOptions: []string{"noatime"},
			ClaimRef:     &v1.ObjectReference{Namespace: "ns", Name: "data", UID: "claim-1"}}},
	}
}

func claimPod(uid types.UID, name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: uid, ResourceVersion: "1"},
		Spec: v1.PodSpec{ServiceAccountName: "sa",
			Containers: []v1.Container{{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "vol", MountPath: "/data"}}}},
			Volumes: []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
}

func readJSON(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestStagePublishUnpublishUnstage: two pods share a CSI PV: it is staged
// once, published for each with the kubelet's paths and vol_data.json, and
// unstaged only after the second pod's teardown; nothing is left on disk.
func TestStagePublishUnpublishUnstage(t *testing.T) {
	f := newFixture(t, append(claimAndPV("pv-1", "vol-1"), csiDriverObject(false))...)
	got, err := f.m.MountPod(f.ctx, claimPod("u1", "web-0"))
	if err != nil {
		t.Fatal(err)
	}
	volDir := filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~csi", "pv-1")
	staging := stagingPath(f.root, testDriver, "vol-1")
	if want := filepath.Join(f.root, "plugins", "kubernetes.io", "csi", testDriver, fmt.Sprintf("%x", sha256.Sum256([]byte("vol-1"))), "globalmount"); staging != want {
		t.Errorf("staging path %s, want %s", staging, want)
	}
	if !exists(staging) {
		t.Errorf("staging path %s not made", staging)
	}
	if m := got["vol"]; m.Path != filepath.Join(volDir, "mount") || m.ReadOnly || !m.SELinuxRelabel {
		t.Errorf("mounted %+v", m)
	}
	if c := f.node.takeCalls(); !slices.Equal(c, []string{"NodeStageVolume", "NodePublishVolume"}) {
		t.Errorf("calls %v, want stage then publish", c)
	}
	wantData := fmt.Sprintf(`{"attachmentID":"%s","driverName":"%s","nodeName":"node-1","specVolID":"pv-1","volumeHandle":"vol-1","volumeLifecycleMode":"Persistent"}`,
		attachmentName("vol-1", testDriver, "node-1"), testDriver)
	if d := readJSON(t, filepath.Join(volDir, "vol_data.json")); d != wantData {
		t.Errorf("vol_data.json %s\nwant %s", d, wantData)
	}
	if d := readJSON(t, filepath.Join(filepath.Dir(staging), "vol_data.json")); d != `{"driverName":"`+testDriver+`","volumeHandle":"vol-1"}` {
		t.Errorf("staging vol_data.json %s", d)
	}
	pub := f.node.publish[0]
	if pub.StagingTargetPath != staging || pub.TargetPath != filepath.Join(volDir, "mount") || pub.Readonly ||
		pub.VolumeCapability.GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER ||
		!slices.Equal(pub.VolumeCapability.GetMount().GetMountFlags(), []string{"noatime"}) || pub.VolumeCapability.GetMount().GetFsType() != "ext4" {
		t.Errorf("NodePublishVolume %v", pub)
	}
	for k, v := range map[string]string{"size": "1Gi", "csi.storage.k8s.io/pod.name": "web-0", "csi.storage.k8s.io/pod.namespace": "ns",
		"csi.storage.k8s.io/pod.uid": "u1", "csi.storage.k8s.io/serviceAccount.name": "sa", "csi.storage.k8s.io/ephemeral": "false"} {
		if pub.VolumeContext[k] != v {
			t.Errorf("volume context %s=%q, want %q", k, pub.VolumeContext[k], v)
		}
	}
	// The second pod: published only.
	if _, err := f.m.MountPod(f.ctx, claimPod("u2", "web-1")); err != nil {
		t.Fatal(err)
	}
	if c := f.node.takeCalls(); !slices.Equal(c, []string{"NodePublishVolume"}) {
		t.Errorf("second pod's calls %v, want a publish only", c)
	}
	// The first pod goes: unpublished, still staged for the second.
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if c := f.node.takeCalls(); !slices.Equal(c, []string{"NodeUnpublishVolume"}) {
		t.Errorf("first teardown's calls %v, want an unpublish only", c)
	}
	if exists(volDir) {
		t.Errorf("%s left after the teardown", volDir)
	}
	// The last pod goes: unpublished and unstaged.
	if err := f.m.UnmountPod(f.ctx, "u2"); err != nil {
		t.Fatal(err)
	}
	if c := f.node.takeCalls(); !slices.Equal(c, []string{"NodeUnpublishVolume", "NodeUnstageVolume"}) {
		t.Errorf("last teardown's calls %v, want unpublish then unstage", c)
	}
	if exists(filepath.Dir(staging)) {
		t.Errorf("staging directory %s left", filepath.Dir(staging))
	}
	if mps, _ := f.mounter.List(); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
}

// TestDriverNotRegistered: FailedMount with the kubelet's message while the
// driver is not registered, mounted after a back-off once it is; a
// teardown while it is gone fails and keeps the volume.
func TestDriverNotRegistered(t *testing.T) {
	f := newFixture(t, append(claimAndPV("pv-1", "vol-1"), csiDriverObject(false))...)
	f.drivers.set(testDriver, nil)
	pod := claimPod("u1", "web-0")
	_, err := f.m.MountPod(f.ctx, pod)
	want := `MountVolume.SetUp failed for volume "pv-1" : kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name ` + testDriver + ` not found in the list of registered CSI drivers`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("MountPod: %v, want ...%s", err, want)
	}
	if e := f.events(); len(e) != 1 || e[0] != "Warning FailedMount "+want {
		t.Errorf("events %q", e)
	}
	// The driver fails the publish: its error is the event's.
	f.drivers.set(testDriver, f.node)
	f.node.fail = map[string]error{"NodePublishVolume": status.Error(codes.Internal, "no space left on the pool")}
	f.clock.Step(time.Second)
	if _, err := f.m.MountPod(f.ctx, pod); err == nil {
		t.Fatal("MountPod succeeded while the driver fails the publish")
	}
	if e := f.events(); len(e) != 1 || e[0] != `Warning FailedMount MountVolume.SetUp failed for volume "pv-1" : rpc error: code = Internal desc = no space left on the pool` {
		t.Errorf("events %q", e)
	}
	f.node.fail = nil
	f.clock.Step(2 * time.Second)
	if _, err := f.m.MountPod(f.ctx, pod); err != nil {
		t.Fatal(err)
	}
	// The driver goes away (killed): the teardown waits for it.
	f.drivers.set(testDriver, nil)
	if err := f.m.UnmountPod(f.ctx, "u1"); err == nil || !strings.Contains(err.Error(), "not found in the list of registered CSI drivers") {
		t.Errorf("UnmountPod without the driver: %v", err)
	}
	target := filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~csi", "pv-1", "mount")
	if notMnt, err := f.mounter.IsLikelyNotMountPoint(target); err != nil || notMnt {
		t.Errorf("the publish target after a failed teardown: not mounted %v, %v", notMnt, err)
	}
	// A driver error is returned with its message.
	f.drivers.set(testDriver, f.node)
	f.node.fail = map[string]error{"NodeUnpublishVolume": status.Error(codes.Internal, "disk on fire")}
	if err := f.m.UnmountPod(f.ctx, "u1"); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("UnmountPod with a failing driver: %v", err)
	}
	f.node.fail = nil
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
}

// TestAttachRequired: without a CSIDriver the volume is attachable: it is
// reported in volumesInUse at once, waits (no event, listed among the
// unattached volumes) until the node status lists it in volumesInUse and
// volumesAttached, as the kubelet's VerifyControllerAttachedVolume, then
// for its VolumeAttachment to be attached before staging; the attachment's
// metadata is the publish context.
func TestAttachRequired(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	f := newFixture(t, append(claimAndPV("pv-1", "vol-1"), node)...)
	pod := claimPod("u1", "web-0")
	id := attachmentName("vol-1", testDriver, "node-1")
	unique := v1.UniqueVolumeName("kubernetes.io/csi/" + testDriver + "^vol-1")
	mountWants := func(want string) {
		t.Helper()
		f.clock.Step(3 * time.Minute)
		_, err := f.m.MountPod(f.ctx, pod)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("MountPod: %v, want ...%s", err, want)
		}
	}
	mountWants(`unmounted volumes=[vol], unattached volumes=[vol], failed to process volumes=[]: Volume has not been added to the list of VolumesInUse in the node's volume status for volume "pv-1"`)
	if inUse := f.m.VolumesInUse(); !slices.Equal(inUse, []v1.UniqueVolumeName{unique}) {
		t.Errorf("volumesInUse while waiting for the attachment %v, want %s", inUse, unique)
	}
	setStatus := func(st v1.NodeStatus) {
		node.Status = st
		if _, err := f.client.CoreV1().Nodes().UpdateStatus(f.ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(v1.NodeStatus{VolumesInUse: []v1.UniqueVolumeName{unique}})
	mountWants(`unattached volumes=[vol], failed to process volumes=[]: Volume not attached according to node status for volume "pv-1"`)
	// Only the pod's summary, once it waited 2m3s: no event per try.
	if e := f.events(); len(e) != 1 || !strings.HasPrefix(e[0], "Warning FailedMount Unable to attach or mount volumes: unmounted volumes=[vol], unattached volumes=[vol]") {
		t.Errorf("events %q, want the one summary", e)
	}

	// The node says attached, the VolumeAttachment does not (yet): the
	// kubelet's WaitForAttach failure.
	setStatus(v1.NodeStatus{VolumesInUse: []v1.UniqueVolumeName{unique}, VolumesAttached: []v1.AttachedVolume{{Name: unique}}})
	want := fmt.Sprintf(`volume vol-1 has GET error for volume attachment %s: volumeattachments.storage.k8s.io "%s" not found`, id, id)
	mountWants(want)
	if e := f.events(); len(e) == 0 || e[0] != `Warning FailedMount MountVolume.WaitForAttach failed for volume "pv-1" : `+want {
		t.Errorf("events %q", e)
	}
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: id}}
	f.client.StorageV1().VolumeAttachments().Create(f.ctx, va, metav1.CreateOptions{})
	mountWants(fmt.Sprintf("volume vol-1 is not attached for volume attachment %s", id))
	if c := f.node.takeCalls(); len(c) != 0 {
		t.Errorf("driver calls before the volume is attached: %v", c)
	}
	va.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"devicePath": "/dev/xvdb"}}
	f.client.StorageV1().VolumeAttachments().Update(f.ctx, va, metav1.UpdateOptions{})
	f.clock.Step(3 * time.Minute)
	if _, err := f.m.MountPod(f.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if f.node.stageReq[0].PublishContext["devicePath"] != "/dev/xvdb" || f.node.publish[0].PublishContext["devicePath"] != "/dev/xvdb" {
		t.Errorf("publish context %v / %v", f.node.stageReq[0].PublishContext, f.node.publish[0].PublishContext)
	}
	if inUse := f.m.VolumesInUse(); !slices.Equal(inUse, []v1.UniqueVolumeName{unique}) {
		t.Errorf("volumesInUse %v", inUse)
	}
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if inUse := f.m.VolumesInUse(); len(inUse) != 0 {
		t.Errorf("volumesInUse after the pod's teardown %v, want none", inUse)
	}
}

// TestRestartReportsAttachedVolumesInUse: an agent restarted with an
// attachable CSI volume mounted reports it in volumesInUse from the start,
// before any pod mounts it again (as the kubelet reports its reconstructed
// volumes), so the attach/detach controller cannot detach it; a volume of
// a driver that needs no attachment is not reported; the volume torn down,
// it is no longer reported.
func TestRestartReportsAttachedVolumesInUse(t *testing.T) {
	unique := v1.UniqueVolumeName("kubernetes.io/csi/" + testDriver + "^vol-1")
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: v1.NodeStatus{
		VolumesInUse: []v1.UniqueVolumeName{unique}, VolumesAttached: []v1.AttachedVolume{{Name: unique}}}}
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachmentName("vol-1", testDriver, "node-1")},
		Status: storagev1.VolumeAttachmentStatus{Attached: true}}
	f := newFixture(t, append(claimAndPV("pv-1", "vol-1"), node, va, csiDriverObject(true))...)
	if _, err := f.m.MountPod(f.ctx, claimPod("u1", "web-0")); err != nil {
		t.Fatal(err)
	}

	f.restart(func(types.UID) bool { return true })
	if f.m.ReconcilerSynced() {
		t.Fatal("synced before Run")
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error)
	go func() { done <- f.m.Run(ctx) }()
	for !f.m.ReconcilerSynced() {
		time.Sleep(time.Millisecond)
	}
	if got := f.m.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{unique}) {
		t.Errorf("volumesInUse after the restart, before any pod mounted again: %v, want %s", got, unique)
	}
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := f.m.VolumesInUse(); len(got) != 0 {
		t.Errorf("volumesInUse after the teardown: %v", got)
	}

	// A driver that needs no attachment: not reported.
	if err := f.client.StorageV1().CSIDrivers().Delete(f.ctx, testDriver, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.StorageV1().CSIDrivers().Create(f.ctx, csiDriverObject(false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.MountPod(f.ctx, claimPod("u2", "web-1")); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	f.restart(nil)
	ctx2, cancel2 := context.WithCancel(f.ctx)
	defer cancel2()
	done2 := make(chan error)
	go func() { done2 <- f.m.Run(ctx2) }()
	for !f.m.ReconcilerSynced() {
		time.Sleep(time.Millisecond)
	}
	if got := f.m.VolumesInUse(); len(got) != 0 {
		t.Errorf("volumesInUse of a volume needing no attachment: %v", got)
	}
	cancel2()
	<-done2
}

// TestRestartReconstruction: an agent restarted with a CSI volume mounted
// adopts it for its pod without a driver call, and tears down through the
// driver (unpublish, unstage) the volume of a pod that is gone.
func TestRestartReconstruction(t *testing.T) {
	f := newFixture(t, append(claimAndPV("pv-1", "vol-1"), csiDriverObject(false))...)
	if _, err := f.m.MountPod(f.ctx, claimPod("u1", "web-0")); err != nil {
		t.Fatal(err)
	}
	f.node.takeCalls()

	// Restarted, the pod still runs, its driver not registered again yet:
	// nothing is mounted again.
	f.restart(nil)
	f.drivers.set(testDriver, nil)
	if _, err := f.m.MountPod(f.ctx, claimPod("u1", "web-0")); err != nil {
		t.Fatal(err)
	}
	if c := f.node.takeCalls(); len(c) != 0 {
		t.Errorf("calls for a volume mounted before the restart: %v, want none", c)
	}

	// Restarted again, the pod is gone: the orphan's volume is torn down.
	f.drivers.set(testDriver, f.node)
	f.restart(func(types.UID) bool { return false })
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error)
	go func() { done <- f.m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	podDir := filepath.Join(f.root, "pods", "u1")
	deadline := time.Now().Add(10 * time.Second)
	for exists(podDir) {
		if time.Now().After(deadline) {
			t.Fatalf("orphaned pod directory %s not removed", podDir)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c := f.node.takeCalls(); !slices.Equal(c, []string{"NodeUnpublishVolume", "NodeUnstageVolume"}) {
		t.Errorf("orphan teardown calls %v, want unpublish then unstage", c)
	}
	if mps, _ := f.mounter.List(); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
}

// TestInlineEphemeralVolume: an inline CSI volume is published (never
// staged) with the kubelet's handle, when the CSIDriver allows the
// Ephemeral mode; otherwise it is refused.
func TestInlineEphemeralVolume(t *testing.T) {
	drv := csiDriverObject(false)
	f := newFixture(t, drv)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "inline", Namespace: "ns", UID: "u1", ResourceVersion: "1"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "scratch", MountPath: "/s"}}}},
			Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: testDriver,
				VolumeAttributes: map[string]string{"k": "v"}}}}}}}
	_, err := f.m.MountPod(f.ctx, pod)
	if err == nil || !strings.Contains(err.Error(), `volume mode "Ephemeral" not supported by driver`) {
		t.Fatalf("MountPod with a Persistent-only driver: %v", err)
	}
	drv.Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}
	f.client.StorageV1().CSIDrivers().Update(f.ctx, drv, metav1.UpdateOptions{})
	f.clock.Step(time.Second)
	got, err := f.m.MountPod(f.ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~csi", "scratch", "mount"); got["scratch"].Path != want {
		t.Errorf("path %s, want %s", got["scratch"].Path, want)
	}
	if c := f.node.takeCalls(); !slices.Equal(c, []string{"NodePublishVolume"}) {
		t.Errorf("calls %v, want a publish only", c)
	}
	pub := f.node.publish[0]
	if pub.VolumeId != ephemeralHandle("u1", "scratch") || pub.StagingTargetPath != "" || pub.VolumeContext["csi.storage.k8s.io/ephemeral"] != "true" || pub.VolumeContext["k"] != "v" {
		t.Errorf("NodePublishVolume %v", pub)
	}
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if c := f.node.takeCalls(); !slices.Equal(c, []string{"NodeUnpublishVolume"}) {
		t.Errorf("teardown calls %v, want an unpublish only", c)
	}
	if _, err := os.Stat(filepath.Join(f.root, "plugins", "kubernetes.io", "csi")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a staging directory was made for an inline volume: %v", err)
	}
}

// TestVolumeStats: a published volume's figures come from the driver's
// NodeGetVolumeStats with the target and staging paths; a driver without
// GET_VOLUME_STATS reports none.
func TestVolumeStats(t *testing.T) {
	f := newFixture(t, append(claimAndPV("pv-1", "vol-1"), csiDriverObject(false))...)
	got, err := f.m.MountPod(f.ctx, claimPod("u1", "web-0"))
	if err != nil {
		t.Fatal(err)
	}
	target := got["vol"].Path
	fs, ok, err := f.plugin.VolumeStats(f.ctx, target)
	if err != nil || !ok {
		t.Fatalf("VolumeStats: %v, %v", ok, err)
	}
	if *fs.AvailableBytes != 700 || *fs.CapacityBytes != 1000 || *fs.UsedBytes != 300 || *fs.InodesFree != 90 || *fs.Inodes != 100 || *fs.InodesUsed != 10 || fs.Time.IsZero() {
		t.Errorf("stats %+v", fs)
	}
	if r := f.node.statsReq[0]; r.VolumeId != "vol-1" || r.VolumePath != target || r.StagingTargetPath != stagingPath(f.root, testDriver, "vol-1") {
		t.Errorf("NodeGetVolumeStats %v", r)
	}
	f.node.noStats = true
	if _, ok, err := f.plugin.VolumeStats(f.ctx, target); ok || err != nil {
		t.Errorf("VolumeStats without GET_VOLUME_STATS: %v, %v; want none", ok, err)
	}
	if pv := f.m.PodVolumes("u1"); len(pv) != 1 || pv[0].PVC == nil || pv[0].PVC.Name != "data" || pv[0].PV.Name != "pv-1" {
		t.Errorf("PodVolumes %+v, want the claim and PV", pv)
	}
}

// TestOnlineExpansion: a mounted claim whose PV grew and that waits for the
// node is expanded with NodeExpandVolume at the next resync and its status
// records the new capacity, as the kubelet's; a driver failure is a
// VolumeResizeFailed event and a NodeResizeError condition, retried.
func TestOnlineExpansion(t *testing.T) {
	objs := append(claimAndPV("pv-1", "vol-1"), csiDriverObject(false))
	pvc, pv := objs[0].(*v1.PersistentVolumeClaim), objs[1].(*v1.PersistentVolume)
	pvc.Status.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}
	f := newFixture(t, objs...)
	if _, err := f.m.MountPod(f.ctx, claimPod("u1", "web-0")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error)
	go func() { done <- f.m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The resizer grew the PV and left the claim to the node.
	resize := func(size string) {
		pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse(size)
		f.client.CoreV1().PersistentVolumes().Update(f.ctx, pv, metav1.UpdateOptions{})
		cur, _ := f.client.CoreV1().PersistentVolumeClaims("ns").Get(f.ctx, "data", metav1.GetOptions{})
		cur.Spec.Resources.Requests = v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}
		cur.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
		f.client.CoreV1().PersistentVolumeClaims("ns").UpdateStatus(f.ctx, cur, metav1.UpdateOptions{})
	}
	resync := func(what string, cond func(*v1.PersistentVolumeClaim) bool) *v1.PersistentVolumeClaim {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			cur, _ := f.client.CoreV1().PersistentVolumeClaims("ns").Get(f.ctx, "data", metav1.GetOptions{})
			if cond(cur) {
				return cur
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: claim status %+v", what, cur.Status)
			}
			if f.clock.HasWaiters() {
				f.clock.Step(volume.DefaultResyncPeriod)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	resize("2Gi")
	got := resync("expanded", func(c *v1.PersistentVolumeClaim) bool {
		q := c.Status.Capacity[v1.ResourceStorage]
		return q.Cmp(resource.MustParse("2Gi")) == 0
	})
	if len(got.Status.AllocatedResourceStatuses) != 0 {
		t.Errorf("allocatedResourceStatuses after the expansion: %v", got.Status.AllocatedResourceStatuses)
	}
	f.node.mu.Lock()
	r := f.node.expandReq[0]
	f.node.mu.Unlock()
	if r.VolumeId != "vol-1" || r.CapacityRange.RequiredBytes != 2<<30 || r.StagingTargetPath != stagingPath(f.root, testDriver, "vol-1") ||
		r.VolumePath != filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~csi", "pv-1", "mount") {
		t.Errorf("NodeExpandVolume %v", r)
	}
	if e := f.nextEvent(t); !strings.HasPrefix(e, `Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv-1"`) {
		t.Errorf("event %q", e)
	}

	// The driver fails: the claim says so and the next resync tries again.
	f.node.mu.Lock()
	f.node.fail = map[string]error{"NodeExpandVolume": status.Error(codes.Internal, "pool full")}
	f.node.mu.Unlock()
	resize("3Gi")
	got = resync("failure recorded", func(c *v1.PersistentVolumeClaim) bool {
		return slices.ContainsFunc(c.Status.Conditions, func(c v1.PersistentVolumeClaimCondition) bool {
			return c.Type == v1.PersistentVolumeClaimNodeResizeError && strings.Contains(c.Message, "pool full")
		})
	})
	if got.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInProgress {
		t.Errorf("allocatedResourceStatuses after a failure: %v", got.Status.AllocatedResourceStatuses)
	}
	if e := f.nextEvent(t); !strings.HasPrefix(e, `Warning VolumeResizeFailed NodeExpandVolume.NodeExpandVolume failed for volume "pv-1"`) || !strings.Contains(e, "pool full") {
		t.Errorf("event %q", e)
	}
	f.node.mu.Lock()
	f.node.fail = nil
	f.node.mu.Unlock()
	resync("expanded after the failure", func(c *v1.PersistentVolumeClaim) bool {
		q := c.Status.Capacity[v1.ResourceStorage]
		return q.Cmp(resource.MustParse("3Gi")) == 0 && len(c.Status.Conditions) == 0
	})
}
