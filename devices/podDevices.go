package devices

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekit/nodekit/devices/internal/checkpoint"
)

// containerAllocation is one container's devices of one resource and the
// plugin's answer to their Allocate.
type containerAllocation struct {
	ids  checkpoint.DevicesPerNUMA
	resp *pluginapi.ContainerAllocateResponse
}

// podDevices is pod UID → container name → resource → allocation. It is
// guarded by the Manager's mu.
type podDevices map[string]map[string]map[string]containerAllocation

func (p podDevices) insert(podUID, container, res string, ids checkpoint.DevicesPerNUMA, resp *pluginapi.ContainerAllocateResponse) {
	if p[podUID] == nil {
		p[podUID] = map[string]map[string]containerAllocation{}
	}
	if p[podUID][container] == nil {
		p[podUID][container] = map[string]containerAllocation{}
	}
	p[podUID][container][res] = containerAllocation{ids: ids, resp: resp}
}

// containerDevices returns the container's devices of res, nil when none
// are allocated.
func (p podDevices) containerDevices(podUID, container, res string) sets.Set[string] {
	a, ok := p[podUID][container][res]
	if !ok {
		return nil
	}
	return idSet(a.ids)
}

func idSet(ids checkpoint.DevicesPerNUMA) sets.Set[string] {
	s := sets.New[string]()
	for _, d := range ids {
		s.Insert(d...)
	}
	return s
}

// devices returns every allocated device by resource.
func (p podDevices) devices() map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for _, containers := range p {
		for _, resources := range containers {
			for res, a := range resources {
				if out[res] == nil {
					out[res] = sets.New[string]()
				}
				out[res] = out[res].Union(idSet(a.ids))
			}
		}
	}
	return out
}

func (p podDevices) checkpointEntries() ([]checkpoint.PodDevicesEntry, error) {
	var out []checkpoint.PodDevicesEntry
	for uid, containers := range p {
		for name, resources := range containers {
			for res, a := range resources {
				blob, err := proto.Marshal(a.resp)
				if err != nil {
					return nil, fmt.Errorf("marshal allocation of pod %s container %s resource %s: %w", uid, name, res, err)
				}
				out = append(out, checkpoint.PodDevicesEntry{PodUID: uid, ContainerName: name, ResourceName: res, DeviceIDs: a.ids, AllocResp: blob})
			}
		}
	}
	return out, nil
}
