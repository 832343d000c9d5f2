package memorymanager

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

const gi = 1 << 30

func guaranteed(uid, memory string) *v1.Pod {
	rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse(memory)}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: rl, Limits: rl}}}}}
}

type pods struct {
	mu   sync.Mutex
	list []*v1.Pod
}

func (p *pods) active() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*v1.Pod(nil), p.list...)
}

func (p *pods) set(list ...*v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = list
}

// 2 NUMA nodes of 1 GiB, 100 MiB reserved on node 0.
func newStatic(t *testing.T, dir string, active *pods) *Manager {
	t.Helper()
	m, err := New(Options{
		Policy:                     PolicyStatic,
		Machine:                    topology.Synthetic(1, 2, 1, 1, gi),
		ReservedMemory:             []kubeletconfig.MemoryReservation{{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")}}},
		NodeAllocatableReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi"), v1.ResourceCPU: resource.MustParse("1")},
		StateDir:                   dir,
		ActivePods:                 active.active,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mems(t *testing.T, m *Manager, pod *v1.Pod) string {
	t.Helper()
	cfg := &runtimeapi.ContainerConfig{}
	if err := m.ApplyContainerConfig(context.Background(), pod, &pod.Spec.Containers[0], cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.GetLinux().GetResources().GetCpusetMems()
}

func TestStaticPolicy(t *testing.T) {
	dir := t.TempDir()
	var active pods
	m := newStatic(t, dir, &active)

	small := guaranteed("small", "512Mi")
	active.set(small)
	hints := m.GetTopologyHints(small, &small.Spec.Containers[0])["memory"]
	if len(hints) != 3 || !hints[0].Preferred || !hints[1].Preferred || hints[2].Preferred {
		t.Fatalf("hints %v, want both single nodes preferred and the pair not", hints)
	}
	// 1400 MiB fits neither node alone (924 MiB allocatable on node 0,
	// 1 GiB on node 1): both become one group.
	big := guaranteed("big", "1400Mi")
	active.set(big)
	if err := m.Allocate(big, &big.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := mems(t, m, big); got != "0,1" {
		t.Errorf("1400Mi on NUMA nodes %q, want 0,1", got)
	}
	if got := m.ContainerMemory(big, &big.Spec.Containers[0]); len(got) != 1 || got[0].Size != 1400<<20 || len(got[0].Topology.Nodes) != 2 {
		t.Errorf("ContainerMemory = %v", got)
	}
	// A node of a group is only given with its group.
	active.set(big, small)
	if err := m.Allocate(small, &small.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := mems(t, m, small); got != "0,1" {
		t.Errorf("512Mi on NUMA nodes %q, want the group 0,1", got)
	}

	// Restart: the state file keeps both, and 36 MiB are left.
	m2 := newStatic(t, dir, &active)
	if got := m2.MemoryNUMANodes("big", "c"); len(got) != 2 {
		t.Fatalf("after a restart big is on %v", got)
	}
	third := guaranteed("third", "512Mi")
	active.set(big, small, third)
	if err := m2.Allocate(third, &third.Spec.Containers[0]); err == nil {
		t.Errorf("a third 512Mi fit on %v", m2.MemoryNUMANodes("third", "c"))
	}

	// Both go: the nodes are single again.
	active.set()
	other := guaranteed("other", "900Mi")
	if err := m2.Allocate(other, &other.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := mems(t, m2, other); got != "0" {
		t.Errorf("900Mi on NUMA nodes %q, want 0 once the group is gone", got)
	}
	blob, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(blob), `"policyName":"Static"`) || strings.Contains(string(blob), `"big"`) {
		t.Errorf("state file %s", blob)
	}
}

// The topology manager's affinity wins, extended when it is too narrow.
func TestAffinity(t *testing.T) {
	var active pods
	m := newStatic(t, "", &active)
	mask, _ := topologymanager.NewBitMask(1)
	m.policy.affinity = func(string, string) topologymanager.TopologyHint {
		return topologymanager.TopologyHint{NUMANodeAffinity: mask, Preferred: true}
	}
	p := guaranteed("p", "256Mi")
	active.set(p)
	if err := m.Allocate(p, &p.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := mems(t, m, p); got != "1" {
		t.Errorf("on %q, want the affinity's 1", got)
	}
	// BestEffort and Burstable pods get nothing.
	be := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "be"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	if err := m.Allocate(be, &be.Spec.Containers[0]); err != nil || mems(t, m, be) != "" {
		t.Errorf("BestEffort: %v %q", err, mems(t, m, be))
	}
}

func TestNewErrors(t *testing.T) {
	machine := topology.Synthetic(1, 2, 1, 1, gi)
	mem := func(q string) v1.ResourceList { return v1.ResourceList{v1.ResourceMemory: resource.MustParse(q)} }
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Policy: "x", Machine: machine}, `unknown policy: "x"`},
		{Options{Policy: PolicyStatic, Machine: machine, NodeAllocatableReservation: mem("100Mi")}, `the total amount "0" of type "memory" is not equal to the value "100Mi" determined by Node Allocatable feature`},
		{Options{Policy: PolicyStatic, Machine: machine, NodeAllocatableReservation: mem("100Mi"),
			ReservedMemory: []kubeletconfig.MemoryReservation{{NumaNode: 5, Limits: mem("100Mi")}}}, "the reserved memory configuration references a NUMA node 5 that does not exist on this machine"},
		{Options{Policy: PolicyStatic, Machine: machine}, "[memorymanager] you should specify the system reserved memory"},
	} {
		_, err := New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want %q", err, tc.want)
		}
	}
}

func TestStateOfAnotherPolicy(t *testing.T) {
	dir := t.TempDir()
	none, err := New(Options{Machine: topology.Synthetic(1, 1, 1, 1, gi), StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := none.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var active pods
	static, err := New(Options{Policy: PolicyStatic, Machine: topology.Synthetic(1, 1, 1, 1, gi), StateDir: dir, ActivePods: active.active,
		ReservedMemory:             []kubeletconfig.MemoryReservation{{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Mi")}}},
		NodeAllocatableReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Mi")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := static.Run(context.Background()); err == nil || !strings.Contains(err.Error(), `configured policy "Static" differs from state checkpoint policy "None"`) {
		t.Fatalf("Run = %v", err)
	}
}

// Run gives back the memory of a pod that went, without waiting for the
// next admission.
func TestRunReleasesGonePods(t *testing.T) {
	var active pods
	clk := testingclock.NewFakeClock(time.Now())
	m, err := New(Options{
		Policy:                     PolicyStatic,
		Machine:                    topology.Synthetic(1, 1, 1, 1, gi),
		ReservedMemory:             []kubeletconfig.MemoryReservation{{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")}}},
		NodeAllocatableReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")},
		ActivePods:                 active.active,
		Clock:                      clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := guaranteed("p", "256Mi")
	active.set(p)
	if err := m.Allocate(p, &p.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	active.set()
	waitFor(t, "Run's ticker", clk.HasWaiters)
	clk.Step(admissionWindow)
	waitFor(t, "the memory released", func() bool { return len(m.MemoryNUMANodes("p", "c")) == 0 })
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		runtime.Gosched()
	}
}
