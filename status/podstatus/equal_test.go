package podstatus

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// statusEqual is Semantic.DeepEqual of what the kubelet writes, whether
// or not the two statuses encode alike: equal encodings are equal, and
// different encodings of equal values (a quantity's two spellings, an
// empty list and none) are equal too.
func TestStatusEqual(t *testing.T) {
	_, base := benchStatuses()
	withMemory := func(q string) v1.PodStatus {
		s := *base.DeepCopy()
		s.ContainerStatuses[0].AllocatedResources = v1.ResourceList{v1.ResourceMemory: resource.MustParse(q)}
		return s
	}
	for _, c := range []struct {
		name string
		a, b v1.PodStatus
		want bool
	}{
		{"copies", base, *base.DeepCopy(), true},
		{"one quantity spelled two ways", withMemory("1Gi"), withMemory("1073741824"), true},
		{"two quantities", withMemory("1Gi"), withMemory("2Gi"), false},
		{"no list and an empty one", func() v1.PodStatus { s := *base.DeepCopy(); s.InitContainerStatuses = nil; return s }(),
			func() v1.PodStatus { s := *base.DeepCopy(); s.InitContainerStatuses = []v1.ContainerStatus{}; return s }(), true},
		{"a container not ready", base, func() v1.PodStatus { s := *base.DeepCopy(); s.ContainerStatuses[0].Ready = false; return s }(), false},
		{"another phase", base, func() v1.PodStatus { s := *base.DeepCopy(); s.Phase = v1.PodPending; return s }(), false},
		{"a condition's time", base, func() v1.PodStatus {
			s := *base.DeepCopy()
			s.Conditions[0].LastTransitionTime.Time = s.Conditions[0].LastTransitionTime.Add(1e9)
			return s
		}(), true},
		{"a condition's status", base, func() v1.PodStatus {
			s := *base.DeepCopy()
			s.Conditions[0].Status = v1.ConditionFalse
			return s
		}(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := statusEqual(&c.a, &c.b); got != c.want {
				t.Errorf("statusEqual = %v, want %v", got, c.want)
			}
			if got := statusEqual(&c.b, &c.a); got != c.want {
				t.Errorf("statusEqual, the other way = %v, want %v", got, c.want)
			}
		})
	}
}
