package allocation_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/resources/allocation"
)

func pod(uid, cpu string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "init"}},
			Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}}}
}

// TestAllocationCheckpoint: an allocation is kept across Managers in the
// kubelet's allocated_pods_state format, the allocated pod carries it while
// the spec asks for more, and forgotten pods leave the checkpoint.
func TestAllocationCheckpoint(t *testing.T) {
	root := t.TempDir()
	m := allocation.New(allocation.Options{RootDir: root})
	p := pod("a", "100m")
	if got, differs, err := m.AllocatedPod(p); err != nil || differs || got != p {
		t.Fatalf("no allocation yet: %v %v %v", got, differs, err)
	}
	if err := m.SetAllocated(p); err != nil {
		t.Fatal(err)
	}
	if err := m.SetAllocated(pod("b", "1")); err != nil {
		t.Fatal(err)
	}
	blob, err := os.ReadFile(filepath.Join(root, allocation.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var cp struct {
		Data     string `json:"data"`
		Checksum uint64 `json:"checksum"`
	}
	if err := json.Unmarshal(blob, &cp); err != nil || !strings.HasPrefix(cp.Data, `{"entries":{"a":{"ContainerResources":{"c":{"requests":{"cpu":"100m"}}`) || cp.Checksum == 0 {
		t.Fatalf("checkpoint %s: %v", blob, err)
	}

	// A new Manager (the agent restarted) reads it; the spec asks for more.
	m = allocation.New(allocation.Options{RootDir: root})
	resized := pod("a", "200m")
	got, differs, err := m.AllocatedPod(resized)
	if err != nil || !differs || got.Spec.Containers[0].Resources.Requests.Cpu().String() != "100m" {
		t.Fatalf("allocated pod %v, differs %v, %v; want the 100m allocation", got.Spec.Containers[0].Resources, differs, err)
	}
	if resized.Spec.Containers[0].Resources.Requests.Cpu().String() != "200m" {
		t.Error("AllocatedPod modified its argument")
	}

	if err := m.RemoveOrphans(func(uid types.UID) bool { return uid == "a" }); err != nil {
		t.Fatal(err)
	}
	if err := m.RemovePod("a"); err != nil {
		t.Fatal(err)
	}
	m = allocation.New(allocation.Options{RootDir: root})
	if m.Allocated("a") || m.Allocated("b") {
		t.Error("removed allocations came back")
	}

	// A corrupt checkpoint is an error, not an empty state.
	if err := os.WriteFile(filepath.Join(root, allocation.CheckpointFile), []byte(`{"data":"{}","checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := allocation.New(allocation.Options{RootDir: root}).AllocatedPod(p); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("corrupt checkpoint: %v", err)
	}
}

// TestRecordFlush: Record changes what AllocatedPod and Allocated see at
// once and the checkpoint only at Flush; concurrent Record+Flush calls of
// many pods leave a checkpoint that holds them all, each Flush returning
// only once its pod is stored.
func TestRecordFlush(t *testing.T) {
	root := t.TempDir()
	m := allocation.New(allocation.Options{RootDir: root})
	if err := m.Record(pod("a", "100m")); err != nil {
		t.Fatal(err)
	}
	if !m.Allocated("a") {
		t.Fatal("a recorded allocation is not seen at once")
	}
	if _, err := os.Stat(filepath.Join(root, allocation.CheckpointFile)); !os.IsNotExist(err) {
		t.Fatalf("Record wrote the checkpoint (stat: %v)", err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	if !allocation.New(allocation.Options{RootDir: root}).Allocated("a") {
		t.Fatal("the checkpoint does not hold the flushed allocation")
	}

	const pods = 50
	errs := make(chan error, pods)
	for i := range pods {
		go func() {
			uid := fmt.Sprintf("p%02d", i)
			if err := m.Record(pod(uid, "10m")); err != nil {
				errs <- err
				return
			}
			if err := m.Flush(); err != nil {
				errs <- err
				return
			}
			// Stored once Flush returned, whoever wrote it.
			if !allocation.New(allocation.Options{RootDir: root}).Allocated(types.UID(uid)) {
				errs <- fmt.Errorf("pod %s is not in the checkpoint after its Flush", uid)
				return
			}
			errs <- nil
		}()
	}
	for range pods {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
