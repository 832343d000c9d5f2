package devices

import (
	"context"
	"slices"
	"sort"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekit/nodekit/resources/topologymanager"
)

// The Manager as the topology manager's hint provider, as the kubelet's
// device manager: the NUMA affinities a container's (or pod's) devices can
// be given, from the NUMA nodes each plugin reports for its devices
// (Device.Topology), and an allocation that follows the affinity the
// topology manager chose (Options.Affinity).

// HintProvider returns the Manager as a topologymanager.HintProvider whose
// calls log to ctx's logger: GetTopologyHints, GetPodTopologyHints and
// AllocateContainer. Add it to the topology manager before the CPU and
// memory managers, as the kubelet does; the topology manager then
// allocates the devices at admission (instead of Allocate).
func (m *Manager) HintProvider(ctx context.Context) topologymanager.HintProvider {
	return hintProvider{m: m, ctx: ctx}
}

type hintProvider struct {
	m   *Manager
	ctx context.Context
}

func (h hintProvider) GetTopologyHints(pod *v1.Pod, c *v1.Container) map[string][]topologymanager.TopologyHint {
	return h.m.GetTopologyHints(h.ctx, pod, c)
}

func (h hintProvider) GetPodTopologyHints(pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	return h.m.GetPodTopologyHints(h.ctx, pod)
}

func (h hintProvider) Allocate(pod *v1.Pod, c *v1.Container) error {
	return h.m.AllocateContainer(h.ctx, pod, c)
}

// GetTopologyHints returns, for each device plugin resource c asks for,
// the NUMA affinities its devices can be given with, as the kubelet's
// device manager: nil (no preference) for a resource whose devices report
// no NUMA node, an empty list when too few devices are free, the hints of
// the devices c already holds (an agent restart), else one hint per set of
// NUMA nodes whose free devices (and the devices c may reuse from the
// pod's init containers) are enough, preferred when it is as narrow as the
// narrowest set that holds enough devices at all. Devices of inactive pods
// are freed first.
func (m *Manager) GetTopologyHints(ctx context.Context, pod *v1.Pod, c *v1.Container) map[string][]topologymanager.TopologyHint {
	m.freeInactive()
	log := logr.FromContextOrDiscard(ctx).WithValues("pod", klog.KObj(pod), "containerName", c.Name)
	podUID := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	hints := map[string][]topologymanager.TopologyHint{}
	for res, requested := range m.containerRequests(c) {
		hints[res] = m.resourceHints(log, res, requested, m.pods.containerDevices(podUID, c.Name, res), m.reuse[podUID][res])
	}
	return hints
}

// GetPodTopologyHints is GetTopologyHints for the whole pod (the topology
// manager's pod scope): each resource's request is the pod's effective
// limit (the larger of the app containers' sum and any init container's).
func (m *Manager) GetPodTopologyHints(ctx context.Context, pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	m.freeInactive()
	log := logr.FromContextOrDiscard(ctx).WithValues("pod", klog.KObj(pod))
	podUID := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	hints := map[string][]topologymanager.TopologyHint{}
	for res, requested := range m.podRequests(pod) {
		allocated := sets.New[string]()
		for _, resources := range m.pods[podUID] {
			if a, ok := resources[res]; ok {
				allocated = allocated.Union(idSet(a.ids))
			}
		}
		hints[res] = m.resourceHints(log, res, requested, allocated, nil)
	}
	return hints
}

