package devices

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekit/nodekit/devices/internal/checkpoint"
)

// AdmissionReason is the pod status reason of a pod whose devices could
// not be allocated, as the kubelet's.
const AdmissionReason = "UnexpectedAdmissionError"

// AdmissionError is Allocate's error: Reason and Error() are the kubelet's
// admission reason and message for the rejected pod.
type AdmissionError struct {
	Err error
}

// Error is the kubelet's admission message.
func (e *AdmissionError) Error() string {
	return fmt.Sprintf("Allocate failed due to %v, which is unexpected", e.Err)
}

// Unwrap returns the allocation error.
func (e *AdmissionError) Unwrap() error { return e.Err }

// Reason is AdmissionReason.
func (e *AdmissionError) Reason() string { return AdmissionReason }

// Allocate allocates devices of the registered resources to every init and
// app container of pod that asks for them (their limits), as the kubelet at
// admission when no topology manager allocates them (AllocateContainer for
// each container in order). The error is an *AdmissionError; devices of
// pods no longer active are freed first.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod) error {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if err := m.AllocateContainer(ctx, pod, &cs[i]); err != nil {
				return &AdmissionError{Err: err}
			}
		}
	}
	return nil
}

// AllocateContainer allocates devices of the registered resources to c,
// a container of pod, as the kubelet's device manager Allocate: the caller
// allocates the pod's init containers first, in order, then its app
// containers. Devices of a regular init container can be taken by the
// containers that follow it (not those of a restartable one), the devices
// on the NUMA nodes of the container's affinity (Options.Affinity) are
// taken first, the plugin's preferred allocation is asked for when it
// offers one, and Allocate is called on the plugin for each resource.
// Allocations already made (a container restarting, or read from the
// checkpoint) are kept. Devices of inactive pods are freed first.
func (m *Manager) AllocateContainer(ctx context.Context, pod *v1.Pod, c *v1.Container) error {
	podUID := string(pod.UID)
	m.mu.Lock()
	for uid := range m.reuse {
		if uid != podUID {
			delete(m.reuse, uid)
		}
	}
	if m.reuse[podUID] == nil {
		m.reuse[podUID] = map[string]sets.Set[string]{}
	}
	reuse := m.reuse[podUID]
	m.mu.Unlock()
	if err := m.allocateContainer(ctx, pod, c, reuse); err != nil {
		return err
	}
	regularInit := false
	for _, ic := range pod.Spec.InitContainers {
		if ic.Name == c.Name {
			regularInit = ic.RestartPolicy == nil || *ic.RestartPolicy != v1.ContainerRestartPolicyAlways
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for res := range m.pods[podUID][c.Name] {
		devs := m.pods.containerDevices(podUID, c.Name, res)
		switch {
		case regularInit:
			reuse[res] = devs.Union(reuse[res])
		case reuse[res] != nil:
			reuse[res] = reuse[res].Difference(devs)
		}
	}
	return nil
}

// freeInactive frees the devices of pods that are not active.
func (m *Manager) freeInactive() {
	if m.opts.ActivePods == nil {
		return
	}
	if m.opts.SourcesReady != nil && !m.opts.SourcesReady() {
		return
	}
	active := sets.New[string]()
	for _, p := range m.opts.ActivePods() {
		active.Insert(string(p.UID))
	}
	m.mu.Lock()
	changed := false
	for uid := range m.pods {
		if !active.Has(uid) {
			delete(m.pods, uid)
			changed = true
		}
	}
	if changed {
		m.allocated = m.pods.devices()
	}
	m.mu.Unlock()
	if changed {
		_ = m.writeCheckpoint()
	}
}

// isPluginResource reports whether res is a registered (or checkpointed)
// device plugin resource. Called with mu held.
func (m *Manager) isPluginResource(res string) bool {
	_, ok := m.healthy[res]
	return ok
}

func (m *Manager) allocateContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, reuse map[string]sets.Set[string]) error {
	log := logr.FromContextOrDiscard(ctx)
	podUID := string(pod.UID)
	names := make([]string, 0, len(c.Resources.Limits))
	for name := range c.Resources.Limits {
		names = append(names, string(name))
	}
	slices.Sort(names)
	changed, freed := false, false
	for _, res := range names {
		q := c.Resources.Limits[v1.ResourceName(res)]
		m.mu.Lock()
		isPlugin := m.isPluginResource(res)
		m.mu.Unlock()
		if !isPlugin {
			continue
		}
		if !freed {
			m.freeInactive()
			freed = true
		}
		m.mu.Lock()
		reusable := reuse[res].Clone()
		m.mu.Unlock()
		devs, err := m.devicesToAllocate(ctx, podUID, c.Name, res, int(q.Value()), reusable)
		if err != nil {
			return err
		}
		if devs.Len() == 0 {
			continue
		}
		m.mu.Lock()
		e := m.endpoints[res]
		if e == nil {
			m.allocated = m.pods.devices()
			m.mu.Unlock()
			return fmt.Errorf("unknown Device Plugin %s", res)
		}
		m.mu.Unlock()
		start := time.Now()
		ids := sets.List(devs)
		log.V(4).Info("Making allocation request for device plugin", "devices", ids, "resourceName", res, "pod", pod.Namespace+"/"+pod.Name, "containerName", c.Name)
		resp, err := e.allocate(ctx, ids)
		m.metrics.allocDuration.WithLabelValues(res).Observe(time.Since(start).Seconds())
		if err == nil && len(resp.ContainerResponses) == 0 {
			err = fmt.Errorf("no containers return in allocation response %v", resp)
		}
		if err != nil {
			m.mu.Lock()
			m.allocated = m.pods.devices()
			m.mu.Unlock()
			return err
		}
		m.mu.Lock()
		perNUMA := checkpoint.DevicesPerNUMA{}
		for _, id := range ids {
			d := m.all[res][id]
			if d == nil || d.Topology == nil || len(d.Topology.Nodes) == 0 {
				perNUMA[nodeWithoutTopology] = append(perNUMA[nodeWithoutTopology], id)
				continue
			}
			for _, n := range d.Topology.Nodes {
				perNUMA[n.ID] = append(perNUMA[n.ID], id)
			}
		}
		m.pods.insert(podUID, c.Name, res, perNUMA, resp.ContainerResponses[0])
		m.allocated = m.pods.devices()
		m.mu.Unlock()
		changed = true
	}
	if changed {
		return m.writeCheckpoint()
	}
	return nil
}

// devicesToAllocate chooses the devices of res the container still needs,
// as the kubelet's devicesToAllocate; an empty set when it has them.
func (m *Manager) devicesToAllocate(ctx context.Context, podUID, container, res string, required int, reusable sets.Set[string]) (sets.Set[string], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	needed := required
	have := m.pods.containerDevices(podUID, container, res)
	if have != nil {
		needed -= have.Len()
		if needed != 0 {
			return nil, fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d", podUID, container, res, have.Len(), required)
		}
	}
	// An agent restart: the container runs with its devices already.
	sourcesReady := m.opts.SourcesReady == nil || m.opts.SourcesReady()
	if !sourcesReady && m.opts.ContainerRunning != nil && m.opts.ContainerRunning(podUID, container) {
		return sets.New[string](), nil
	}
	healthy, registered := m.healthy[res]
	if !registered {
		return nil, fmt.Errorf("cannot allocate unregistered device %s", res)
	}
	if healthy.Len() == 0 {
		return nil, fmt.Errorf("no healthy devices present; cannot allocate unhealthy devices %s", res)
	}
	if !healthy.IsSuperset(have) {
		return nil, fmt.Errorf("previously allocated devices are no longer healthy; cannot allocate unhealthy devices %s", res)
	}
	if needed == 0 {
		return sets.New[string](), nil
	}
	allocated := sets.New[string]()
	take := func(from []string) bool {
		if m.allocated[res] == nil {
			m.allocated[res] = sets.New[string]()
		}
		for _, d := range from {
			if allocated.Has(d) {
				continue
			}
			m.allocated[res].Insert(d)
			allocated.Insert(d)
			needed--
			if needed == 0 {
				return true
			}
		}
		return false
	}
	if take(sets.List(reusable)) {
		return allocated, nil
	}
	available := m.availableDevices(res)
	if available.Len() < needed {
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", res, needed, available.Len())
	}
	aligned, unaligned, noAffinity := m.filterByAffinity(podUID, container, res, available)
	// mu is released around the plugin's answer: take only what is still
	// free and healthy afterwards.
	free := func(ids []string) []string {
		avail := m.availableDevices(res)
		return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !avail.Has(id) })
	}
	if needed < len(aligned) {
		// Enough aligned devices: the plugin may choose among them.
		preferred, err := m.preferredAllocation(ctx, res, sets.New(aligned...).Union(allocated), allocated, required)
		if err != nil {
			return nil, err
		}
		if take(free(filterIn(aligned, preferred))) || take(free(aligned)) {
			return allocated, nil
		}
		return nil, fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", required, required-needed)
	}
	// All the aligned devices first, to honour the topology manager's
	// alignment, then the plugin's choice among the rest, then the
	// unaligned devices and those without topology.
	if take(aligned) {
		return allocated, nil
	}
	preferred, err := m.preferredAllocation(ctx, res, available.Union(allocated), allocated, required)
	if err != nil {
		return nil, err
	}
	if take(free(sets.List(preferred))) || take(free(unaligned)) || take(free(noAffinity)) {
		return allocated, nil
	}
	return nil, fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", required, required-needed)
}

