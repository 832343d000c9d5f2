package podstatus

import (
	"net"
	"sort"
	"strings"

	"github.com/nodekit/nodekit/podstate"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	netutils "k8s.io/utils/net"
)

// ProbeResultFunc returns a container's latest probe result: success, and
// known false when the probe has no result for the container (it has not
// run yet, or the container has no such probe). containerID is the
// runtime's container ID (podstate.ContainerStatus.ID, the key of
// runtime.ProbeResults). It must not block.
type ProbeResultFunc func(containerID string) (success, known bool)

// GenerateOptions are the inputs of Generate besides the pod and its
// runtime status. The zero value is valid.
type GenerateOptions struct {
	// Previous is the status last generated for the pod
	// (Manager.GetPodStatus); nil means the pod's API status. Restart
	// counts, last termination states, the start time, DisruptionTarget and
	// a terminal phase carry over from it.
	Previous *v1.PodStatus
	// Terminal says the agent decided the pod's containers are not to run
	// again (it is being deleted or was killed): once all of them stopped,
	// the phase is Succeeded or Failed whatever the restart policy. It is
	// the kubelet's podIsTerminal.
	Terminal bool
	// Readiness and Startup are the prober's results. Without a result, a
	// container with such a probe is not ready (not started) yet, one
	// without is. A nil func means the node runs no probes of that kind:
	// running containers count as ready (started), as runtime.PodManager
	// counts startup probes passed without runtime.ProbeResults.
	Readiness, Startup ProbeResultFunc
	// HostIPs are the node's IPs, primary first, at most one per family
	// (from the Node's addresses or --node-ip). They become hostIP(s), and
	// podIP(s) of host-network pods; the primary's family orders the pod's
	// IPs. Empty keeps the previous host IPs.
	HostIPs []net.IP
	// QOSClass classifies the pod (the agent passes cgroupdriver.PodQOS);
	// nil keeps the class already in the pod's status, which the API server
	// sets when it creates a pod.
	QOSClass func(*v1.Pod) v1.PodQOSClass
	// ResizePending, when set, is why the agent has not allocated the
	// resources the pod's spec asks for: the PodResizePending condition.
	// The pod given to Generate and Normalize is then the allocated pod
	// (its spec with the resources the node allocated), as it is whenever
	// the agent tracks allocations.
	ResizePending *ResizePending
	// ResizeError is why the runtime failed to actuate the allocation the
	// last time it tried (it tries again): the PodResizeInProgress
	// condition then has reason Error and this message. Empty: no failure.
	ResizeError string
	// AllocatedResourcesStatus, when set, fills the container statuses'
	// allocatedResourcesStatus (the health of the devices allocated to
	// each container, the kubelet's ResourceHealthStatus, beta and on by
	// default in 1.37) once they and the probes' verdicts are set, as the
	// kubelet's container manager UpdateAllocatedResourcesStatus. It must
	// not block.
	AllocatedResourcesStatus func(pod *v1.Pod, s *v1.PodStatus)
	// PodLevelActuated are the pod-level resources the pod's cgroup was
	// last given (runtime.PodManager.PodLevelActuated), nil when unknown.
	// For a running pod with pod-level resources they become
	// status.resources (what the cgroup has, not what is asked), and while
	// they differ from the allocation a resize is in progress.
	PodLevelActuated *v1.ResourceRequirements
}

// ResizePending is a resize the node did not allocate: Reason is
// v1.PodReasonDeferred (it does not fit now; it is tried again) or
// v1.PodReasonInfeasible (it never will), Message the admission's.
type ResizePending struct {
	Reason, Message string
}

