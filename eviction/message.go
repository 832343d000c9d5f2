package eviction

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Keys of the annotations on an Evicted event, as the kubelet's.
const (
	OffendingContainersKey      = "offending_containers"
	OffendingContainersUsageKey = "offending_containers_usage"
	OffendingPodKey             = "offending_pod"
	OffendingPodUsageKey        = "offending_pod_usage"
	StarvedResourceKey          = "starved_resource"
)

// evictionMessage is the kubelet's message for a pod evicted to reclaim
// res: the starved resource, the threshold and what was available, and
// every container (or, with pod-level memory requests, the pod) using more
// than it requested; with the event annotations naming them.
func (m *Manager) evictionMessage(res v1.ResourceName, pod *v1.Pod, stats PodStatsFunc, met []int, obs []observed) (string, map[string]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "The node was low on resource: %v. ", res)
	for _, i := range met {
		t := &m.thresholds[i]
		if m.signals[t.sig].Resource != res {
			continue
		}
		if o := obs[t.sig]; o.ok {
			q := t.Value.quantity(o.Capacity)
			avail := resource.NewQuantity(o.Available, m.signals[t.sig].format())
			fmt.Fprintf(&b, "Threshold quantity: %v, available: %v. ", &q, avail)
			break
		}
	}
	annotations := map[string]string{}
	ps, ok := stats(pod)
	if !ok {
		return b.String(), annotations
	}
	if res == v1.ResourceMemory && resourcehelper.IsPodLevelResourcesSet(pod) && ps.Memory != nil {
		if req, ok := pod.Spec.Resources.Requests[v1.ResourceMemory]; ok {
			var ws int64
			if ps.Memory.WorkingSetBytes != nil {
				ws = int64(*ps.Memory.WorkingSetBytes)
			}
			usage := resource.NewQuantity(ws, resource.BinarySI).String()
			fmt.Fprintf(&b, "Pod %s was using %s, request is %s, has larger consumption of %v. ", pod.Name, usage, req.String(), res)
			annotations[OffendingPodKey] = pod.Name
			annotations[OffendingPodUsageKey] = usage
		}
	}
	var names, usages []string
	for i := range ps.Containers {
		cs := &ps.Containers[i]
		c := specContainer(pod, cs.Name)
		if c == nil {
			continue
		}
		usage, ok := containerUsage(cs, res)
		if !ok {
			continue
		}
		req := c.Resources.Requests[res]
		if usage.Cmp(req) > 0 {
			fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %v. ", c.Name, usage.String(), req.String(), res)
			names = append(names, c.Name)
			usages = append(usages, usage.String())
		}
	}
	annotations[OffendingContainersKey] = strings.Join(names, ",")
	annotations[OffendingContainersUsageKey] = strings.Join(usages, ",")
	annotations[StarvedResourceKey] = string(res)
	return b.String(), annotations
}

// specContainer finds the regular or init container named name (ephemeral
// containers cannot request resources, so they are never blamed).
func specContainer(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// containerUsage is a container's use of res the kubelet names in messages:
// the working set for memory, writable layer plus logs for ephemeral
// storage; nothing for other resources.
func containerUsage(cs *statsapi.ContainerStats, res v1.ResourceName) (*resource.Quantity, bool) {
	switch res {
	case v1.ResourceMemory:
		if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
			return resource.NewQuantity(int64(*cs.Memory.WorkingSetBytes), resource.BinarySI), true
		}
	case v1.ResourceEphemeralStorage:
		if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
			return resource.NewQuantity(int64(*cs.Rootfs.UsedBytes+*cs.Logs.UsedBytes), resource.BinarySI), true
		}
	}
	return nil, false
}
