package devices

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestAllocatedResourcesStatus(t *testing.T) {
	active := newPodSet()
	opts := Options{PluginDir: filepath.Join(t.TempDir(), "device-plugins"), ActivePods: active.active}
	// dev-3 unhealthy from the start: never allocated.
	m, p, _ := startWithPlugin(t, opts, &pluginapi.DevicePluginOptions{}, devices(4, "dev-3"))
	pod := testPod("a", 2)
	active.add(pod)
	if err := m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	ids := m.ContainerDevices("a", "c")
	if len(ids) != 2 {
		t.Fatalf("allocated %v", ids)
	}
	a, b := ids[0].DeviceIds[0], ids[1].DeviceIds[0]
	other := v1.ResourceStatus{Name: "claim:gpu", Resources: []v1.ResourceHealth{{ResourceID: "x", Health: v1.ResourceHealthStatusUnknown}}}
	status := func() []v1.ResourceStatus {
		s := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "c", AllocatedResourcesStatus: []v1.ResourceStatus{other}}, {Name: "sidecar"}}}
		m.UpdateAllocatedResourcesStatus(pod, s)
		if s.ContainerStatuses[1].AllocatedResourcesStatus != nil {
			t.Errorf("a container without devices got %v", s.ContainerStatuses[1].AllocatedResourcesStatus)
		}
		return s.ContainerStatuses[0].AllocatedResourcesStatus
	}
	want := []v1.ResourceStatus{other, {Name: testResource, Resources: []v1.ResourceHealth{
		{ResourceID: v1.ResourceID(a), Health: v1.ResourceHealthStatusHealthy},
		{ResourceID: v1.ResourceID(b), Health: v1.ResourceHealthStatusHealthy},
	}}}
	if got := status(); !reflect.DeepEqual(got, want) {
		t.Errorf("allocatedResourcesStatus %v, want %v", got, want)
	}

	// The plugin reports one of the pod's devices unhealthy: the pod is
	// synced and its status says so.
	devs := devices(4, "dev-3", b)
	p.updates <- devs
	select {
	case uid := <-m.HealthUpdates():
		if uid != types.UID("a") {
			t.Errorf("health update for pod %s, want a", uid)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no health update for the pod whose device turned unhealthy")
	}
	want[1].Resources[1].Health = v1.ResourceHealthStatusUnhealthy
	if got := status(); !reflect.DeepEqual(got, want) {
		t.Errorf("allocatedResourcesStatus after %s turned unhealthy: %v, want %v", b, got, want)
	}
	// A change of a device no pod holds syncs nobody.
	p.updates <- devices(4, b)
	waitCounts(t, m, 4, 3)
	select {
	case uid := <-m.HealthUpdates():
		t.Errorf("health update for pod %s after a free device changed", uid)
	default:
	}
}