// Generate returns the API status of pod from its runtime status rs, as the
// kubelet's generateAPIPodStatus: phase, conditions, container, init
// container and ephemeral container statuses, pod and host IPs, QoS class,
// resources, observed generation. waiting holds, by container name, why a
// container the agent will (re)start is not running (back-off, image pull
// errors, ...); it becomes that container's waiting state. Conditions other
// than the kubelet's are kept from pod.Status. Condition transition times
// and the start time of a new pod are left for the Manager to set.
//
// Generate is a pure function: it reads its arguments, modifies none and
// shares no memory with them. A nil rs is a pod the runtime knows nothing
// of; a nil pod yields an empty status.
func Generate(pod *v1.Pod, rs *podstate.PodStatus, waiting map[string]podstate.ContainerWaiting, opts GenerateOptions) v1.PodStatus {
	if pod == nil {
		return v1.PodStatus{}
	}
	if rs == nil {
		rs = &podstate.PodStatus{}
	}
	old := &pod.Status
	if opts.Previous != nil {
		old = opts.Previous
	}
	g := &generator{pod: pod, rs: rs, waiting: waiting, opts: opts, old: old, containers: newestFirst(rs.Containers)}
	couldRestartAll := podstate.AllContainersCouldRestart(&pod.Spec)
	g.restartingAll = couldRestartAll && podstate.ShouldAllContainersRestart(pod, rs, old)

	var s v1.PodStatus
	for _, ip := range sortPodIPs(rs.IPs, opts.HostIPs) {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: ip})
	}
	if len(s.PodIPs) > 0 {
		s.PodIP = s.PodIPs[0].IP
	}
	s.QOSClass = pod.Status.QOSClass
	if opts.QOSClass != nil {
		s.QOSClass = opts.QOSClass(pod)
	}
	hasInit := len(pod.Spec.InitContainers) > 0
	s.ContainerStatuses = g.containerStatuses(pod.Spec.Containers, old.ContainerStatuses, hasInit, false)
	s.InitContainerStatuses = g.containerStatuses(pod.Spec.InitContainers, old.InitContainerStatuses, hasInit, true)
	if len(pod.Spec.EphemeralContainers) > 0 {
		specs := make([]v1.Container, len(pod.Spec.EphemeralContainers))
		for i := range pod.Spec.EphemeralContainers {
			specs[i] = v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
		s.EphemeralContainerStatuses = g.containerStatuses(specs, old.EphemeralContainerStatuses, hasInit, false)
	}
	g.applyProbes(s.ContainerStatuses, pod.Spec.Containers, false)
	g.applyProbes(s.InitContainerStatuses, pod.Spec.InitContainers, true)
	if opts.AllocatedResourcesStatus != nil {
		opts.AllocatedResourcesStatus(pod, &s)
	}
	s.Resources, s.AllocatedResources = podResources(pod, opts.PodLevelActuated)

	all := append(append([]v1.ContainerStatus{}, s.ContainerStatuses...), s.InitContainerStatuses...)
	s.Phase = phase(pod, all, opts.Terminal, g.anyActiveRegularContainer())
	finish(pod, &s, old, readyToStartContainersCondition(pod, rs))
	if couldRestartAll {
		s.Conditions = append(s.Conditions, allContainersRestartingCondition(pod, rs, g.restartingAll, s.Phase))
	}
	if !isTerminal(s.Phase) {
		inProgress := g.resizeInProgress() || podLevelResizeInProgress(pod, opts.PodLevelActuated)
		s.Conditions = append(s.Conditions, resizeConditions(pod, opts, inProgress)...)
	}
	g.setHostIPs(&s)
	return s
}

// resizeConditions are the kubelet's resize conditions: PodResizePending
// for a resize the node did not allocate, PodResizeInProgress while what
// runs differs from the allocation (reason Error with the runtime's
// failure, when actuating it failed).
func resizeConditions(pod *v1.Pod, opts GenerateOptions, inProgress bool) []v1.PodCondition {
	var out []v1.PodCondition
	if p := opts.ResizePending; p != nil {
		out = append(out, condition(pod, v1.PodResizePending, v1.ConditionTrue, p.Reason, p.Message))
	}
	if inProgress {
		reason := ""
		if opts.ResizeError != "" {
			reason = v1.PodReasonError
		}
		out = append(out, condition(pod, v1.PodResizeInProgress, v1.ConditionTrue, reason, opts.ResizeError))
	}
	return out
}

// resizeInProgress reports whether a running container of the (allocated)
// pod runs with other resources than it was allocated: the allocation is
// not actuated yet.
func (g *generator) resizeInProgress() bool {
	active := g.rs.ActiveSandboxID()
	for _, list := range [][]v1.Container{g.pod.Spec.InitContainers, g.pod.Spec.Containers} {
		for i := range list {
			cs := g.latest(list[i].Name)
			if cs != nil && cs.State == podstate.ContainerStateRunning && cs.SandboxID == active &&
				podstate.ResizeNeeded(cs.Resources, podstate.EffectiveResources(g.pod.Spec.Resources, &list[i].Resources)) {
				return true
			}
		}
	}
	return false
}

// Thresholds of the kubelet's cm package below which the runtime's values
// do not say what was asked: the smallest CPU limit (millicores) a CFS
// quota enforces, and the smallest cpu.shares.
const (
	minMilliCPULimit = 10
	minShares        = 2
)

