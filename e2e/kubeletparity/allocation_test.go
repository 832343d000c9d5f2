package kubeletparity

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/allocation/state"

	"github.com/nodekit/nodekit/resources/allocation"
)

// TestAllocationCheckpointMatchesKubelet: the allocated_pods_state nodekit
// writes is read by the kubelet's allocation state (checksum verified) with
// the same resources, and what the kubelet writes nodekit reads: an agent
// that replaces a kubelet on a node keeps its pods' allocations.
func TestAllocationCheckpointMatchesKubelet(t *testing.T) {
	dir := t.TempDir()
	res := v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: res}}}}
	if err := allocation.New(allocation.Options{RootDir: dir}).SetAllocated(pod); err != nil {
		t.Fatal(err)
	}
	kubelet, err := state.NewStateCheckpoint(klog.Background(), dir, allocation.CheckpointFile)
	if err != nil {
		t.Fatalf("the kubelet cannot read nodekit's checkpoint: %v", err)
	}
	got, ok := kubelet.GetContainerResources("uid-1", "c")
	if !ok || !got.Requests.Cpu().Equal(resource.MustParse("250m")) || !got.Limits.Memory().Equal(resource.MustParse("128Mi")) {
		t.Fatalf("the kubelet read %v (%v), want %v", got, ok, res)
	}

	// The kubelet allocates a resize; nodekit reads it.
	resized := *res.DeepCopy()
	resized.Requests[v1.ResourceCPU] = resource.MustParse("500m")
	if err := kubelet.SetContainerResources(klog.Background(), "uid-1", "c", resized); err != nil {
		t.Fatal(err)
	}
	alloc, differs, err := allocation.New(allocation.Options{RootDir: dir}).AllocatedPod(pod)
	if err != nil {
		t.Fatalf("nodekit cannot read the kubelet's checkpoint: %v", err)
	}
	if !differs || !alloc.Spec.Containers[0].Resources.Requests.Cpu().Equal(resource.MustParse("500m")) {
		t.Errorf("nodekit read %v (differs %v), want the kubelet's 500m", alloc.Spec.Containers[0].Resources, differs)
	}
}