// resourceHints are the hints for requested devices of res, the one body of
// GetTopologyHints and GetPodTopologyHints: nil without a topology
// preference; regenerated from allocated when the container (or pod)
// already holds devices of res, none if their number differs from the
// request; else from the available devices and reusable (an init
// container's, the container scope only), none if too few. Called with mu
// held.
func (m *Manager) resourceHints(log logr.Logger, res string, requested int, allocated, reusable sets.Set[string]) []topologymanager.TopologyHint {
	if !m.hasTopologyAlignment(res) {
		log.V(4).Info("Resource does not have a topology preference", "resourceName", res, "request", requested)
		return nil
	}
	if allocated.Len() > 0 {
		if allocated.Len() != requested {
			log.Info("Resource already allocated to pod with different number than request", "resourceName", res, "request", requested, "allocated", allocated.Len())
			return []topologymanager.TopologyHint{}
		}
		log.V(2).Info("Regenerating TopologyHints for resource already allocated to pod", "resourceName", res)
		return m.deviceHints(log, res, allocated, nil, requested)
	}
	available := m.availableDevices(res)
	if n := available.Union(reusable).Len(); n < requested {
		log.Info("Unable to generate topology hints: requested number of devices unavailable", "resourceName", res, "request", requested, "available", n)
		return []topologymanager.TopologyHint{}
	}
	return m.deviceHints(log, res, available, reusable, requested)
}

// containerRequests is c's count of each device plugin resource (limits:
// extended resources are not overcommitted). Called with mu held.
func (m *Manager) containerRequests(c *v1.Container) map[string]int {
	out := map[string]int{}
	for name, q := range c.Resources.Limits {
		if m.isPluginResource(string(name)) {
			out[string(name)] = int(q.Value())
		}
	}
	return out
}

// podRequests is the pod's effective count of each device plugin
// resource: the larger of its app and restartable init containers' sum
// and, for each regular init container, that container's count plus the
// restartable init containers started before it (the kubelet's
// resource.PodLimits without overhead). Called with mu held.
func (m *Manager) podRequests(pod *v1.Pod) map[string]int {
	out := map[string]int{}
	for _, c := range pod.Spec.Containers {
		for res, n := range m.containerRequests(&c) {
			out[res] += n
		}
	}
	sidecars := map[string]int{}
	for _, c := range pod.Spec.InitContainers {
		reqs := m.containerRequests(&c)
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			for res, n := range reqs {
				sidecars[res] += n
				out[res] += n
			}
			continue
		}
		for res, n := range reqs {
			if n+sidecars[res] > out[res] {
				out[res] = n + sidecars[res]
			}
		}
	}
	return out
}

// hasTopologyAlignment reports whether any device of res reports a NUMA
// node. Called with mu held.
func (m *Manager) hasTopologyAlignment(res string) bool {
	for _, d := range m.all[res] {
		if d.Topology != nil && len(d.Topology.Nodes) > 0 {
			return true
		}
	}
	return false
}

// availableDevices is res's healthy devices not allocated. Called with mu
// held.
func (m *Manager) availableDevices(res string) sets.Set[string] {
	return m.healthy[res].Difference(m.allocated[res])
}

// numaNodeIDs is the NUMA nodes a device reports.
func numaNodeIDs(t *pluginapi.TopologyInfo) []int {
	if t == nil {
		return nil
	}
	out := make([]int, 0, len(t.Nodes))
	for _, n := range t.Nodes {
		out = append(out, int(n.ID))
	}
	return out
}

// anySet reports whether mask holds any of ids.
func anySet(mask topologymanager.BitMask, ids []int) bool {
	return slices.ContainsFunc(ids, mask.IsSet)
}