// statusResources are a container's status.resources, as the kubelet's
// convertContainerStatusResources: its allocated requests and limits, and
// for a running container the CPU request, CPU limit and memory limit it
// runs with (what the runtime reports, else what the agent actuated), the
// memory request as actuated. A CPU value at or below what the runtime can
// express keeps the allocated one when that is too, so 1m is not reported
// as 2m.
func statusResources(spec *v1.Container, cs *podstate.ContainerStatus) *v1.ResourceRequirements {
	r := spec.Resources.DeepCopy()
	if cs.State != podstate.ContainerStateRunning {
		return r
	}
	value := func(name v1.ResourceName, limit bool) (resource.Quantity, bool) {
		for _, src := range []*v1.ResourceRequirements{cs.Reported, cs.Resources} {
			if src == nil {
				continue
			}
			l := src.Requests
			if limit {
				l = src.Limits
			}
			if q, ok := l[name]; ok && !q.IsZero() {
				return q.DeepCopy(), true
			}
		}
		return resource.Quantity{}, false
	}
	if r.Limits != nil {
		if q, ok := value(v1.ResourceCPU, true); ok && (q.MilliValue() > minMilliCPULimit || r.Limits.Cpu().MilliValue() > minMilliCPULimit) {
			r.Limits[v1.ResourceCPU] = q
		}
		if q, ok := value(v1.ResourceMemory, true); ok {
			r.Limits[v1.ResourceMemory] = q
		}
	}
	if r.Requests != nil {
		if q, ok := value(v1.ResourceCPU, false); ok && (q.MilliValue() > minShares || r.Requests.Cpu().MilliValue() > minShares) {
			r.Requests[v1.ResourceCPU] = q
		}
		if q, ok := value(v1.ResourceMemory, false); ok {
			r.Requests[v1.ResourceMemory] = q
		}
	}
	return r
}

// Normalize returns the API status of pod from the status a pod-level
// backend reported (the pods package's PodBackend), with the kubelet's
// rules applied as Generate applies them, so a node whose pods something
// other than a CRI runtime runs still reports kubelet-shaped statuses: the
// backend's container statuses, IPs, reason and message pass through; its
// phase is kept when it reports one and computed from the container
// statuses with the kubelet's rules otherwise (opts.Terminal counts as in
// Generate); terminal phases are sticky; the kubelet-owned conditions
// (PodReadyToStartContainers, Initialized, Ready, ContainersReady,
// PodScheduled) are computed from the container statuses, the backend's
// other conditions and the pod's foreign ones kept; host IPs, QoS class,
// start time and observed generation are set as Generate sets them.
// backend nil is a pod the backend does not know (yet). Normalize is pure:
// it modifies none of its arguments.
func Normalize(pod *v1.Pod, backend *v1.PodStatus, opts GenerateOptions) v1.PodStatus {
	if pod == nil {
		return v1.PodStatus{}
	}
	old := &pod.Status
	if opts.Previous != nil {
		old = opts.Previous
	}
	var s v1.PodStatus
	if backend != nil {
		s = *backend.DeepCopy()
	}
	foreign := s.Conditions
	s.Conditions = nil
	backendResizing := false
	for _, c := range foreign {
		if !isKubeletCondition(c.Type) {
			s.Conditions = append(s.Conditions, c)
		}
		if c.Type == v1.PodResizeInProgress && c.Status == v1.ConditionTrue {
			backendResizing = true
		}
	}
	if s.QOSClass == "" {
		s.QOSClass = pod.Status.QOSClass
	}
	if opts.QOSClass != nil {
		s.QOSClass = opts.QOSClass(pod)
	}
	// The agent's probes decide, as on a CRI node, for the containers that
	// have them: the backend's own flags can only make them stricter.
	g := &generator{pod: pod, opts: opts, old: old}
	g.probeBackend(s.ContainerStatuses, pod.Spec.Containers, false)
	g.probeBackend(s.InitContainerStatuses, pod.Spec.InitContainers, true)
	all := append(append([]v1.ContainerStatus{}, s.ContainerStatuses...), s.InitContainerStatuses...)
	if s.Phase == "" || (opts.Terminal && !isTerminal(s.Phase)) {
		s.Phase = phase(pod, all, opts.Terminal, anyRegularContainerStarted(pod, all))
	}
	started := condition(pod, v1.PodReadyToStartContainers, v1.ConditionFalse, podSandboxNotReady, "the backend has not started the pod")
	if backend != nil && (backend.PodIP != "" || anyContainerStarted(all)) {
		started = condition(pod, v1.PodReadyToStartContainers, v1.ConditionTrue, "", "")
	}
	reason, message := s.Reason, s.Message
	finish(pod, &s, old, started)
	if reason != "" || message != "" {
		s.Reason, s.Message = reason, message
	}
	if !isTerminal(s.Phase) {
		// The backend says whether it is still applying an allocation.
		s.Conditions = append(s.Conditions, resizeConditions(pod, opts, backendResizing)...)
	}
	if len(s.HostIPs) == 0 && len(opts.HostIPs) > 0 {
		for _, ip := range opts.HostIPs {
			s.HostIPs = append(s.HostIPs, v1.HostIP{IP: ip.String()})
		}
		s.HostIP = s.HostIPs[0].IP
	}
	return s
}

