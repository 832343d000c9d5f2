package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// ErrResizePodInPlace is the sync error of an in-place resize the runtime
// or the pod's cgroup refused (the kubelet's ResizePodInPlaceError); the
// next sync tries again.
var ErrResizePodInPlace = errors.New("ResizePodInPlaceError")

// actuatedResources returns what an in-place resize last applied to
// container id, else created (the resources it was created with).
func (m *PodManager) actuatedResources(id string, created *v1.ResourceRequirements) *v1.ResourceRequirements {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.actuated[id]; ok {
		return r.DeepCopy()
	}
	return created
}

func (m *PodManager) setActuated(id string, r *v1.ResourceRequirements) {
	m.mu.Lock()
	m.actuated[id] = r
	m.mu.Unlock()
}

// ResizeError returns why the last in-place resize of the pod with uid
// failed, "" when it did not (or there was none). Safe for concurrent use.
func (m *PodManager) ResizeError(uid types.UID) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.resizeErrors[uid]
}

func (m *PodManager) setResizeError(uid types.UID, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.resizeErrors, uid)
		return
	}
	m.resizeErrors[uid] = err.Error()
}

// setPodLevelActuated records r as what the cgroup of the pod with uid was
// given (nil: the pod has no pod-level resources).
func (m *PodManager) setPodLevelActuated(uid types.UID, r *v1.ResourceRequirements) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.podLevel[uid] = r.DeepCopy()
}

// PodLevelActuated returns the pod-level resources the cgroup of the pod
// with uid was last given, and whether they are known: the agent records
// them when it creates the pod's sandbox and when an in-place resize
// changes them, and forgets them on a restart until the pod's next sync.
// Safe for concurrent use.
func (m *PodManager) PodLevelActuated(uid types.UID) (*v1.ResourceRequirements, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.podLevel[uid]
	return r.DeepCopy(), ok
}

// podLevelResizeNeeded reports whether the cgroup of pod (the allocated
// pod), which has pod-level resources, must follow them: they differ from
// what it was given, or that is not known (the agent restarted), as the
// kubelet's computePodLevelResourcesResizeAction.
func (m *PodManager) podLevelResizeNeeded(pod *v1.Pod) bool {
	if pod.Spec.Resources == nil {
		return false
	}
	actuated, ok := m.PodLevelActuated(pod.UID)
	return !ok || podstate.ComputeResourcesOf(actuated) != podstate.ComputeResourcesOf(pod.Spec.Resources)
}

func (m *PodManager) forgetActuated(id string) {
	m.mu.Lock()
	delete(m.actuated, id)
	m.mu.Unlock()
}

// Conversions of the kubelet's cm package, for what a runtime reports.
const (
	// minMilliCPULimit is the smallest CPU limit (millicores) a CFS quota
	// enforces: the kubelet reports the allocated limit instead of the
	// runtime's when both are at or below it.
	minMilliCPULimit = 10
)

