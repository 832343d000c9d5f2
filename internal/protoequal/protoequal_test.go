package protoequal

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func spec() *v1.PodSpec {
	return &v1.PodSpec{
		NodeName: "node-a",
		Containers: []v1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"},
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}}},
		NodeSelector: map[string]string{"a": "1", "b": "2", "c": "3"},
	}
}

func TestSame(t *testing.T) {
	empty := spec()
	empty.Tolerations = []v1.Toleration{}
	command := spec()
	command.Containers[0].Command[1] = "3601"
	selector := spec()
	selector.NodeSelector["d"] = "4"
	spelled := spec()
	spelled.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("1073741824")
	for _, tc := range []struct {
		name string
		b    *v1.PodSpec
		want bool
	}{
		{"equal, maps built anew", spec(), true},
		{"a nil and an empty slice", empty, true},
		{"a different argument", command, false},
		{"one more map entry", selector, false},
		// Equal quantities spelled differently encode differently: the
		// caller compares semantically then.
		{"a quantity spelled otherwise", spelled, false},
	} {
		if got := Same(spec(), tc.b); got != tc.want {
			t.Errorf("%s: Same = %v, want %v", tc.name, got, tc.want)
		}
		if got := Same(tc.b, spec()); got != tc.want {
			t.Errorf("%s, swapped: Same = %v, want %v", tc.name, got, tc.want)
		}
	}
}