// probeBackend applies the prober's startup and readiness verdicts to a
// pod-level backend's statuses of the containers (regular and sidecars)
// that have such probes; without a prober (nil funcs) the backend's flags
// stand.
func (g *generator) probeBackend(statuses []v1.ContainerStatus, specs []v1.Container, isInit bool) {
	olds := g.old.ContainerStatuses
	if isInit {
		olds = g.old.InitContainerStatuses
	}
	for i := range statuses {
		st := &statuses[i]
		spec := findSpec(specs, st.Name)
		if spec == nil || (isInit && !isSidecar(spec)) {
			continue
		}
		old := findStatus(olds, st.Name)
		if old != nil && old.ContainerID != st.ContainerID {
			old = nil
		}
		started := st.State.Running != nil && (st.Started == nil || *st.Started)
		if spec.StartupProbe != nil && g.opts.Startup != nil {
			started = started && g.started(spec, st, old)
			st.Started = &started
		}
		if spec.ReadinessProbe != nil && g.opts.Readiness != nil {
			st.Ready = st.Ready && started && g.ready(spec, st, old)
		}
	}
}

// anyContainerStarted reports whether any container status is running or
// terminated.
func anyContainerStarted(statuses []v1.ContainerStatus) bool {
	for _, st := range statuses {
		if st.State.Running != nil || st.State.Terminated != nil {
			return true
		}
	}
	return false
}

// finish applies what Generate and Normalize share to s, whose container
// statuses and phase are set: sticky terminal phases with their reason and
// message, the kubelet's conditions (readyToStart given), the foreign and
// DisruptionTarget conditions, start time and observed generation.
func finish(pod *v1.Pod, s *v1.PodStatus, old *v1.PodStatus, readyToStart v1.PodCondition) {
	// Terminal phases are sticky: what the agent or the API server once
	// said is final stays.
	if !isTerminal(s.Phase) {
		switch {
		case isTerminal(old.Phase):
			s.Phase = old.Phase
		case isTerminal(pod.Status.Phase):
			s.Phase = pod.Status.Phase
		}
	}
	if isTerminal(pod.Status.Phase) {
		s.Phase = pod.Status.Phase
	}
	if s.Phase == old.Phase {
		// The reason and message belong to the phase (Evicted,
		// UnexpectedAdmissionError, ...).
		s.Reason, s.Message = old.Reason, old.Message
		if s.Reason == "" {
			s.Reason = pod.Status.Reason
		}
		if s.Message == "" {
			s.Message = pod.Status.Message
		}
	}

	for _, c := range pod.Status.Conditions {
		if !isKubeletCondition(c.Type) && findCondition(s.Conditions, c.Type) == nil {
			s.Conditions = append(s.Conditions, *c.DeepCopy())
		}
	}
	if c := findCondition(old.Conditions, v1.DisruptionTarget); c != nil {
		s.Conditions = setCondition(s.Conditions, *c.DeepCopy())
	}
	initAndRegular := append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...)
	if len(initAndRegular) == 0 {
		initAndRegular = nil
	}
	s.Conditions = append(s.Conditions, readyToStart, initializedCondition(pod, old, initAndRegular, s.Phase))
	s.Conditions = append(s.Conditions,
		readyCondition(pod, s.Conditions, initAndRegular, s.Phase),
		containersReadyCondition(pod, initAndRegular, s.Phase),
		condition(pod, v1.PodScheduled, v1.ConditionTrue, "", ""),
	)
	if old.StartTime != nil {
		s.StartTime = old.StartTime.DeepCopy()
	}
	s.ObservedGeneration = pod.Generation
}

