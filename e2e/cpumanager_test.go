package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/internal/testenv"
)

// TestCPUManagerStaticOnContainerd: an agent with cpuManagerPolicy static
// and reservedSystemCPUs "0" (and memoryManagerPolicy Static with 100Mi
// reserved on NUMA node 0) on a 2-CPU machine reports 1 allocatable CPU;
// a BestEffort pod runs on both CPUs (its container cgroup's cpuset.cpus
// 0-1); a Guaranteed pod with cpu 1 gets CPU 1 of its own (cpuset.cpus 1,
// recorded in cpu_manager_state in the kubelet's format), its memory on a
// NUMA node (cpuset.mems as memory_manager_state records it), and the
// BestEffort container shrinks to CPU 0; once the Guaranteed pod is
// deleted the BestEffort container is back on 0-1 and the state holds no
// assignment.
func TestCPUManagerStaticOnContainerd(t *testing.T) {
	requireContainerd(t)
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := cpuset.Parse(strings.TrimSpace(string(online)))
	if err != nil {
		t.Fatal(err)
	}
	if cpus.Size() < 2 || !cpus.Contains(0) || !cpus.Contains(1) {
		if testenv.InCI() {
			t.Fatalf("the CPU manager test needs CPUs 0 and 1 online; this machine has %q", cpus)
		}
		t.Skipf("the CPU manager test needs CPUs 0 and 1 online; this machine has %q", cpus)
	}
	t.Parallel()
	ctx := t.Context()
	n := newContainerdPodNodeWith(t, "ctr-cpumanager", nodeOptions{kubeletConfig: map[string]any{
		"cpuManagerPolicy":    "static",
		"reservedSystemCPUs":  "0",
		"memoryManagerPolicy": "Static",
		// The harness's evictionHard memory.available, as the kubelet
		// requires reservedMemory to add up to what allocatable keeps back.
		"reservedMemory": []any{map[string]any{"numaNode": 0, "limits": map[string]any{"memory": "100Mi"}}},
	}})
	node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantAllocatable := resource.NewQuantity(int64(cpus.Size()-1), resource.DecimalSI)
	if got := node.Status.Allocatable[v1.ResourceCPU]; got.Cmp(*wantAllocatable) != 0 {
		t.Errorf("allocatable cpu %s, want %s (capacity less the reserved CPU 0)", got.String(), wantAllocatable)
	}
	all := cpus.String()
	shared := cpus.Difference(cpuset.New(1)).String()

	be := n.createPod(t, n.pod("besteffort", "sleep", "3600"))
	be = waitForPod(t, be.Namespace, be.Name, "Running and Ready", isPodReady)
	beCgroup := n.containerCgroup(t, statusOf(be, "main"))
	waitForCgroupFile(t, "cpuset", beCgroup, "cpuset.cpus", all)

	g := n.pod("guaranteed", "sleep", "3600")
	g.Spec.Containers[0].Resources = resources("1", "1", "64Mi", "64Mi")
	g = n.createPod(t, g)
	g = waitForPod(t, g.Namespace, g.Name, "Running and Ready", isPodReady)
	if g.Status.QOSClass != v1.PodQOSGuaranteed {
		t.Fatalf("pod %s is %s, want Guaranteed", g.Name, g.Status.QOSClass)
	}
	gCgroup := n.containerCgroup(t, statusOf(g, "main"))
	checkCgroupFile(t, "cpuset", gCgroup, "cpuset.cpus", "1")
	mem := readMemoryManagerState(t, filepath.Join(n.agent.Dir, "root", "memory_manager_state"))
	blocks := mem.Entries[string(g.UID)]["main"]
	if mem.PolicyName != "Static" || len(blocks) != 1 || blocks[0].Size != 64<<20 || len(blocks[0].NUMAAffinity) == 0 {
		t.Errorf("memory_manager_state %+v, want Static with 64Mi for %s/main", mem, g.UID)
	} else {
		var nodes []string
		for _, id := range blocks[0].NUMAAffinity {
			nodes = append(nodes, strconv.Itoa(id))
		}
		checkCgroupFile(t, "cpuset", gCgroup, "cpuset.mems", strings.Join(nodes, ","))
	}
	waitForCgroupFile(t, "cpuset", beCgroup, "cpuset.cpus", shared)

	statePath := filepath.Join(n.agent.Dir, "root", "cpu_manager_state")
	state := readCPUManagerState(t, statePath)
	if state.PolicyName != "static" || state.DefaultCPUSet != shared || state.Entries[string(g.UID)]["main"] != "1" {
		t.Errorf("cpu_manager_state %+v, want policy static, defaultCpuSet %s and CPU 1 for %s/main", state, shared, g.UID)
	}

	if err := env.cp.Client().CoreV1().Pods(g.Namespace).Delete(ctx, g.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := env.cp.Client().CoreV1().Pods(g.Namespace).Get(ctx, g.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s not deleted: %v", g.Name, err)
	}
	waitForCgroupFile(t, "cpuset", beCgroup, "cpuset.cpus", all)
	state = readCPUManagerState(t, statePath)
	if state.DefaultCPUSet != all || len(state.Entries) != 0 {
		t.Errorf("cpu_manager_state after the pod went %+v, want defaultCpuSet %s and no entries", state, all)
	}
}

// memoryManagerState is the part of the kubelet's memory_manager_state the
// test reads (its v1 fields, which the v3 format keeps).
type memoryManagerState struct {
	PolicyName string `json:"policyName"`
	Entries    map[string]map[string][]struct {
		NUMAAffinity []int  `json:"numaAffinity"`
		Type         string `json:"type"`
		Size         uint64 `json:"size"`
	} `json:"entries"`
}

func readMemoryManagerState(t *testing.T, path string) memoryManagerState {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s memoryManagerState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v: %s", path, err, b)
	}
	return s
}

// cpuManagerState is the part of the kubelet's cpu_manager_state the test
// reads (its v2 fields, which the v4 format keeps).
type cpuManagerState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
}

func readCPUManagerState(t *testing.T, path string) cpuManagerState {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s cpuManagerState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v: %s", path, err, b)
	}
	return s
}

// waitForCgroupFile polls a cgroup v1 control file until it reads want;
// the CPU manager's reconcile loop runs every 10 s (the kubelet's
// cpuManagerReconcilePeriod).
func waitForCgroupFile(t *testing.T, controller, cgroup, file, want string) {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got = readCgroupFile(t, controller, cgroup, file)
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("%s of %s = %s, want %s within a minute", file, cgroup, got, want)
	}
}