// reportedResources converts the Linux resources a runtime reports for a
// container (ContainerStatus.resources) into its CPU request (from
// cpu.shares, rounded up), CPU limit (from the CFS quota) and memory
// limit, as the kubelet's toKubeContainerResources; nil when it reports
// none of them.
func reportedResources(l *runtimeapi.LinuxContainerResources) *v1.ResourceRequirements {
	if l == nil {
		return nil
	}
	r := &v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	if l.GetCpuPeriod() > 0 {
		if milli := l.GetCpuQuota() * milliCPUToCPU / l.GetCpuPeriod(); milli > 0 {
			r.Limits[v1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
		}
	}
	if shares := l.GetCpuShares(); shares >= minShares {
		milli := (shares*milliCPUToCPU + sharesPerCPU - 1) / sharesPerCPU
		r.Requests[v1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
	}
	if l.GetMemoryLimitInBytes() > 0 {
		r.Limits[v1.ResourceMemory] = *resource.NewQuantity(l.GetMemoryLimitInBytes(), resource.BinarySI)
	}
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return nil
	}
	return r
}

// requirementsOf returns v as requests and limits (zero values left out).
func requirementsOf(v podstate.ComputeResources) *v1.ResourceRequirements {
	r := &v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	set := func(l v1.ResourceList, name v1.ResourceName, q *resource.Quantity) {
		if !q.IsZero() {
			l[name] = *q
		}
	}
	set(r.Requests, v1.ResourceCPU, resource.NewMilliQuantity(v.CPURequest, resource.DecimalSI))
	set(r.Limits, v1.ResourceCPU, resource.NewMilliQuantity(v.CPULimit, resource.DecimalSI))
	set(r.Requests, v1.ResourceMemory, resource.NewQuantity(v.MemoryRequest, resource.BinarySI))
	set(r.Limits, v1.ResourceMemory, resource.NewQuantity(v.MemoryLimit, resource.BinarySI))
	return r
}

// withResource returns v with name's request and limit from from.
func withResource(v, from podstate.ComputeResources, name v1.ResourceName) podstate.ComputeResources {
	if name == v1.ResourceMemory {
		v.MemoryRequest, v.MemoryLimit = from.MemoryRequest, from.MemoryLimit
	} else {
		v.CPURequest, v.CPULimit = from.CPURequest, from.CPULimit
	}
	return v
}

// resize applies the in-place resizes of a (the kubelet's
// doPodResizeAction), resource by resource, memory first: the pod's cgroup
// grows before its containers, the containers are updated in the order
// computePodActions chose (decreases first), and the pod's cgroup shrinks
// after them. It stops at the first failure; the next sync goes on from
// what was actuated.
func (s *podSync) resize(ctx context.Context, a podActions) error {
	m, pod := s.m, s.pod
	facts, err := m.machineFacts()
	if err != nil {
		return fmt.Errorf("%w: resize pod %s: %v", ErrResizePodInPlace, podDesc(pod), err)
	}
	// current are the values each container runs with, as the resize goes.
	current := map[string]podstate.ComputeResources{}
	for _, cs := range s.status.Containers {
		if cs.State == podstate.ContainerStateRunning && cs.Resources != nil && cs.SandboxID == s.status.ActiveSandboxID() {
			if _, seen := current[cs.Name]; !seen {
				current[cs.Name] = podstate.ComputeResourcesOf(cs.Resources)
			}
		}
	}
	// currentPod is the pod-level resources the pod's cgroup has, as the
	// resize goes; unknown (the agent restarted), the cgroup is set to the
	// allocation first.
	currentPod, known := m.PodLevelActuated(pod.UID)
	if pod.Spec.Resources != nil && !known {
		if err := s.updatePodCgroup(ctx, pod, "resources"); err != nil {
			return err
		}
		m.setPodLevelActuated(pod.UID, pod.Spec.Resources)
		currentPod = pod.Spec.Resources.DeepCopy()
	}
	// A container restarted for its resize policy counts at what it ran
	// with: it comes back with its allocation, in a pod cgroup that grew
	// for it first.
	podAt := func() *v1.Pod {
		p := pod.DeepCopy()
		if p.Spec.Resources != nil {
			p.Spec.Resources = currentPod.DeepCopy()
		}
		for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range list {
				if v, ok := current[list[i].Name]; ok {
					list[i].Resources = *requirementsOf(v)
				}
			}
		}
		return p
	}
	// Before anything changes, as the kubelet's validatePodResizeAction:
	// a memory limit cut below what a container uses would fail half-way.
	if err := s.checkMemoryDecrease(ctx, a, currentPod); err != nil {
		return fmt.Errorf("%w: %v", ErrResizePodInPlace, err)
	}
	logger := klog.FromContext(ctx)
	for _, name := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceCPU} {
		before := podAt()
		for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range list {
				if v, ok := current[list[i].Name]; ok {
					current[list[i].Name] = withResource(v, podstate.ComputeResourcesOf(podstate.EffectiveResources(pod.Spec.Resources, &list[i].Resources)), name)
				}
			}
		}
		if pod.Spec.Resources != nil {
			currentPod = withPodResource(currentPod, pod.Spec.Resources, name)
		}
		after := podAt()
		grows, shrinks := podResourceChange(before, after, name)
		if grows {
			if err := s.updatePodCgroup(ctx, after, name); err != nil {
				return err
			}
		}
		// Containers take the limits they do not set from the pod-level
		// ones the pod's cgroup has at this step.
		actPod := pod
		if pod.Spec.Resources != nil {
			p := *pod
			p.Spec.Resources = currentPod
			actPod = &p
		}
		for _, u := range a.containersToUpdate[name] {
			// The cpu step runs once memory is at its allocation (a
			// memory change was the memory step's, which succeeded).
			values := withResource(u.current, u.desired, v1.ResourceMemory)
			if name == v1.ResourceCPU {
				values = u.desired
			}
			c := u.spec.DeepCopy()
			c.Resources = *requirementsOf(values)
			res := &runtimeapi.ContainerResources{Linux: m.containerResources(actPod, c, facts)}
			if err := m.rs.UpdateContainerResources(ctx, u.id, res); err != nil {
				m.recorder.Eventf(pod, v1.EventTypeWarning, "ResizeError", "Pod resize error: container %s: %s", u.spec.Name, grpcMessage(err))
				return fmt.Errorf("%w: update %s resources of container %s of pod %s: %v", ErrResizePodInPlace, name, u.spec.Name, podDesc(pod), grpcMessage(err))
			}
			m.setActuated(u.id, &c.Resources)
			logger.V(2).Info("Resized container in place", "container", u.spec.Name, "resource", name, "resources", c.Resources)
		}
		if shrinks {
			if err := s.updatePodCgroup(ctx, after, name); err != nil {
				return err
			}
		}
		if pod.Spec.Resources != nil {
			m.setPodLevelActuated(pod.UID, currentPod)
			logger.V(2).Info("Resized the pod's cgroup in place", "resource", name, "resources", currentPod)
		}
	}
	return nil
}