// deviceHints is the kubelet's generateDeviceTopologyHints: every set of
// the NUMA nodes that host devices of res whose available devices (with
// all the reusable ones in it) number at least request, preferred when it
// has as few nodes as the narrowest set holding request devices of res at
// all. Called with mu held.
func (m *Manager) deviceHints(log logr.Logger, res string, available, reusable sets.Set[string], request int) []topologymanager.TopologyHint {
	nodes := m.deviceNUMANodes(log, res)
	if len(nodes) == 0 {
		nodes = m.opts.NUMANodes
	}
	minAffinity := len(nodes)
	hints := []topologymanager.TopologyHint{}
	topologymanager.IterateBitMasks(nodes, func(mask topologymanager.BitMask) {
		inMask := 0
		for _, d := range m.all[res] {
			if anySet(mask, numaNodeIDs(d.Topology)) {
				inMask++
			}
		}
		if inMask >= request && mask.Count() < minAffinity {
			minAffinity = mask.Count()
		}
		matching := 0
		for id := range reusable {
			d := m.all[res][id]
			if d == nil || d.Topology == nil {
				continue
			}
			if !anySet(mask, numaNodeIDs(d.Topology)) {
				return
			}
			matching++
		}
		for id := range available {
			if d := m.all[res][id]; d != nil && anySet(mask, numaNodeIDs(d.Topology)) {
				matching++
			}
		}
		if matching < request {
			return
		}
		hints = append(hints, topologymanager.TopologyHint{NUMANodeAffinity: mask})
	})
	for i := range hints {
		hints[i].Preferred = hints[i].NUMANodeAffinity.Count() == minAffinity
	}
	return hints
}

// deviceNUMANodes is the machine's NUMA nodes (Options.NUMANodes) that
// host a device of res, ascending; NUMA nodes a plugin reports that the
// machine does not have are logged and left out. Called with mu held.
func (m *Manager) deviceNUMANodes(log logr.Logger, res string) []int {
	withDevices := sets.New[int]()
	for _, d := range m.all[res] {
		withDevices.Insert(numaNodeIDs(d.Topology)...)
	}
	known := sets.New(m.opts.NUMANodes...)
	if unknown := withDevices.Difference(known); unknown.Len() > 0 {
		log.Info("Ignoring NUMA node IDs reported by device plugin that are unknown to the machine", "resource", res, "unknownNodes", sets.List(unknown), "knownNodes", m.opts.NUMANodes)
		withDevices = withDevices.Intersection(known)
	}
	return sets.List(withDevices)
}

// filterByAffinity splits res's available devices into those on the NUMA
// nodes of the affinity the topology manager chose for the container, those
// on other NUMA nodes, and those without NUMA nodes, as the kubelet's;
// with no affinity (or no topology) all are in the last. Within each,
// devices are ordered by the NUMA nodes they are on (fewest devices
// first). Called with mu held.
func (m *Manager) filterByAffinity(podUID, container, res string, available sets.Set[string]) (aligned, unaligned, noAffinity []string) {
	hint := m.opts.Affinity(podUID, container)
	if !m.hasTopologyAlignment(res) || hint.NUMANodeAffinity == 0 {
		return nil, nil, sets.List(available)
	}
	perNode := map[int]sets.Set[string]{}
	for _, id := range sets.List(available) {
		nodes := numaNodeIDs(m.all[res][id].Topology)
		if len(nodes) == 0 {
			nodes = []int{nodeWithoutTopology}
		}
		for _, n := range nodes {
			if perNode[n] == nil {
				perNode[n] = sets.New[string]()
			}
			perNode[n].Insert(id)
		}
	}
	nodes := make([]int, 0, len(perNode))
	for n := range perNode {
		nodes = append(nodes, n)
	}
	affine := hint.NUMANodeAffinity
	sort.Slice(nodes, func(i, j int) bool {
		a, b := nodes[i], nodes[j]
		if affine.IsSet(a) != affine.IsSet(b) {
			return affine.IsSet(a)
		}
		if (a == nodeWithoutTopology) != (b == nodeWithoutTopology) {
			return b == nodeWithoutTopology
		}
		if perNode[a].Len() != perNode[b].Len() {
			return perNode[a].Len() < perNode[b].Len()
		}
		return a < b
	})
	seen := sets.New[string]()
	for _, n := range nodes {
		for _, id := range sets.List(perNode[n]) {
			if seen.Has(id) {
				continue
			}
			seen.Insert(id)
			switch {
			case n == nodeWithoutTopology:
				noAffinity = append(noAffinity, id)
			case affine.IsSet(n):
				aligned = append(aligned, id)
			default:
				unaligned = append(unaligned, id)
			}
		}
	}
	return aligned, unaligned, noAffinity
}
