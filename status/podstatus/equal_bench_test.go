package podstatus

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// BenchmarkStatusEqual compares a running busybox pod's status with, in
// turn, an equal copy of it (what a sync that changed nothing sets), the
// same with a container no longer ready (a difference deep inside), and
// its Pending status before (a difference in the phase).
func BenchmarkStatusEqual(b *testing.B) {
	apiStatus, status := benchStatuses()
	equal := *status.DeepCopy()
	notReady := *status.DeepCopy()
	notReady.ContainerStatuses[0].Ready = false
	for _, c := range []struct {
		name  string
		other v1.PodStatus
		want  bool
	}{{"equal", equal, true}, {"container", notReady, false}, {"phase", apiStatus, false}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if statusEqual(&status, &c.other) != c.want {
					b.Fatalf("statusEqual = %v, want %v", !c.want, c.want)
				}
			}
		})
	}
}
