package podstatus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/nodekit/nodekit/internal/protoequal"
)

// maxTerminationMessageLength bounds the termination messages of all of a
// pod's containers together, the kubelet's
// MaxPodTerminationMessageLogLength.
const maxTerminationMessageLength = 1024 * 12

// mergePodStatus is the status to write over the API server's apiStatus:
// status with the conditions others own taken from apiStatus, the kubelet's
// mergePodStatus. A terminal phase waits while the pod could have running
// containers; a terminal pod is never written Ready. Neither argument is
// modified; now stamps the conditions it changes.
func mergePodStatus(pod *v1.Pod, apiStatus, status v1.PodStatus, couldHaveRunningContainers bool, now metav1.Time) v1.PodStatus {
	merged := *status.DeepCopy()
	toTerminal := !isTerminal(apiStatus.Phase) && isTerminal(merged.Phase)

	conditions := make([]v1.PodCondition, 0, len(apiStatus.Conditions)+len(merged.Conditions))
	for _, c := range apiStatus.Conditions {
		if !isKubeletCondition(c.Type) {
			conditions = append(conditions, *c.DeepCopy())
		}
	}
	for _, c := range merged.Conditions {
		switch {
		case isKubeletCondition(c.Type):
			conditions = append(conditions, c)
		case isSharedCondition(c.Type) && toTerminal && !couldHaveRunningContainers:
			// DisruptionTarget is sent with the terminal phase, once the
			// containers stopped, stamped then.
			setTransitionTime(&merged, &apiStatus, c.Type, now)
			if nc := findCondition(merged.Conditions, c.Type); nc != nil {
				conditions = setCondition(conditions, *nc)
			}
		}
	}
	merged.Conditions = conditions

	// Not the kubelet's to write.
	merged.ResourceClaimStatuses = apiStatus.ResourceClaimStatuses
	merged.ExtendedResourceClaimStatus = apiStatus.ExtendedResourceClaimStatus
	merged.NodeAllocatableResourceClaimStatuses = apiStatus.NodeAllocatableResourceClaimStatuses

	if toTerminal && couldHaveRunningContainers {
		merged.Phase, merged.Reason, merged.Message = apiStatus.Phase, apiStatus.Reason, apiStatus.Message
	}
	if isTerminal(merged.Phase) {
		for _, t := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady} {
			if c := findCondition(merged.Conditions, t); c != nil && c.Status == v1.ConditionTrue {
				nc := terminalReadyCondition(pod, t, merged.Phase)
				nc.LastTransitionTime = now
				*c = nc
			}
		}
	}
	return merged
}

// preparePatch returns the strategic merge patch turning apiStatus into
// status, with uid as precondition (metadata.uid), and whether it changes
// nothing.
func preparePatch(uid types.UID, apiStatus, status v1.PodStatus) ([]byte, bool, error) {
	oldData, err := json.Marshal(v1.Pod{Status: apiStatus})
	if err != nil {
		return nil, false, fmt.Errorf("encode old status: %w", err)
	}
	newData, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: status})
	if err != nil {
		return nil, false, fmt.Errorf("encode new status: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, v1.Pod{})
	if err != nil {
		return nil, false, fmt.Errorf("create status patch: %w", err)
	}
	return patch, bytes.Equal(patch, fmt.Appendf(nil, `{"metadata":{"uid":%q}}`, uid)), nil
}

// statusEqual reports whether two normalized statuses agree on what the
// kubelet writes: the kubelet's and shared conditions (by status, reason
// and message) and every other field but the resource claim statuses.
func statusEqual(a, b *v1.PodStatus) bool {
	owned := func(s *v1.PodStatus) map[v1.PodConditionType]v1.PodCondition {
		m := make(map[v1.PodConditionType]v1.PodCondition, len(s.Conditions))
		for _, c := range s.Conditions {
			if isKubeletCondition(c.Type) || isSharedCondition(c.Type) {
				m[c.Type] = c
			}
		}
		return m
	}
	ac, bc := owned(a), owned(b)
	if len(ac) != len(bc) {
		return false
	}
	for t, c := range bc {
		o, ok := ac[t]
		if !ok || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message {
			return false
		}
	}
	x := *a
	x.Conditions = b.Conditions
	x.ResourceClaimStatuses = b.ResourceClaimStatuses
	x.ExtendedResourceClaimStatus = b.ExtendedResourceClaimStatus
	x.NodeAllocatableResourceClaimStatuses = b.NodeAllocatableResourceClaimStatuses
	return protoequal.Same(&x, b) || apiequality.Semantic.DeepEqual(&x, b)
}

// setTransitionTime stamps the condition of type t in status with now, or
// with old's time when old has it with the same status.
func setTransitionTime(status, old *v1.PodStatus, t v1.PodConditionType, now metav1.Time) {
	c := findCondition(status.Conditions, t)
	if c == nil {
		return
	}
	if o := findCondition(old.Conditions, t); o != nil && o.Status == c.Status {
		c.LastTransitionTime = o.LastTransitionTime
		return
	}
	c.LastTransitionTime = now
}

// normalize rounds status's times to seconds, as the API server stores them,
// bounds termination messages, and sorts container statuses (by name; init
// containers in spec order), so it compares equal to what the API server
// returns.
func normalize(pod *v1.Pod, status *v1.PodStatus) {
	perContainer := maxTerminationMessageLength
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers); n > 0 {
		perContainer /= n
	}
	round := func(t *metav1.Time) { *t = t.Rfc3339Copy() }
	state := func(s *v1.ContainerState) {
		if s.Running != nil {
			round(&s.Running.StartedAt)
		}
		if s.Terminated != nil {
			round(&s.Terminated.StartedAt)
			round(&s.Terminated.FinishedAt)
			if len(s.Terminated.Message) > perContainer {
				s.Terminated.Message = s.Terminated.Message[:perContainer]
			}
		}
	}
	if status.StartTime != nil {
		round(status.StartTime)
	}
	for i := range status.Conditions {
		round(&status.Conditions[i].LastProbeTime)
		round(&status.Conditions[i].LastTransitionTime)
	}
	for _, list := range [][]v1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses, status.EphemeralContainerStatuses} {
		for i := range list {
			state(&list[i].State)
			state(&list[i].LastTerminationState)
		}
	}
	byName := func(list []v1.ContainerStatus) {
		sort.SliceStable(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	}
	byName(status.ContainerStatuses)
	byName(status.EphemeralContainerStatuses)
	order := make(map[string]int, len(pod.Spec.InitContainers))
	for i, c := range pod.Spec.InitContainers {
		order[c.Name] = i
	}
	sort.SliceStable(status.InitContainerStatuses, func(i, j int) bool {
		return order[status.InitContainerStatuses[i].Name] < order[status.InitContainerStatuses[j].Name]
	})
}