type generator struct {
	pod     *v1.Pod
	rs      *podstate.PodStatus
	waiting map[string]podstate.ContainerWaiting
	opts    GenerateOptions
	old     *v1.PodStatus
	// containers are rs.Containers, newest first.
	containers []*podstate.ContainerStatus
	// restartingAll: the pod restarts all its containers in place
	// (podstate.ShouldAllContainersRestart): the containers the runtime
	// removed for it wait, RestartingAllContainers.
	restartingAll bool
}

// newestFirst returns the non-nil statuses sorted by creation time, newest
// first (stable, so the runtime's order breaks ties).
func newestFirst(cs []*podstate.ContainerStatus) []*podstate.ContainerStatus {
	out := make([]*podstate.ContainerStatus, 0, len(cs))
	for _, c := range cs {
		if c != nil {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out
}

// latest returns the newest runtime status of the container name, or nil.
func (g *generator) latest(name string) *podstate.ContainerStatus {
	for _, c := range g.containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// containerStatuses converts the runtime's view of containers into their
// API statuses, the kubelet's convertToAPIContainerStatuses. previous are
// the statuses last generated.
func (g *generator) containerStatuses(containers []v1.Container, previous []v1.ContainerStatus, hasInit, isInit bool) []v1.ContainerStatus {
	if len(containers) == 0 {
		return nil
	}
	olds := make(map[string]*v1.ContainerStatus, len(previous))
	for i := range previous {
		olds[previous[i].Name] = &previous[i]
	}
	defaultReason := containerCreating
	if hasInit {
		defaultReason = podInitializing
	}
	specs := make(map[string]*v1.Container, len(containers))
	statuses := make(map[string]*v1.ContainerStatus, len(containers))
	for i := range containers {
		c := &containers[i]
		specs[c.Name] = c
		st := &v1.ContainerStatus{
			Name:  c.Name,
			Image: c.Image,
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: defaultReason}},
		}
		if old := olds[c.Name]; old != nil {
			if old.State.Terminated != nil {
				st = old.DeepCopy()
			} else {
				st.RestartCount = old.RestartCount
				st.LastTerminationState = *old.LastTerminationState.DeepCopy()
			}
		}
		st.VolumeMounts = volumeMountStatuses(c)
		statuses[c.Name] = st
	}

	// A container that was running and is gone from the runtime ran and
	// ended; say so instead of pretending it never started.
	for i := range containers {
		c := &containers[i]
		old := olds[c.Name]
		if g.latest(c.Name) != nil || old == nil {
			continue
		}
		st := statuses[c.Name]
		if g.restartingAll && old.State.Waiting == nil {
			// Removed to restart all the pod's containers: it waits to
			// start again, and it did end.
			st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: RestartingAllContainers, Message: removedForRestartAllMessage}}
			st.LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				Reason: RestartingAllContainers, Message: removedForRestartAllMessage, ExitCode: 137}}
			st.RestartCount = old.RestartCount + 1
			continue
		}
		if old.State.Terminated != nil || old.State.Running == nil {
			continue
		}
		if st.State.Waiting == nil || st.State.Waiting.Reason != defaultReason || st.LastTerminationState.Terminated != nil {
			continue
		}
		st.LastTerminationState.Terminated = &v1.ContainerStateTerminated{
			Reason:   containerStatusUnknown,
			Message:  "The container could not be located when the pod was deleted.  The container used to be Running",
			ExitCode: 137,
		}
		if g.pod.DeletionTimestamp == nil {
			st.RestartCount++
		}
	}

	// The newest instance is the state, the one before the last termination.
	seen := make(map[string]int, len(containers))
	for _, cs := range g.containers {
		spec := specs[cs.Name]
		if spec == nil || seen[cs.Name] >= 2 {
			continue
		}
		st := convertContainerStatus(cs, olds[cs.Name], spec, g.restartingAll)
		if seen[cs.Name] == 0 {
			st.VolumeMounts = statuses[cs.Name].VolumeMounts
			statuses[cs.Name] = st
		} else {
			statuses[cs.Name].LastTerminationState = st.State
		}
		seen[cs.Name]++
	}

	// Containers the agent will (re)start wait, for the reason it gave.
	for i := range containers {
		c := &containers[i]
		st := statuses[c.Name]
		if isInit {
			latest := g.latest(c.Name)
			if latest != nil && latest.State == podstate.ContainerStateExited && latest.ExitCode == 0 {
				continue
			}
			// An init container removed from the runtime after the pod's
			// regular containers were created did complete.
			if latest == nil && g.anyRegularContainerCreated() && !isSidecar(c) && st.State.Waiting != nil {
				st.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
					Reason:   "Completed",
					Message:  "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally",
					ExitCode: 0,
				}}
				continue
			}
		}
		if !g.shouldRestart(c) {
			continue
		}
		w, ok := g.waiting[c.Name]
		if !ok || w.Reason == nil {
			continue
		}
		if st.State.Terminated != nil {
			st.LastTerminationState = st.State
		}
		st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: w.Reason.Error(), Message: w.Message}}
	}

	out := make([]v1.ContainerStatus, 0, len(statuses))
	if isInit {
		// Init containers in spec order.
		for i := range containers {
			out = append(out, *statuses[containers[i].Name])
		}
		return out
	}
	for _, st := range statuses {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// convertContainerStatus is the API status of one runtime container
// instance; old is the container's previous API status, or nil;
// restartingAll: the pod restarts all its containers in place. As the
// kubelet with RestartAllContainersOnContainerExits (on in 1.37), the
// restart count never goes below the previous one, and the last
// termination carries over from the previous status when the runtime no
// longer has the instance that ended (a container removed to restart all
// containers): the previous state if it was a terminated other instance,
// else the previous last termination.
func convertContainerStatus(cs *podstate.ContainerStatus, old *v1.ContainerStatus, spec *v1.Container, restartingAll bool) *v1.ContainerStatus {
	cid := containerID(cs)
	imageID := cs.ImageRef
	if imageID == "" {
		imageID = cs.ImageID
	}
	image := cs.Image
	if image == "" {
		image = spec.Image
	}
	st := &v1.ContainerStatus{
		Name:         cs.Name,
		RestartCount: int32(cs.RestartCount),
		Image:        image,
		ImageID:      imageID,
		ContainerID:  cid,
		// What runs (the runtime's view), and what the node allocated
		// (spec is the allocated pod's).
		Resources:          statusResources(spec, cs),
		AllocatedResources: spec.Resources.Requests.DeepCopy(),
	}
	if old != nil {
		st.RestartCount = max(st.RestartCount, old.RestartCount)
		switch {
		case old.ContainerID != cid && old.State.Terminated != nil:
			st.LastTerminationState.Terminated = old.State.Terminated.DeepCopy()
		case old.LastTerminationState.Terminated != nil:
			st.LastTerminationState.Terminated = old.LastTerminationState.Terminated.DeepCopy()
		}
	}
	switch {
	case cs.State == podstate.ContainerStateRunning:
		st.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(cs.StartedAt)}
		if old != nil && old.State.Terminated != nil && old.RestartCount >= int32(cs.RestartCount) {
			// It ended and runs again, with a count the runtime did not
			// raise (its earlier instances were removed).
			st.RestartCount = old.RestartCount + 1
		}
	case cs.State == podstate.ContainerStateExited:
		st.State.Terminated = &v1.ContainerStateTerminated{
			ExitCode:    int32(cs.ExitCode),
			Reason:      cs.Reason,
			Message:     cs.Message,
			StartedAt:   metav1.NewTime(cs.StartedAt),
			FinishedAt:  metav1.NewTime(cs.FinishedAt),
			ContainerID: cid,
		}
	case cs.State == podstate.ContainerStateUnknown && old != nil && old.State.Running != nil:
		// It was running and is not any more, but the runtime cannot say
		// how it ended: it failed, it did not "never run".
		reason := containerStatusUnknown
		if restartingAll {
			reason = RestartingAllContainers
		}
		st.State.Terminated = &v1.ContainerStateTerminated{
			Reason:   reason,
			Message:  "The container could not be located when the pod was terminated",
			ExitCode: 137,
		}
		st.RestartCount = old.RestartCount + 1
	default:
		// Created (not started yet) and unknown states wait.
		st.State.Waiting = &v1.ContainerStateWaiting{}
	}
	return st
}

