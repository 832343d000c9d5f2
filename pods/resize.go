package pods

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/status/podstatus"
)

// Allocations records the resources the node allocated to admitted pods,
// for in-place pod resize: a pod's spec says what it asks for, its
// allocation what the runtime actuates. *allocation.Manager (package
// resources/allocation) is one.
type Allocations interface {
	// AllocatedPod returns pod with its allocated resources in place of
	// its spec's, and whether they differ (a resize not allocated yet); a
	// pod without an allocation is returned as it is.
	AllocatedPod(pod *v1.Pod) (*v1.Pod, bool, error)
	// SetAllocated records pod's spec resources as its allocation.
	SetAllocated(pod *v1.Pod) error
	// RemovePod forgets the allocation of the pod with uid.
	RemovePod(uid types.UID) error
	// RemoveOrphans forgets the allocations of the pods keep does not
	// know.
	RemoveOrphans(keep func(types.UID) bool) error
}

// allocationRecorder is implemented by Allocations that can record an
// allocation in memory and write their checkpoint later
// (*allocation.Manager does): admission, which decides one pod at a time,
// then records without waiting for the disk, and each pod's first sync
// calls Flush before the runtime acts on the allocation, so that the pods
// of a burst share the checkpoint's writes. With Allocations that do not,
// admission calls SetAllocated.
type allocationRecorder interface {
	// Record records pod's spec resources as its allocation in memory:
	// AllocatedPod sees it at once.
	Record(pod *v1.Pod) error
	// Flush returns once every allocation recorded before the call is
	// stored.
	Flush() error
}

// flushAllocation stores the allocation admission recorded for pod, if it
// is not stored yet; a failure is logged, as admission logs one of
// SetAllocated, and not retried (the next change of any allocation writes
// the checkpoint again).
func (c *Controller) flushAllocation(ctx context.Context, pod *v1.Pod) {
	c.mu.Lock()
	r := c.pods[pod.UID]
	unflushed := r != nil && r.unflushed
	if unflushed {
		r.unflushed = false
	}
	c.mu.Unlock()
	if !unflushed {
		return
	}
	if err := c.opts.Allocations.(allocationRecorder).Flush(); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot record the pod's allocated resources", "pod", klog.KObj(pod))
	}
}

// Event reasons of in-place resize, the kubelet's.
const (
	eventResizeStarted    = "ResizeStarted"
	eventResizeDeferred   = "ResizeDeferred"
	eventResizeInfeasible = "ResizeInfeasible"
	eventResizeCompleted  = "ResizeCompleted"
)

// allocatedPod is pod with its allocated resources (the pod itself when
// none are recorded, or when they cannot be read, which is logged).
func (c *Controller) allocatedPod(ctx context.Context, pod *v1.Pod) (*v1.Pod, bool) {
	alloc, differs, err := c.opts.Allocations.AllocatedPod(pod)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot read the pod's allocated resources; using its spec's", "pod", klog.KObj(pod))
		return pod, false
	}
	return alloc, differs
}

// handleResize decides a resize of an admitted, running pod, as the
// kubelet's handlePodResourcesResize: when its spec asks for other
// resources than were allocated, the resize is admitted like a new pod
// against the other pods' allocations (the admit handlers); admitted, the
// spec's resources become the allocation (ResizeStarted); refused, the
// resize is pending, Deferred (tried again at each sync of the pod, and
// when another pod's resources are freed) or Infeasible, with the
// refusal's message (ResizeDeferred, ResizeInfeasible events once per
// reason and generation). It returns the allocated pod, which is what the
// runtime actuates and the status reports.
func (c *Controller) handleResize(ctx context.Context, pod *v1.Pod) *v1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.pods[pod.UID]
	alloc, differs := c.allocatedPod(ctx, pod)
	if !differs {
		if r != nil {
			r.resizePending = nil
		}
		return alloc
	}
	logger := klog.FromContext(ctx)
	// Pod-level resources are resized as the containers'
	// (InPlacePodLevelResourcesVerticalScaling).
	var res AdmitResult
	if msg := c.resizeInfeasible(pod, alloc); msg != "" {
		res = AdmitResult{Reason: v1.PodReasonInfeasible, Message: msg}
	} else {
		res = c.admitAs(pod, alloc)
	}
	if res.Admit {
		if err := c.opts.Allocations.SetAllocated(pod); err != nil {
			logger.Error(err, "Cannot record the pod's resized allocation; will retry", "pod", klog.KObj(pod))
			return alloc
		}
		c.store.update(pod)
		if r != nil {
			r.resizePending = nil
		}
		logger.V(2).Info("Pod resize allocated", "pod", klog.KObj(pod), "generation", pod.Generation)
		c.event(pod, v1.EventTypeNormal, eventResizeStarted, resizeMessage(pod, "Pod resize started", ""))
		return pod
	}
	reason, event := v1.PodReasonDeferred, eventResizeDeferred
	if res.Reason == v1.PodReasonInfeasible {
		reason, event = v1.PodReasonInfeasible, eventResizeInfeasible
	}
	pending := &podstatus.ResizePending{Reason: reason, Message: res.Message}
	if r != nil {
		if r.resizePending == nil || r.resizePending.Reason != reason || r.resizePendingGeneration != pod.Generation {
			logger.V(2).Info("Pod resize pending", "pod", klog.KObj(pod), "reason", reason, "message", res.Message)
			c.event(pod, v1.EventTypeWarning, event, resizeMessage(pod, "Pod resize "+reason, res.Message))
		}
		r.resizePending, r.resizePendingGeneration = pending, pod.Generation
	}
	return alloc
}

