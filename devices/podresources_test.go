package devices

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func podResourcesDevice(id string, numa ...int64) *podresourcesv1.ContainerDevices {
	d := &podresourcesv1.ContainerDevices{ResourceName: testResource, DeviceIds: []string{id}}
	if len(numa) > 0 {
		d.Topology = &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: numa[0]}}}
	}
	return d
}

func equalDevices(a, b []*podresourcesv1.ContainerDevices) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// The pod resources API's view of the device manager: per device and NUMA
// node (a device on two nodes is two entries, one without topology is one
// entry without it), allocatable the healthy devices whether allocated or
// not, allocations read back from the checkpoint after a restart, and the
// devices of pods no longer active freed by UpdateAllocatedDevices.
func TestPodResourcesDevices(t *testing.T) {
	dir := t.TempDir() + "/device-plugins"
	active := newPodSet()
	devs := []*pluginapi.Device{
		{ID: "dev-0", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 0}}}},
		{ID: "dev-1", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 0}, {ID: 1}}}},
		{ID: "dev-2", Health: pluginapi.Healthy},
		{ID: "dev-3", Health: pluginapi.Unhealthy},
	}
	m, _, _ := startWithPlugin(t, Options{PluginDir: dir, ActivePods: active.active}, &pluginapi.DevicePluginOptions{}, devs)

	allocatable := []*podresourcesv1.ContainerDevices{podResourcesDevice("dev-0", 0), podResourcesDevice("dev-1", 0), podResourcesDevice("dev-1", 1), podResourcesDevice("dev-2")}
	if got := m.AllocatableDevices(); !equalDevices(got, allocatable) {
		t.Errorf("AllocatableDevices = %v, want %v", got, allocatable)
	}

	pod := testPod("uid-1", 3)
	active.add(pod)
	if err := m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if got := m.AllocatableDevices(); !equalDevices(got, allocatable) {
		t.Errorf("AllocatableDevices after an allocation = %v, want it unchanged %v", got, allocatable)
	}
	if got := m.ContainerDevices("uid-1", "c"); !equalDevices(got, allocatable) {
		t.Errorf("ContainerDevices = %v, want %v", got, allocatable)
	}
	if got := m.ContainerDevices("uid-1", "other"); got != nil {
		t.Errorf("ContainerDevices of a container without devices = %v, want nil", got)
	}

	// A new manager reads the allocation from the checkpoint.
	m2, err := New(Options{PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.ContainerDevices("uid-1", "c"); !equalDevices(got, allocatable) {
		t.Errorf("ContainerDevices after a restart = %v, want %v", got, allocatable)
	}
	if got := m2.AllocatableDevices(); len(got) != 0 {
		t.Errorf("AllocatableDevices after a restart, before the plugin registers = %v, want none", got)
	}

	active.remove(pod.UID)
	m.UpdateAllocatedDevices()
	if got := m.ContainerDevices("uid-1", "c"); got != nil {
		t.Errorf("ContainerDevices of a pod no longer active = %v, want nil", got)
	}
}

// A pod holding devices is fitted on a node whose allocatable counts the
// allocated devices, not the 0 of a plugin that has not registered again;
// other pods, and resources with enough allocatable, see the node as is.
func TestNodeForAdmission(t *testing.T) {
	dir := t.TempDir() + "/device-plugins"
	m, _, _ := startWithPlugin(t, Options{PluginDir: dir}, &pluginapi.DevicePluginOptions{}, devices(4))
	for _, uid := range []string{"uid-1", "uid-2"} {
		if err := m.Allocate(context.Background(), testPod(uid, 2)); err != nil {
			t.Fatal(err)
		}
	}
	node := &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{testResource: resource.MustParse("0"), v1.ResourceCPU: resource.MustParse("2")}}}
	got := m.NodeForAdmission(testPod("uid-1", 2), node)
	if q := got.Status.Allocatable[testResource]; q.Value() != 4 {
		t.Errorf("allocatable for a pod holding devices = %s, want the 4 allocated", q.String())
	}
	if q := got.Status.Allocatable[v1.ResourceCPU]; q.String() != "2" {
		t.Errorf("cpu allocatable = %s, want it kept", q.String())
	}
	if q := node.Status.Allocatable[testResource]; q.Value() != 0 {
		t.Errorf("the node passed in was modified: %s", q.String())
	}
	if got := m.NodeForAdmission(testPod("uid-3", 2), node); got != node {
		t.Error("a pod without devices got another node")
	}
	enough := &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{testResource: resource.MustParse("4")}}}
	if got := m.NodeForAdmission(testPod("uid-1", 2), enough); got != enough {
		t.Error("a node with enough allocatable was copied")
	}
}