// filterIn is the ids (in their order) that are in set.
func filterIn(ids []string, set sets.Set[string]) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !set.Has(id) })
}

// preferredAllocation asks the plugin for its preferred devices when it
// offers GetPreferredAllocation; called with mu held, which it releases
// around the call.
func (m *Manager) preferredAllocation(ctx context.Context, res string, available, mustInclude sets.Set[string], size int) (sets.Set[string], error) {
	e := m.endpoints[res]
	if e == nil || e.options == nil || !e.options.GetPreferredAllocationAvailable {
		return sets.New[string](), nil
	}
	m.mu.Unlock()
	resp, err := e.getPreferredAllocation(ctx, sets.List(available), sets.List(mustInclude), size)
	m.mu.Lock()
	if err != nil {
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %v", err)
	}
	if len(resp.ContainerResponses) > 0 {
		return sets.New(resp.ContainerResponses[0].DeviceIDs...), nil
	}
	return sets.New[string](), nil
}

// ApplyContainerConfig is the runtime's container config hook: for each
// device plugin resource c asks for, it calls PreStartContainer when the
// plugin requires it, allocates again when no allocation is known (an
// agent restart racing the pod's admission, as the kubelet), and merges the
// plugins' Allocate answers into cfg as the kubelet does: envs and mounts
// before the container's own (the container's env wins), device nodes,
// annotations the container does not set, and CDI devices, each once.
func (m *Manager) ApplyContainerConfig(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	podUID := string(pod.UID)
	reallocate := false
	for name, q := range c.Resources.Limits {
		res := string(name)
		m.mu.Lock()
		isPlugin := m.isPluginResource(res)
		m.mu.Unlock()
		if !isPlugin || q.Value() == 0 {
			continue
		}
		if err := m.preStart(ctx, podUID, c.Name, res); err != nil {
			return fmt.Errorf("container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
		}
		m.mu.Lock()
		if m.pods.containerDevices(podUID, c.Name, res) == nil {
			reallocate = true
		}
		m.mu.Unlock()
	}
	if reallocate {
		if err := m.allocateContainer(ctx, pod, c, nil); err != nil {
			return fmt.Errorf("allocate devices to container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
		}
	}
	m.mu.Lock()
	resources := m.pods[podUID][c.Name]
	resps := make([]*pluginapi.ContainerAllocateResponse, 0, len(resources))
	names := make([]string, 0, len(resources))
	for res := range resources {
		names = append(names, res)
	}
	slices.Sort(names)
	for _, res := range names {
		resps = append(resps, resources[res].resp)
	}
	m.mu.Unlock()
	mergeResponses(logr.FromContextOrDiscard(ctx), resps, cfg)
	return nil
}

func (m *Manager) preStart(ctx context.Context, podUID, container, res string) error {
	m.mu.Lock()
	e := m.endpoints[res]
	if e == nil {
		m.mu.Unlock()
		return fmt.Errorf("endpoint not found in cache for a registered resource: %s", res)
	}
	if e.options == nil || !e.options.PreStartRequired {
		m.mu.Unlock()
		return nil
	}
	devs := m.pods.containerDevices(podUID, container, res)
	m.mu.Unlock()
	if devs == nil {
		return fmt.Errorf("no devices found allocated in local cache for pod %s, container %s, resource %s", podUID, container, res)
	}
	if err := e.preStartContainer(ctx, sets.List(devs)); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %v", err)
	}
	return nil
}

func mergeResponses(log logr.Logger, resps []*pluginapi.ContainerAllocateResponse, cfg *runtimeapi.ContainerConfig) {
	var envs []*runtimeapi.KeyValue
	var mounts []*runtimeapi.Mount
	seenEnv, seenDev, seenMount, seenCDI := map[string]string{}, map[string]string{}, map[string]string{}, sets.New[string]()
	annotations := map[string]string{}
	for _, r := range resps {
		for _, k := range sortedKeys(r.Envs) {
			v := r.Envs[k]
			if e, ok := seenEnv[k]; ok {
				if e != v {
					log.Error(nil, "Environment variable has conflicting setting", "envKey", k, "expected", v, "got", e)
				}
				continue
			}
			seenEnv[k] = v
			envs = append(envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
		}
		for _, d := range r.Devices {
			if h, ok := seenDev[d.ContainerPath]; ok {
				if h != d.HostPath {
					log.Error(nil, "Container device has conflicting mapping host devices", "containerPath", d.ContainerPath, "got", h, "expected", d.HostPath)
				}
				continue
			}
			seenDev[d.ContainerPath] = d.HostPath
			cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
		}
		for _, mt := range r.Mounts {
			if h, ok := seenMount[mt.ContainerPath]; ok {
				if h != mt.HostPath {
					log.Error(nil, "Container mount has conflicting mapping host mounts", "containerPath", mt.ContainerPath, "conflictingPath", h, "hostPath", mt.HostPath)
				}
				continue
			}
			seenMount[mt.ContainerPath] = mt.HostPath
			mounts = append(mounts, &runtimeapi.Mount{ContainerPath: mt.ContainerPath, HostPath: mt.HostPath, Readonly: mt.ReadOnly})
		}
		for _, k := range sortedKeys(r.Annotations) {
			if _, ok := annotations[k]; !ok {
				annotations[k] = r.Annotations[k]
			}
		}
		for _, d := range r.CdiDevices {
			if d == nil || seenCDI.Has(d.Name) {
				continue
			}
			seenCDI.Insert(d.Name)
			cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: d.Name})
		}
	}
	cfg.Envs = append(envs, cfg.Envs...)
	cfg.Mounts = append(mounts, cfg.Mounts...)
	if len(annotations) > 0 && cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		if _, ok := cfg.Annotations[k]; !ok {
			cfg.Annotations[k] = v
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