// withPodResource returns a copy of r (pod-level resources; nil: none)
// with name's request and limit as in from.
func withPodResource(r, from *v1.ResourceRequirements, name v1.ResourceName) *v1.ResourceRequirements {
	out := r.DeepCopy()
	if out == nil {
		out = &v1.ResourceRequirements{}
	}
	set := func(dst *v1.ResourceList, src v1.ResourceList) {
		q, ok := src[name]
		switch {
		case ok:
			if *dst == nil {
				*dst = v1.ResourceList{}
			}
			(*dst)[name] = q.DeepCopy()
		case *dst != nil:
			delete(*dst, name)
		}
	}
	set(&out.Requests, from.Requests)
	set(&out.Limits, from.Limits)
	return out
}

// checkMemoryDecrease fails when the pod-level memory limit (the pod's
// cgroup has currentPod's) or a container's memory limit is to be cut (or
// set) at or below the memory the pod or the container uses now (CRI
// ContainerStats; the pod's is its running containers'), with the
// kubelet's messages.
func (s *podSync) checkMemoryDecrease(ctx context.Context, a podActions, currentPod *v1.ResourceRequirements) error {
	var msgs []string
	var want, have int64
	if r := s.pod.Spec.Resources; r != nil {
		want = r.Limits.Memory().Value()
	}
	if currentPod != nil {
		have = currentPod.Limits.Memory().Value()
	}
	if want != 0 {
		if have == 0 || want < have {
			usage, err := s.podMemoryUsage(ctx)
			switch {
			case err != nil:
				msgs = append(msgs, fmt.Sprintf("unable to read memory usage for pod %q: %v", podDesc(s.pod), err))
			case usage >= uint64(want):
				msgs = append(msgs, fmt.Sprintf("attempting to set pod memory limit (%d) below current usage (%d)", want, usage))
			}
		}
	}
	for _, u := range a.containersToUpdate[v1.ResourceMemory] {
		want := u.desired.MemoryLimit
		if want == 0 || (u.current.MemoryLimit != 0 && want >= u.current.MemoryLimit) {
			continue
		}
		st, err := s.m.rs.ContainerStats(ctx, u.id)
		usage := st.GetMemory().GetUsageBytes()
		switch {
		case err != nil:
			msgs = append(msgs, fmt.Sprintf("unable to read memory usage of container %q: %s", u.spec.Name, grpcMessage(err)))
		case usage == nil:
			msgs = append(msgs, fmt.Sprintf("missing container %q memory usage", u.spec.Name))
		case usage.GetValue() >= uint64(want):
			msgs = append(msgs, fmt.Sprintf("attempting to set container %q memory limit (%d) below current usage (%d)", u.spec.Name, want, usage.GetValue()))
		}
	}
	switch len(msgs) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("cannot decrease memory limits: %s", msgs[0])
	}
	return fmt.Errorf("cannot decrease memory limits: [%s]", strings.Join(msgs, ", "))
}

// podMemoryUsage is the memory the pod's running containers use now (CRI
// ContainerStats).
func (s *podSync) podMemoryUsage(ctx context.Context) (uint64, error) {
	var sum uint64
	for _, cs := range s.status.Containers {
		if cs.State != podstate.ContainerStateRunning || cs.SandboxID != s.status.ActiveSandboxID() {
			continue
		}
		st, err := s.m.rs.ContainerStats(ctx, cs.ID)
		if err != nil {
			return 0, fmt.Errorf("container %q: %s", cs.Name, grpcMessage(err))
		}
		usage := st.GetMemory().GetUsageBytes()
		if usage == nil {
			return 0, fmt.Errorf("missing container %q memory usage", cs.Name)
		}
		sum += usage.GetValue()
	}
	return sum, nil
}

// podResourceChange reports whether the pod's aggregate request or limit
// of name grows, or shrinks, from before to after (both can).
func podResourceChange(before, after *v1.Pod, name v1.ResourceName) (grows, shrinks bool) {
	opts := resourcehelper.PodResourcesOptions{}
	cmp := func(b, a v1.ResourceList) {
		bq, aq := b[name], a[name]
		switch c := aq.Cmp(bq); {
		case c > 0:
			grows = true
		case c < 0:
			shrinks = true
		}
	}
	cmp(resourcehelper.PodRequests(before, opts), resourcehelper.PodRequests(after, opts))
	// A container without a limit leaves the pod unlimited: PodLimits then
	// leaves the resource out, which compares as no limit.
	bl, al := resourcehelper.PodLimits(before, opts), resourcehelper.PodLimits(after, opts)
	if unlimited(before, name) {
		delete(bl, name)
	}
	if unlimited(after, name) {
		delete(al, name)
	}
	_, hadLimit := bl[name]
	_, hasLimit := al[name]
	switch {
	case hadLimit && !hasLimit:
		grows = true
	case !hadLimit && hasLimit:
		shrinks = true
	case hadLimit && hasLimit:
		cmp(bl, al)
	}
	return grows, shrinks
}

// unlimited reports whether pod's cgroup has no limit of name: the pod
// sets no pod-level limit of it and a regular container sets none.
func unlimited(pod *v1.Pod, name v1.ResourceName) bool {
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[name]; ok && !q.IsZero() {
			return false
		}
	}
	for i := range pod.Spec.Containers {
		if _, ok := pod.Spec.Containers[i].Resources.Limits[name]; !ok {
			return true
		}
	}
	return false
}

// updatePodCgroup sets the pod's cgroup to pod's values (Options.UpdatePodCgroup).
func (s *podSync) updatePodCgroup(ctx context.Context, pod *v1.Pod, name v1.ResourceName) error {
	if s.m.opts.UpdatePodCgroup == nil {
		return nil
	}
	if err := s.m.opts.UpdatePodCgroup(ctx, pod); err != nil {
		s.m.recorder.Eventf(s.pod, v1.EventTypeWarning, "ResizeError", "Pod resize error: pod cgroup %s: %v", name, err)
		return fmt.Errorf("%w: update the %s of the cgroup of pod %s: %v", ErrResizePodInPlace, name, podDesc(s.pod), err)
	}
	return nil
}