// runtimeID is the runtime's ID in an API container ID "<runtime>://<id>".
func runtimeID(containerID string) string {
	if _, id, ok := strings.Cut(containerID, "://"); ok {
		return id
	}
	return containerID
}

// containerID is the API's "<runtime>://<id>".
func containerID(cs *podstate.ContainerStatus) string {
	if cs.ID == "" {
		return ""
	}
	return cs.Type + "://" + cs.ID
}

// volumeMountStatuses lists c's volume mounts as the kubelet reports them.
// Recursive read-only mounts are reported Disabled: the runtime's support
// for them is not known here.
func volumeMountStatuses(c *v1.Container) []v1.VolumeMountStatus {
	if len(c.VolumeMounts) == 0 {
		return nil
	}
	out := make([]v1.VolumeMountStatus, len(c.VolumeMounts))
	for i, m := range c.VolumeMounts {
		out[i] = v1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if m.ReadOnly {
			mode := v1.RecursiveReadOnlyDisabled
			out[i].RecursiveReadOnly = &mode
		}
	}
	return out
}

// applyProbes sets started and ready from the prober's results, the
// kubelet prober manager's UpdatePodStatus.
func (g *generator) applyProbes(statuses []v1.ContainerStatus, specs []v1.Container, isInit bool) {
	var olds []v1.ContainerStatus
	if isInit {
		olds = g.old.InitContainerStatuses
	} else {
		olds = g.old.ContainerStatuses
	}
	for i := range statuses {
		st := &statuses[i]
		spec := findSpec(specs, st.Name)
		if spec == nil {
			continue
		}
		old := findStatus(olds, st.Name)
		if old != nil && old.ContainerID != st.ContainerID {
			old = nil
		}
		started := g.started(spec, st, old)
		st.Started = &started
		if isInit && !isSidecar(spec) {
			if st.State.Terminated != nil && st.State.Terminated.ExitCode == 0 {
				st.Ready = true
			}
			continue
		}
		if started {
			st.Ready = g.ready(spec, st, old)
		}
	}
}

