package dra

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DynamicResources returns the prepared claims container c of pod uses, as
// the kubelet's pod resources API reports them (podresources'
// DynamicResourcesProvider): each claim the container names, and the
// claim of its DRA-backed extended resources, with each device's driver,
// pool, name, share ID and CDI devices. As the kubelet's, a device's CDI
// devices include those of the driver's devices listed before it. A claim
// not in the cache leaves the list empty (the kubelet logs it).
func (m *Manager) DynamicResources(pod *v1.Pod, c *v1.Container) []*podresourcesv1.DynamicResource {
	var names []string
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		if !slices.ContainsFunc(c.Resources.Claims, func(cc v1.ResourceClaim) bool { return cc.Name == pc.Name }) {
			continue
		}
		if name, _, err := resourceclaim.Name(pod, pc); err == nil && name != nil {
			names = append(names, *name)
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil && slices.ContainsFunc(s.RequestMappings, func(rm v1.ContainerExtendedResourceRequest) bool { return rm.ContainerName == c.Name }) {
		names = append(names, s.ResourceClaimName)
	}
	if len(names) == 0 || m.load() != nil {
		return []*podresourcesv1.DynamicResource{}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*podresourcesv1.DynamicResource, 0, len(names))
	for _, name := range names {
		info, ok := m.claims[pod.Namespace+"/"+name]
		if !ok {
			return []*podresourcesv1.DynamicResource{}
		}
		drivers := make([]string, 0, len(info.DriverState))
		for d := range info.DriverState {
			drivers = append(drivers, d)
		}
		slices.Sort(drivers)
		var resources []*podresourcesv1.ClaimResource
		for _, d := range drivers {
			var cdi []*podresourcesv1.CDIDevice
			for _, dev := range info.DriverState[d].Devices {
				for _, id := range dev.CDIDeviceIDs {
					cdi = append(cdi, &podresourcesv1.CDIDevice{Name: id})
				}
				resources = append(resources, &podresourcesv1.ClaimResource{
					CdiDevices: cdi, DriverName: d, PoolName: dev.PoolName, DeviceName: dev.DeviceName,
					ShareId: (*string)(dev.ShareID),
				})
			}
		}
		out = append(out, &podresourcesv1.DynamicResource{ClaimName: info.ClaimName, ClaimNamespace: info.Namespace, ClaimResources: resources})
	}
	return out
}
