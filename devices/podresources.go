package devices

import (
	"cmp"
	"slices"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// The Manager's answers to the pod resources API (package podresources'
// DevicesProvider), as the kubelet's container manager gives them: one
// ContainerDevices per device and NUMA node (a device without topology is
// one entry without Topology), sorted by resource, device ID and NUMA node
// for stable answers.

// UpdateAllocatedDevices frees the devices of pods that are no longer
// active (once the pod sources are ready), as the kubelet does before it
// lists pod resources.
func (m *Manager) UpdateAllocatedDevices() { m.freeInactive() }

// ContainerDevices returns the devices allocated to the named container of
// the pod with UID podUID, by resource, with the NUMA nodes recorded at
// allocation (in the checkpoint); nil when it has none.
func (m *Manager) ContainerDevices(podUID, containerName string) []*podresourcesv1.ContainerDevices {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesv1.ContainerDevices
	for res, a := range m.pods[podUID][containerName] {
		for numa, ids := range a.ids {
			for _, id := range ids {
				out = append(out, containerDevice(res, id, numa))
			}
		}
	}
	sortDevices(out)
	return out
}

// AllocatableDevices returns the healthy devices of every registered
// resource, allocated or not (the pod resources API's allocatable is the
// node's capacity for pods, not what is free), with the NUMA nodes their
// plugin reported.
func (m *Manager) AllocatableDevices() []*podresourcesv1.ContainerDevices {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesv1.ContainerDevices
	for res, devs := range m.all {
		healthy := m.healthy[res]
		for id, d := range devs {
			if !healthy.Has(id) {
				continue
			}
			if d.Topology == nil || len(d.Topology.Nodes) == 0 {
				out = append(out, containerDevice(res, id, nodeWithoutTopology))
				continue
			}
			for _, n := range d.Topology.Nodes {
				out = append(out, containerDevice(res, id, n.ID))
			}
		}
	}
	sortDevices(out)
	return out
}

func containerDevice(res, id string, numa int64) *podresourcesv1.ContainerDevices {
	d := &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: []string{id}}
	if numa != nodeWithoutTopology {
		d.Topology = &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: numa}}}
	}
	return d
}

func sortDevices(ds []*podresourcesv1.ContainerDevices) {
	numa := func(d *podresourcesv1.ContainerDevices) int64 {
		if d.Topology == nil {
			return nodeWithoutTopology
		}
		return d.Topology.Nodes[0].ID
	}
	slices.SortFunc(ds, func(a, b *podresourcesv1.ContainerDevices) int {
		return cmp.Or(cmp.Compare(a.ResourceName, b.ResourceName), cmp.Compare(a.DeviceIds[0], b.DeviceIds[0]), cmp.Compare(numa(a), numa(b)))
	})
}
