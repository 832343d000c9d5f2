package kubeletparity

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	kcpumanager "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	ktopology "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/resources/cpumanager"
	"github.com/nodekit/nodekit/resources/memorymanager"
	"github.com/nodekit/nodekit/resources/topology"
)

func guaranteedPod(uid string, cpu, memory string) *v1.Pod {
	rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(memory)}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)},
		Spec:   v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: rl, Limits: rl}}}},
		Status: v1.PodStatus{QOSClass: v1.PodQOSGuaranteed}}
}

// TestCPUManagerStateMatchesKubelet: the cpu_manager_state nodekit writes
// is read by the kubelet's CPU manager state (v4 data checksum verified),
// its legacy v2 checksum verifies as older kubelets check it, and what the
// kubelet writes nodekit reads: a handover keeps the exclusive CPUs.
func TestCPUManagerStateMatchesKubelet(t *testing.T) {
	dir := t.TempDir()
	machine := topology.Synthetic(1, 1, 4, 1, 1<<30)
	opts := cpumanager.Options{Policy: cpumanager.PolicyStatic, ReservedCPUs: cpuset.New(0), Reserved: resource.MustParse("1"), Machine: machine, StateDir: dir}
	m, err := cpumanager.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	p := guaranteedPod("uid-1", "2", "64Mi")
	if err := m.Allocate(p, &p.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	got := m.ExclusiveCPUs("uid-1", "c")
	kubelet, err := cpustate.NewCheckpointState(klog.Background(), dir, cpumanager.StateFile, "static", containermap.NewContainerMap())
	if err != nil {
		t.Fatalf("the kubelet cannot read nodekit's checkpoint: %v", err)
	}
	if set, ok := kubelet.GetCPUSet("uid-1", "c"); !ok || !set.Equals(got) {
		t.Errorf("the kubelet read %s (%v), nodekit allocated %s", set, ok, got)
	}
	if def := kubelet.GetDefaultCPUSet(); !def.Equals(machine.CPU.CPUDetails.CPUs().Difference(got)) {
		t.Errorf("the kubelet read the shared pool %s", def)
	}

	blob, err := os.ReadFile(filepath.Join(dir, cpumanager.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var v2 cpustate.CPUManagerCheckpointV2
	if err := json.Unmarshal(blob, &v2); err != nil {
		t.Fatal(err)
	}
	if err := v2.VerifyChecksum(); err != nil {
		t.Errorf("an older kubelet would refuse nodekit's checkpoint: %v", err)
	}

	// The kubelet gives CPU 3 to another container; nodekit reads it.
	free := kubelet.GetDefaultCPUSet()
	three := cpuset.New(free.List()[len(free.List())-1])
	kubelet.SetCPUSet("uid-2", "d", three)
	kubelet.SetDefaultCPUSet(free.Difference(three))
	m2, err := cpumanager.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if set := m2.ExclusiveCPUs("uid-2", "d"); !set.Equals(three) {
		t.Errorf("nodekit read %s for the kubelet's container, want %s", set, three)
	}
	if set := m2.ExclusiveCPUs("uid-1", "c"); !set.Equals(got) {
		t.Errorf("nodekit read %s for its own container, want %s", set, got)
	}
}

// TestMemoryManagerStateMatchesKubelet: the same for memory_manager_state.
func TestMemoryManagerStateMatchesKubelet(t *testing.T) {
	dir := t.TempDir()
	opts := memorymanager.Options{
		Policy:                     memorymanager.PolicyStatic,
		Machine:                    topology.Synthetic(1, 2, 1, 1, 1<<30),
		ReservedMemory:             []kubeletconfig.MemoryReservation{{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")}}},
		NodeAllocatableReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")},
		StateDir:                   dir,
	}
	m, err := memorymanager.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	p := guaranteedPod("uid-1", "1", "256Mi")
	if err := m.Allocate(p, &p.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	kubelet, err := memstate.NewCheckpointState(klog.Background(), dir, memorymanager.StateFile, "Static")
	if err != nil {
		t.Fatalf("the kubelet cannot read nodekit's checkpoint: %v", err)
	}
	blocks := kubelet.GetMemoryBlocks("uid-1", "c")
	if len(blocks) != 1 || blocks[0].Size != 256<<20 || blocks[0].Type != v1.ResourceMemory || fmt.Sprint(blocks[0].NUMAAffinity) != "[0]" {
		t.Errorf("the kubelet read %+v", blocks)
	}
	if ms := kubelet.GetMachineState(); ms[0].MemoryMap[v1.ResourceMemory].Reserved != 256<<20 || ms[0].MemoryMap[v1.ResourceMemory].SystemReserved != 100<<20 {
		t.Errorf("the kubelet read machine state %+v", ms[0].MemoryMap[v1.ResourceMemory])
	}
	blob, err := os.ReadFile(filepath.Join(dir, memorymanager.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	v1cp := &memstate.MemoryManagerCheckpointV1{}
	if err := v1cp.UnmarshalCheckpoint(blob); err != nil {
		t.Fatal(err)
	}
	if err := v1cp.VerifyChecksum(); err != nil {
		t.Errorf("an older kubelet would refuse nodekit's checkpoint: %v", err)
	}

	// The kubelet's own state file (it releases the block): nodekit reads it.
	ms := kubelet.GetMachineState()
	ms[0].MemoryMap[v1.ResourceMemory].Reserved = 0
	ms[0].MemoryMap[v1.ResourceMemory].Free += 256 << 20
	ms[0].NumberOfAssignments = 0
	kubelet.Delete("uid-1", "c")
	kubelet.SetMachineState(ms)
	m2, err := memorymanager.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.MemoryNUMANodes("uid-1", "c"); len(got) != 0 {
		t.Errorf("nodekit read blocks on %v the kubelet released", got)
	}
	q := guaranteedPod("uid-2", "1", "900Mi")
	if err := m2.Allocate(q, &q.Spec.Containers[0]); err != nil {
		t.Errorf("nodekit cannot allocate on the kubelet's state: %v", err)
	}
}

// TestCPUAssignmentMatchesKubelet: on machines with SMT, several sockets
// and NUMA nodes, a random sequence of Guaranteed containers (and
// departures) gets the same exclusive CPUs from nodekit's static policy as
// from the kubelet's, with and without full-pcpus-only.
func TestCPUAssignmentMatchesKubelet(t *testing.T) {
	logger := klog.Background()
	shapes := []struct{ sockets, numa, cores, threads int }{{1, 1, 4, 2}, {2, 1, 3, 2}, {2, 2, 5, 2}, {1, 2, 4, 1}}
	for _, shape := range shapes {
		for _, full := range []bool{false, true} {
			name := fmt.Sprintf("%dx%dx%dx%d full=%v", shape.sockets, shape.numa, shape.cores, shape.threads, full)
			t.Run(name, func(t *testing.T) {
				machine := topology.Synthetic(shape.sockets, shape.numa, shape.cores, shape.threads, 1<<30)
				kd := ktopology.CPUDetails{}
				for cpu, info := range machine.CPU.CPUDetails {
					kd[cpu] = ktopology.CPUInfo{NUMANodeID: info.NUMANodeID, SocketID: info.SocketID, CoreID: info.CoreID, UncoreCacheID: info.UncoreCacheID}
				}
				kt := &ktopology.CPUTopology{NumCPUs: machine.CPU.NumCPUs, NumCores: machine.CPU.NumCores, NumSockets: machine.CPU.NumSockets,
					NumNUMANodes: machine.CPU.NumNUMANodes, NumUncoreCache: machine.CPU.NumUncoreCache, CPUDetails: kd}
				popts := map[string]string{}
				if full {
					popts[kcpumanager.FullPCPUsOnlyOption] = "true"
				}
				reserved := shape.threads
				kp, err := kcpumanager.NewStaticPolicy(logger, kt, reserved, cpuset.New(), topologymanager.NewFakeManager(logger), popts)
				if err != nil {
					t.Fatal(err)
				}
				ks := cpustate.NewMemoryState(logger)
				if err := kp.Start(logger, ks); err != nil {
					t.Fatal(err)
				}
				var active []*v1.Pod
				m, err := cpumanager.New(cpumanager.Options{Policy: cpumanager.PolicyStatic, Reserved: *resource.NewQuantity(int64(reserved), resource.DecimalSI),
					Machine: machine, PolicyOptions: popts, ActivePods: func() []*v1.Pod { return active }})
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(len(name)), 7))
				for i := 0; i < 40; i++ {
					if len(active) > 0 && rng.IntN(3) == 0 {
						gone := rng.IntN(len(active))
						if err := kp.RemoveContainer(logger, ks, string(active[gone].UID), "c"); err != nil {
							t.Fatal(err)
						}
						active = append(active[:gone], active[gone+1:]...)
						continue
					}
					p := guaranteedPod(fmt.Sprintf("pod-%d", i), fmt.Sprint(1+rng.IntN(machine.CPU.NumCPUs/2)), "64Mi")
					kerr := kp.Allocate(logger, ks, p, &p.Spec.Containers[0], lifecycle.AddOperation)
					nerr := m.Allocate(p, &p.Spec.Containers[0])
					if (kerr == nil) != (nerr == nil) {
						t.Fatalf("step %d (%s cpus): kubelet %v, nodekit %v", i, p.Spec.Containers[0].Resources.Requests.Cpu(), kerr, nerr)
					}
					if kerr != nil {
						if kerr.Error() != nerr.Error() {
							t.Errorf("step %d: kubelet %q, nodekit %q", i, kerr, nerr)
						}
						continue
					}
					active = append(active, p)
					kset, _ := ks.GetCPUSet(string(p.UID), "c")
					if nset := m.ExclusiveCPUs(string(p.UID), "c"); !kset.Equals(nset) {
						t.Fatalf("step %d (%s cpus): kubelet %s, nodekit %s", i, p.Spec.Containers[0].Resources.Requests.Cpu(), kset, nset)
					}
				}
				// The next admission releases what departed pods held.
				be := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "be", Namespace: "ns", UID: "be"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
				if err := m.Allocate(be, &be.Spec.Containers[0]); err != nil {
					t.Fatal(err)
				}
				if !ks.GetDefaultCPUSet().Equals(m.SharedCPUs()) {
					t.Errorf("shared pool: kubelet %s, nodekit %s", ks.GetDefaultCPUSet(), m.SharedCPUs())
				}
			})
		}
	}
}
