package eviction

import (
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
)

// Reason is the reason of an evicted pod's status, of its Evicted event and
// of an admission the manager rejects.
const Reason = "Evicted"

// Pressure holds the node's pressure conditions as the Manager last set
// them (Options.Pressure): what admission and the node status read, without
// depending on the Manager. The zero value is ready to use and reports no
// pressure. Its methods are cheap, never block and are safe for concurrent
// use.
type Pressure struct {
	mu         sync.RWMutex
	conditions []v1.NodeConditionType
}

// NewPressure returns a Pressure with no condition.
func NewPressure() *Pressure { return &Pressure{} }

// set replaces the conditions.
func (p *Pressure) set(conditions []v1.NodeConditionType) {
	p.mu.Lock()
	p.conditions = conditions
	p.mu.Unlock()
}

// IsUnderMemoryPressure reports the MemoryPressure condition
// (status.PressureFuncs.Memory).
func (p *Pressure) IsUnderMemoryPressure() bool { return p.UnderPressure(v1.NodeMemoryPressure) }

// IsUnderDiskPressure reports the DiskPressure condition.
func (p *Pressure) IsUnderDiskPressure() bool { return p.UnderPressure(v1.NodeDiskPressure) }

// IsUnderPIDPressure reports the PIDPressure condition.
func (p *Pressure) IsUnderPIDPressure() bool { return p.UnderPressure(v1.NodePIDPressure) }

// UnderPressure reports whether condition (a built-in pressure condition or
// one an embedder's Signal sets) is currently true.
func (p *Pressure) UnderPressure(condition v1.NodeConditionType) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Contains(p.conditions, condition)
}

// Conditions returns the pressure conditions currently true, in a fixed
// order (MemoryPressure, DiskPressure, PIDPressure, then others by name).
// The caller owns the slice.
func (p *Pressure) Conditions() []v1.NodeConditionType {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Clone(p.conditions)
}

// Admit decides whether pod may start on the node given the pressure
// conditions, as the kubelet's eviction admit handler: with no condition,
// or for a critical pod, admit; under MemoryPressure alone, reject only
// BestEffort pods that do not tolerate the
// node.kubernetes.io/memory-pressure:NoSchedule taint; under any other
// condition reject every pod. A rejection has reason "Evicted" and the
// message "The node had condition: [MemoryPressure]. ". Admit does not
// modify pod, does not block and is safe for concurrent use.
func (p *Pressure) Admit(pod *v1.Pod) (admit bool, reason, message string) {
	p.mu.RLock()
	conds := p.conditions
	p.mu.RUnlock()
	if len(conds) == 0 || IsCriticalPod(pod) {
		return true, "", ""
	}
	if len(conds) == 1 && conds[0] == v1.NodeMemoryPressure {
		if !isBestEffort(pod) || toleratesMemoryPressure(pod) {
			return true, "", ""
		}
	}
	return false, Reason, fmt.Sprintf("The node had condition: %v. ", conds)
}

// toleratesMemoryPressure reports whether pod tolerates the
// node.kubernetes.io/memory-pressure:NoSchedule taint (comparison operators
// off, their 1.37 default).
func toleratesMemoryPressure(pod *v1.Pod) bool {
	taint := &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
	for i := range pod.Spec.Tolerations {
		if pod.Spec.Tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
			return true
		}
	}
	return false
}

// isBestEffort reports whether pod's QoS class is BestEffort: the class in
// its status when set, else computed as the kubelet does (no cpu or memory
// request or limit on the pod level when pod-level resources are set, or on
// any init or regular container otherwise).
func isBestEffort(pod *v1.Pod) bool {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass == v1.PodQOSBestEffort
	}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		return noComputeResources(pod.Spec.Resources)
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if !noComputeResources(&list[i].Resources) {
				return false
			}
		}
	}
	return true
}

func noComputeResources(r *v1.ResourceRequirements) bool {
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		req, lim := r.Requests[name], r.Limits[name]
		if !req.IsZero() || !lim.IsZero() {
			return false
		}
	}
	return true
}