// started: running, and the startup probe succeeded, or there is none.
// old is the previous status of the same container instance, or nil.
func (g *generator) started(spec *v1.Container, st *v1.ContainerStatus, old *v1.ContainerStatus) bool {
	if st.State.Running == nil {
		return false
	}
	if g.opts.Startup == nil {
		return true
	}
	if ok, known := g.opts.Startup(runtimeID(st.ContainerID)); known {
		return ok
	}
	if old != nil && old.Started != nil && *old.Started {
		// Started before the prober knew it (the agent restarted).
		return true
	}
	return spec.StartupProbe == nil
}

// ready: running, and the readiness probe succeeded, or there is none.
func (g *generator) ready(spec *v1.Container, st *v1.ContainerStatus, old *v1.ContainerStatus) bool {
	if st.State.Running == nil {
		return false
	}
	if g.opts.Readiness == nil {
		return true
	}
	if ok, known := g.opts.Readiness(runtimeID(st.ContainerID)); known {
		return ok
	}
	if spec.ReadinessProbe == nil {
		return true
	}
	// No result yet: a container that was ready in a Ready pod before the
	// prober knew it (the agent restarted) stays ready, so it does not
	// flap.
	if old != nil && old.Ready {
		c := findCondition(g.pod.Status.Conditions, v1.PodReady)
		return c != nil && c.Status == v1.ConditionTrue
	}
	return false
}

func findSpec(specs []v1.Container, name string) *v1.Container {
	for i := range specs {
		if specs[i].Name == name {
			return &specs[i]
		}
	}
	return nil
}

// shouldRestart reports whether the agent will (re)start c: the decision
// the runtime takes, podstate.ShouldContainerBeRestarted.
func (g *generator) shouldRestart(c *v1.Container) bool {
	return podstate.ShouldContainerBeRestarted(g.pod, c, g.latest(c.Name))
}

// anyActiveRegularContainer reports whether a regular container exists in
// the active sandbox: then the pod has initialized.
func (g *generator) anyActiveRegularContainer() bool {
	active := g.rs.ActiveSandboxID()
	if active == "" {
		return false
	}
	for _, cs := range g.containers {
		if cs.SandboxID == active && findSpec(g.pod.Spec.Containers, cs.Name) != nil {
			return true
		}
	}
	return false
}

// anyRegularContainerCreated reports whether the newest instance of a
// regular container was created, running or exited.
func (g *generator) anyRegularContainerCreated() bool {
	for i := range g.pod.Spec.Containers {
		if cs := g.latest(g.pod.Spec.Containers[i].Name); cs != nil && cs.State != podstate.ContainerStateUnknown {
			return true
		}
	}
	return false
}