// resizeInfeasible returns why the node cannot resize pod from its
// allocation alloc at all, as the kubelet's resize admission before it
// weighs the resize against the other pods, or "": a resize of pod-level
// resources with InPlacePodLevelResourcesVerticalScaling off, and the CPU
// (memory) of a Guaranteed pod under the static CPU (Static memory)
// manager policy while InPlacePodVerticalScalingExclusiveCPUs
// (InPlacePodVerticalScalingExclusiveMemory) is off, its default.
func (c *Controller) resizeInfeasible(pod, alloc *v1.Pod) string {
	if !c.opts.Features.Enabled(features.InPlacePodLevelResourcesVerticalScaling) &&
		!apiequality.Semantic.DeepEqual(pod.Spec.Resources, alloc.Spec.Resources) {
		return "InPlacePodLevelResourcesVerticalScaling is disabled"
	}
	qos := pod.Status.QOSClass
	if c.opts.QOSClass != nil {
		qos = c.opts.QOSClass(pod)
	}
	if qos != v1.PodQOSGuaranteed {
		return ""
	}
	if !c.opts.Features.Enabled(features.InPlacePodVerticalScalingExclusiveCPUs) && c.opts.CPUManagerPolicy == "static" &&
		containerRequestResized(pod, alloc, v1.ResourceCPU) {
		return `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"`
	}
	if !c.opts.Features.Enabled(features.InPlacePodVerticalScalingExclusiveMemory) && c.opts.MemoryManagerPolicy == "Static" &&
		containerRequestResized(pod, alloc, v1.ResourceMemory) {
		return `Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"`
	}
	return ""
}

// containerRequestResized reports whether a container of pod requests
// another amount of resource than its allocation in alloc (for a
// Guaranteed pod requests equal limits).
func containerRequestResized(pod, alloc *v1.Pod, resource v1.ResourceName) bool {
	allocated := map[string]v1.ResourceList{}
	for _, list := range [][]v1.Container{alloc.Spec.InitContainers, alloc.Spec.Containers} {
		for _, c := range list {
			allocated[c.Name] = c.Resources.Requests
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if !c.Resources.Requests[resource].Equal(allocated[c.Name][resource]) {
				return true
			}
		}
	}
	return false
}

// admitAs runs the admission checks on pod against the other active pods,
// as allocated; c.mu held.
func (c *Controller) admitAs(pod, allocated *v1.Pod) AdmitResult {
	node, ok := c.opts.Node()
	if !ok {
		node = nil
	}
	others := slices.DeleteFunc(c.store.Active(), func(p *v1.Pod) bool { return p.UID == pod.UID || p.UID == allocated.UID })
	attrs := AdmitAttributes{Pod: pod, OtherPods: others, Node: node}
	for i, h := range c.opts.Admit {
		if res := c.callAdmit(i, h, attrs); !res.Admit {
			return res
		}
	}
	return AdmitResult{Admit: true}
}

// retryDeferredResizes syncs the pods whose resize was deferred, after
// another pod's resources were freed.
func (c *Controller) retryDeferredResizes() {
	c.mu.Lock()
	var uids []types.UID
	for uid, r := range c.pods {
		if r.resizePending != nil && r.resizePending.Reason == v1.PodReasonDeferred {
			uids = append(uids, uid)
		}
	}
	c.mu.Unlock()
	for _, uid := range uids {
		c.workers.poke(uid)
	}
}

// resizePendingOf returns the pending resize of the pod with uid, or nil.
func (c *Controller) resizePendingOf(uid types.UID) *podstatus.ResizePending {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.pods[uid]; r != nil && r.resizePending != nil {
		p := *r.resizePending
		return &p
	}
	return nil
}

// observeResize records ResizeCompleted when a pod's status stops saying
// PodResizeInProgress.
func (c *Controller) observeResize(pod *v1.Pod, st *v1.PodStatus) {
	inProgress := false
	for _, cond := range st.Conditions {
		inProgress = inProgress || (cond.Type == v1.PodResizeInProgress && cond.Status == v1.ConditionTrue)
	}
	c.mu.Lock()
	r := c.pods[pod.UID]
	completed := r != nil && r.resizing && !inProgress
	if r != nil {
		r.resizing = inProgress
	}
	c.mu.Unlock()
	if completed {
		c.event(pod, v1.EventTypeNormal, eventResizeCompleted, resizeMessage(pod, "Pod resize completed", ""))
	}
}

func (c *Controller) event(pod *v1.Pod, eventType, reason, message string) {
	if c.opts.Recorder != nil {
		c.opts.Recorder.Event(pod, eventType, reason, message)
	}
}

// resizeMessage is the kubelet's resize event message: prefix, then the
// JSON summary of the containers' resources in pod (the allocation, or
// what is asked), its generation and an error.
func resizeMessage(pod *v1.Pod, prefix, errMsg string) string {
	type containerAllocation struct {
		Name      string                  `json:"name"`
		Resources v1.ResourceRequirements `json:"resources,omitempty"`
	}
	summary := struct {
		InitContainers []containerAllocation `json:"initContainers,omitempty"`
		Containers     []containerAllocation `json:"containers,omitempty"`
		Generation     int64                 `json:"generation"`
		Error          string                `json:"error,omitempty"`
	}{Generation: pod.Generation, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		summary.InitContainers = append(summary.InitContainers, containerAllocation{Name: c.Name, Resources: c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		summary.Containers = append(summary.Containers, containerAllocation{Name: c.Name, Resources: c.Resources})
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return prefix
	}
	return fmt.Sprintf("%s: %s", prefix, b)
}
