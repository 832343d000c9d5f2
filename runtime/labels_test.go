package runtime_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/runtime"
)

// TestHashContainerKubeletValues pins HashContainer to values the kubelet
// v1.37.2's HashContainer computed for the same containers (printed by a
// test in e2e/kubeletparity, which compares the two functions on many more
// containers), so a change that breaks the handover from a kubelet shows in
// the library's own tests.
func TestHashContainerKubeletValues(t *testing.T) {
	for _, tc := range []struct {
		c    v1.Container
		want uint64
	}{
		{v1.Container{}, 0xedd67cc4},
		{v1.Container{Name: "nginx", Image: "nginx:1.27"}, 0x91edee8f},
		{v1.Container{Name: "x", Image: "example.com/<weird>&image"}, 0xee8ac347},
		{v1.Container{Name: "app", Image: "busybox", Args: []string{"sleep", "1"}}, 0x3ada567e},
	} {
		if got := runtime.HashContainer(&tc.c); got != tc.want {
			t.Errorf("HashContainer(name %q, image %q) = %x, the kubelet's is %x", tc.c.Name, tc.c.Image, got, tc.want)
		}
	}
}