// setHostIPs sets hostIP(s), and podIP(s) of a host-network pod, from the
// node's IPs; without them, the previous values stay.
func (g *generator) setHostIPs(s *v1.PodStatus) {
	hostIPs := g.opts.HostIPs
	if len(hostIPs) == 0 || hostIPs[0] == nil {
		s.HostIP = g.old.HostIP
		s.HostIPs = append([]v1.HostIP(nil), g.old.HostIPs...)
		if g.pod.Spec.HostNetwork && s.PodIP == "" {
			s.PodIP = g.old.PodIP
			s.PodIPs = append([]v1.PodIP(nil), g.old.PodIPs...)
		}
		return
	}
	s.HostIP = hostIPs[0].String()
	s.HostIPs = []v1.HostIP{{IP: s.HostIP}}
	if len(hostIPs) == 2 && hostIPs[1] != nil {
		s.HostIPs = append(s.HostIPs, v1.HostIP{IP: hostIPs[1].String()})
	}
	if !g.pod.Spec.HostNetwork {
		return
	}
	// Host-network pods have the node's IPs.
	if s.PodIP == "" {
		s.PodIP = hostIPs[0].String()
		s.PodIPs = []v1.PodIP{{IP: s.PodIP}}
	}
	if len(hostIPs) == 2 && hostIPs[1] != nil && len(s.PodIPs) == 1 &&
		netutils.IsIPv6String(s.PodIPs[0].IP) != netutils.IsIPv6(hostIPs[1]) {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: hostIPs[1].String()})
	}
}

// sortPodIPs returns the first IP of the primary family (the first host
// IP's, IPv4 without one) and then the first of the other family, parsed
// and printed canonically; invalid IPs are skipped.
func sortPodIPs(ips []string, hostIPs []net.IP) []string {
	primaryV6 := len(hostIPs) > 0 && hostIPs[0] != nil && netutils.IsIPv6(hostIPs[0])
	var out []string
	for _, v6 := range []bool{primaryV6, !primaryV6} {
		for _, s := range ips {
			ip := netutils.ParseIPSloppy(s)
			if ip != nil && netutils.IsIPv6(ip) == v6 {
				out = append(out, ip.String())
				break
			}
		}
	}
	return out
}

// podResources are the pod-level resources the kubelet reports: the
// allocated (spec) requests and limits aggregated over the containers, or
// the pod-level ones, overhead included; and, for a running pod with
// pod-level resources whose cgroup's are known (actuated), the CPU
// request, CPU limit and memory limit its cgroup was given, as the
// kubelet's convertToAPIPodLevelResourcesStatus reads them back (a CPU
// value at or below what a cgroup expresses keeps the allocated one when
// that is too).
func podResources(pod *v1.Pod, actuated *v1.ResourceRequirements) (*v1.ResourceRequirements, v1.ResourceList) {
	opts := resourcehelper.PodResourcesOptions{}
	allocated := resourcehelper.PodRequests(pod, opts)
	if pod.Status.Phase != v1.PodRunning || pod.Spec.Resources == nil || actuated == nil {
		r := pod.Spec.Resources.DeepCopy()
		if r == nil {
			r = &v1.ResourceRequirements{}
		}
		r.Requests = allocated
		r.Limits = resourcehelper.PodLimits(pod, opts)
		return r, allocated
	}
	// What the cgroup was given: the pod's values with the actuated
	// pod-level resources.
	at := *pod
	at.Spec.Resources = actuated
	applied := &v1.ResourceRequirements{Requests: resourcehelper.PodRequests(&at, opts), Limits: resourcehelper.PodLimits(&at, opts)}
	r := pod.Spec.Resources.DeepCopy()
	if r.Requests == nil {
		r.Requests = v1.ResourceList{}
	}
	if r.Limits == nil {
		r.Limits = v1.ResourceList{}
	}
	if q, ok := applied.Requests[v1.ResourceCPU]; ok && (q.MilliValue() > minShares || r.Requests.Cpu().MilliValue() > minShares) {
		r.Requests[v1.ResourceCPU] = q
	}
	if _, ok := r.Requests[v1.ResourceMemory]; !ok {
		if q, ok := allocated[v1.ResourceMemory]; ok {
			r.Requests[v1.ResourceMemory] = q
		}
	}
	if q, ok := applied.Limits[v1.ResourceCPU]; ok && (q.MilliValue() > minMilliCPULimit || r.Limits.Cpu().MilliValue() > minMilliCPULimit) {
		r.Limits[v1.ResourceCPU] = q
	}
	if q, ok := applied.Limits[v1.ResourceMemory]; ok {
		r.Limits[v1.ResourceMemory] = q
	}
	return r, allocated
}

// podLevelResizeInProgress reports whether the pod-level resources of pod
// (the allocated pod) are not what its cgroup was given (actuated, nil
// when unknown), as the kubelet's isPodLevelResourcesResizeInProgress.
func podLevelResizeInProgress(pod *v1.Pod, actuated *v1.ResourceRequirements) bool {
	return pod.Spec.Resources != nil && actuated != nil &&
		podstate.ComputeResourcesOf(actuated) != podstate.ComputeResourcesOf(pod.Spec.Resources)
}

func isTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }
