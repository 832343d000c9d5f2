package devices

import (
	"errors"
	"slices"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// healthUpdatesBuffer is how many pods whose devices changed health may
// wait for the pod lifecycle loop, as the kubelet's update channel.
const healthUpdatesBuffer = 100

// The Manager as the pod lifecycle loop's pods.ResourceHealthProvider: the
// kubelet's ResourceHealthStatus (beta, on by default in 1.37) for device
// plugins.

// UpdateAllocatedResourcesStatus sets, in each of status's container
// statuses, one allocatedResourcesStatus entry per device plugin resource
// allocated to the container: its devices, by ID, Healthy or Unhealthy as
// the plugin last reported them (Healthy when it never did), as the
// kubelet's device manager. Entries of other resources are kept.
func (m *Manager) UpdateAllocatedResourcesStatus(pod *v1.Pod, status *v1.PodStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[i]
		resources := m.pods[string(pod.UID)][cs.Name]
		names := make([]string, 0, len(resources))
		for res := range resources {
			names = append(names, res)
		}
		slices.Sort(names)
		for _, res := range names {
			rs := v1.ResourceStatus{Name: v1.ResourceName(res), Resources: []v1.ResourceHealth{}}
			for _, id := range sets.List(idSet(resources[res].ids)) {
				health := v1.ResourceHealthStatusHealthy
				if d := m.all[res][id]; d != nil && d.Health != pluginapi.Healthy {
					health = v1.ResourceHealthStatusUnhealthy
				}
				rs.Resources = append(rs.Resources, v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: health})
			}
			if cs.AllocatedResourcesStatus == nil {
				cs.AllocatedResourcesStatus = []v1.ResourceStatus{}
			}
			if j := slices.IndexFunc(cs.AllocatedResourcesStatus, func(s v1.ResourceStatus) bool { return s.Name == rs.Name }); j >= 0 {
				cs.AllocatedResourcesStatus[j] = rs
			} else {
				cs.AllocatedResourcesStatus = append(cs.AllocatedResourcesStatus, rs)
			}
		}
	}
}

// HealthUpdates delivers the UID of each pod one of whose allocated
// devices changed health, or came back after its plugin had dropped it,
// in a ListAndWatch update; the pod lifecycle loop syncs the pod so its
// status follows. A pod is dropped (and logged) when the channel's buffer
// is full.
func (m *Manager) HealthUpdates() <-chan types.UID { return m.healthUpdates }

// podsWithHealthChange returns the pods holding a device of res whose
// health differs between old and devs, or that is new in devs. Called
// with mu held.
func (m *Manager) podsWithHealthChange(res string, old map[string]*pluginapi.Device, devs []*pluginapi.Device) sets.Set[types.UID] {
	changed := sets.New[string]()
	for _, d := range devs {
		if o, ok := old[d.ID]; !ok || o.Health != d.Health {
			changed.Insert(d.ID)
		}
	}
	out := sets.New[types.UID]()
	if changed.Len() == 0 {
		return out
	}
	for uid, containers := range m.pods {
		for _, resources := range containers {
			if a, ok := resources[res]; ok && idSet(a.ids).HasAny(sets.List(changed)...) {
				out.Insert(types.UID(uid))
			}
		}
	}
	return out
}

// notifyHealth sends the pods on HealthUpdates without blocking.
func (m *Manager) notifyHealth(log logr.Logger, pods sets.Set[types.UID]) {
	for _, uid := range sets.List(pods) {
		select {
		case m.healthUpdates <- uid:
		default:
			log.Error(errors.New("device update channel is full"), "Discarding a pod's device health update", "podUID", uid)
		}
	}
}
