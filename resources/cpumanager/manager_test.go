package cpumanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// dualSocketHT is the kubelet's topoDualSocketHT: 2 sockets (one NUMA
// node each) of 3 cores with 2 threads; CPU n and n+6 share a core, even
// cores on socket 0.
func dualSocketHT() *topology.Machine {
	d := topology.CPUDetails{}
	for cpu := 0; cpu < 12; cpu++ {
		core := cpu % 6
		d[cpu] = topology.CPUInfo{CoreID: core, SocketID: core % 2, NUMANodeID: core % 2}
	}
	return &topology.Machine{CPU: topology.NewCPUTopology(d), NUMANodes: []topology.NUMANode{{ID: 0}, {ID: 1}}}
}

func guaranteed(uid, name string, cpus ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)}}
	for i, c := range cpus {
		rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse(c), v1.ResourceMemory: resource.MustParse("100Mi")}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "c" + string(rune('0'+i)), Resources: v1.ResourceRequirements{Requests: rl, Limits: rl}})
	}
	return p
}

func bestEffort(uid, name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c0"}}}}
}

func TestTakeByTopology(t *testing.T) {
	topo := dualSocketHT().CPU
	for _, tc := range []struct {
		name      string
		available cpuset.CPUSet
		n         int
		want      string
		err       string
	}{
		{"too many", cpuset.New(0, 2, 4, 6), 5, "", "not enough cpus available to satisfy request: requested=5, available=4"},
		{"zero", topo.CPUDetails.CPUs(), 0, "", ""},
		{"one cpu packs onto the fullest core", cpuset.New(1, 2, 3, 4, 5, 7, 8, 9, 10, 11), 1, "2", ""},
		{"a socket", topo.CPUDetails.CPUs(), 6, "0,2,4,6,8,10", ""},
		{"4 full cores, 3 filling socket 0", topo.CPUDetails.CPUs(), 8, "0-2,4,6-8,10", ""},
		{"whole cores first", cpuset.New(0, 1, 2, 3, 6), 2, "0,6", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := takeByTopology(topo, tc.available, tc.n, false)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want {
				t.Errorf("took %s, want %s", got, tc.want)
			}
		})
	}
}

// The kubelet's "take cpus from two full UncoreCaches and partial from a
// single UncoreCache": 16 CPUs, 4 per uncore cache, CPU 0 taken.
func TestTakeByTopologyUncore(t *testing.T) {
	d := topology.CPUDetails{}
	for cpu := 0; cpu < 16; cpu++ {
		d[cpu] = topology.CPUInfo{CoreID: cpu, UncoreCacheID: cpu / 4}
	}
	topo := topology.NewCPUTopology(d)
	got, err := takeByTopology(topo, cpuset.New(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 10, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != "1-2,4-11" {
		t.Errorf("took %s, want the kubelet's 1-2,4-11", got)
	}
}

type fakeRuntime struct {
	mu         sync.Mutex
	containers []*runtimeapi.Container
	cpusets    map[string]string
	updated    chan string
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*runtimeapi.Container(nil), f.containers...), nil
}

func (f *fakeRuntime) UpdateContainerResources(_ context.Context, id string, r *runtimeapi.ContainerResources) error {
	f.mu.Lock()
	f.cpusets[id] = r.GetLinux().GetCpusetCpus()
	f.mu.Unlock()
	if f.updated != nil {
		f.updated <- id
	}
	return nil
}

func (f *fakeRuntime) run(id string, pod *v1.Pod, c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers = append(f.containers, &runtimeapi.Container{Id: id, Labels: map[string]string{
		kubetypes.KubernetesPodUIDLabel: string(pod.UID), kubetypes.KubernetesContainerNameLabel: c}})
}

func (f *fakeRuntime) cpuset(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cpusets[id]
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

// The e2e scenario on 2 CPUs: reservedSystemCPUs 0, a Guaranteed pod with
// cpu 1 gets CPU 1, the BestEffort container shrinks to CPU 0, and both
// come back when the pod goes; the state file follows.
func TestStaticPolicyLifecycle(t *testing.T) {
	dir := t.TempDir()
	rt := &fakeRuntime{cpusets: map[string]string{}}
	var active pods
	reg := prometheus.NewRegistry()
	m, err := New(Options{
		Policy: PolicyStatic, ReservedCPUs: cpuset.New(0), Reserved: resource.MustParse("1"),
		Machine: topology.Synthetic(1, 1, 2, 1, 1<<30), StateDir: dir, ActivePods: active.active,
		Runtime: rt, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	be := bestEffort("be", "besteffort")
	active.set(be)
	rt.run("be-c0", be, "c0")
	cfg := &runtimeapi.ContainerConfig{}
	if err := m.ApplyContainerConfig(context.Background(), be, &be.Spec.Containers[0], cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Linux.Resources.CpusetCpus; got != "0-1" {
		t.Fatalf("BestEffort created on %q, want 0-1", got)
	}
	m.reconcile(context.Background())
	if got := rt.cpuset("be-c0"); got != "0-1" {
		t.Fatalf("BestEffort reconciled to %q", got)
	}

	g := guaranteed("g", "guaranteed", "1")
	active.set(be, g)
	if err := m.Allocate(g, &g.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	cfg = &runtimeapi.ContainerConfig{}
	if err := m.ApplyContainerConfig(context.Background(), g, &g.Spec.Containers[0], cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Linux.Resources.CpusetCpus; got != "1" {
		t.Fatalf("Guaranteed created on %q, want 1", got)
	}
	rt.run("g-c0", g, "c0")
	m.reconcile(context.Background())
	if got := rt.cpuset("be-c0"); got != "0" {
		t.Errorf("BestEffort on %q after the allocation, want 0", got)
	}
	if got := m.ContainerCPUs(g, &g.Spec.Containers[0]); len(got) != 1 || got[0] != 1 {
		t.Errorf("ContainerCPUs = %v", got)
	}
	if got := m.AllocatableCPUs(); len(got) != 1 || got[0] != 1 {
		t.Errorf("AllocatableCPUs = %v", got)
	}
	if got := testutil.ToFloat64(m.metrics.sharedPool); got != 1000 {
		t.Errorf("shared pool %v millicores", got)
	}

	// Restart: a new Manager reads the assignment back.
	clk := testingclock.NewFakeClock(time.Now())
	m2, err := New(Options{Policy: PolicyStatic, ReservedCPUs: cpuset.New(0), Reserved: resource.MustParse("1"),
		Machine: topology.Synthetic(1, 1, 2, 1, 1<<30), StateDir: dir, ActivePods: active.active, Runtime: rt, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.ExclusiveCPUs("g", "c0"); got.String() != "1" {
		t.Fatalf("after a restart the container has %q", got)
	}
	// Admitted again after the restart, it keeps its CPU.
	if err := m2.Allocate(g, &g.Spec.Containers[0]); err != nil || m2.ExclusiveCPUs("g", "c0").String() != "1" {
		t.Fatalf("readmission: %v, %s", err, m2.ExclusiveCPUs("g", "c0"))
	}

	// The pod goes (a reconcile period after its admission).
	active.set(be)
	clk.Step(DefaultReconcilePeriod)
	m2.reconcile(context.Background())
	if got := rt.cpuset("be-c0"); got != "0-1" {
		t.Errorf("BestEffort on %q after the pod went, want 0-1", got)
	}
	if got := m2.SharedCPUs(); got.String() != "0-1" {
		t.Errorf("shared pool %s", got)
	}
	blob, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(blob), `"policyName":"static","defaultCpuSet":"0-1"`) || strings.Contains(string(blob), `"entries"`) {
		t.Errorf("state file %s", blob)
	}
}

// Run reconciles right after an allocation, not a period later.
func TestRunReconcilesAfterAllocation(t *testing.T) {
	rt := &fakeRuntime{cpusets: map[string]string{}, updated: make(chan string, 10)}
	var active pods
	be := bestEffort("be", "besteffort")
	active.set(be)
	rt.run("be-c0", be, "c0")
	m, err := New(Options{Policy: PolicyStatic, Reserved: resource.MustParse("500m"), Machine: topology.Synthetic(1, 1, 2, 1, 1<<30),
		ActivePods: active.active, Runtime: rt, ReconcilePeriod: time.Hour})
	if err != nil {
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
	<-rt.updated
	if got := rt.cpuset("be-c0"); got != "0-1" {
		t.Fatalf("first reconcile: %q", got)
	}
	g := guaranteed("g", "guaranteed", "1")
	active.set(be, g)
	if err := m.Allocate(g, &g.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	<-rt.updated
	// Without reservedSystemCPUs the kubelet reserves the first core by
	// topology (CPU 0).
	if got := rt.cpuset("be-c0"); got != "0" {
		t.Fatalf("after the allocation: %q", got)
	}
}

// Non-integer, Burstable and BestEffort containers stay on the shared pool.
func TestGuaranteedCPUs(t *testing.T) {
	g := guaranteed("g", "g", "1500m", "2")
	if n := guaranteedCPUs(g, &g.Spec.Containers[0]); n != 0 {
		t.Errorf("1500m: %d exclusive CPUs", n)
	}
	if n := guaranteedCPUs(g, &g.Spec.Containers[1]); n != 2 {
		t.Errorf("2: %d exclusive CPUs", n)
	}
	b := guaranteed("b", "b", "1")
	b.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("100Mi")}
	if n := guaranteedCPUs(b, &b.Spec.Containers[0]); n != 0 {
		t.Errorf("Burstable: %d exclusive CPUs", n)
	}
	// An init container's CPUs are reused by the app container.
	p := guaranteed("i", "i", "2")
	p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: p.Spec.Containers[0].Resources}}
	if n := podGuaranteedCPUs(p); n != 2 {
		t.Errorf("pod with init: %d", n)
	}
	m, err := New(Options{Policy: PolicyStatic, Reserved: resource.MustParse("1"), Machine: dualSocketHT()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Allocate(p, &p.Spec.InitContainers[0]); err != nil {
		t.Fatal(err)
	}
	if err := m.Allocate(p, &p.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if a, b := m.ExclusiveCPUs("i", "init"), m.ExclusiveCPUs("i", "c0"); !a.Equals(b) {
		t.Errorf("init on %s, app on %s: not reused", a, b)
	}
}

func TestFullPCPUsOnly(t *testing.T) {
	m, err := New(Options{Policy: PolicyStatic, Reserved: resource.MustParse("1"), Machine: dualSocketHT(),
		PolicyOptions: map[string]string{OptionFullPCPUsOnly: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	p := guaranteed("p", "p", "3")
	err = m.Allocate(p, &p.Spec.Containers[0])
	var smt SMTAlignmentError
	if !errors.As(err, &smt) || smt.Reason() != "SMTAlignmentError" || err.Error() != "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2" {
		t.Fatalf("Allocate = %v", err)
	}
	p = guaranteed("p", "p", "2")
	if err := m.Allocate(p, &p.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	// The reserved CPU 0 takes its whole core (0 and 6) out.
	if got := m.ExclusiveCPUs("p", "c0"); got.Size() != 2 || got.Contains(0) || got.Contains(6) {
		t.Errorf("2 CPUs on %s", got)
	}
	p = guaranteed("q", "q", "10")
	err = m.Allocate(p, &p.Spec.Containers[0])
	if !errors.As(err, &smt) || !smt.CausedByPhysicalCPUs || !strings.Contains(err.Error(), "not enough free physical CPUs: available physical CPUs = 8") {
		t.Fatalf("Allocate = %v", err)
	}
}

func TestStrictCPUReservation(t *testing.T) {
	m, err := New(Options{Policy: PolicyStatic, Reserved: resource.MustParse("2"), ReservedCPUs: cpuset.New(0, 6), Machine: dualSocketHT(),
		PolicyOptions: map[string]string{OptionStrictCPUReservation: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.SharedCPUs(); got.Contains(0) || got.Contains(6) || got.Size() != 10 {
		t.Errorf("shared pool %s keeps reserved CPUs", got)
	}
}

// Hints: a request that fits one NUMA node prefers single nodes.
func TestTopologyHints(t *testing.T) {
	m, err := New(Options{Policy: PolicyStatic, Reserved: resource.MustParse("1"), Machine: dualSocketHT()})
	if err != nil {
		t.Fatal(err)
	}
	p := guaranteed("p", "p", "2")
	hints := m.GetTopologyHints(p, &p.Spec.Containers[0])["cpu"]
	mask := func(ids ...int) topologymanager.BitMask { b, _ := topologymanager.NewBitMask(ids...); return b }
	want := []topologymanager.TopologyHint{{NUMANodeAffinity: mask(0), Preferred: true}, {NUMANodeAffinity: mask(1), Preferred: true}, {NUMANodeAffinity: mask(0, 1)}}
	if len(hints) != len(want) {
		t.Fatalf("hints %v", hints)
	}
	for i := range want {
		if hints[i] != want[i] {
			t.Fatalf("hints %v, want %v", hints, want)
		}
	}
	big := guaranteed("b", "b", "6")
	// 5 free CPUs on node 0 (CPU 0 reserved): only node 1 or both.
	hints = m.GetTopologyHints(big, &big.Spec.Containers[0])["cpu"]
	if len(hints) != 2 || hints[0].NUMANodeAffinity != mask(1) || !hints[0].Preferred || hints[1].Preferred {
		t.Errorf("hints %v", hints)
	}
	if h := m.GetTopologyHints(bestEffort("x", "x"), &v1.Container{Name: "c0"}); h != nil {
		t.Errorf("BestEffort hints %v", h)
	}
	// The allocation follows the affinity.
	m.opts.Affinity = func(string, string) topologymanager.TopologyHint {
		return topologymanager.TopologyHint{NUMANodeAffinity: mask(1), Preferred: true}
	}
	m.policy.affinity = m.opts.Affinity
	if err := m.Allocate(p, &p.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := m.ExclusiveCPUs("p", "c0"); !got.IsSubsetOf(cpuset.New(1, 3, 5, 7, 9, 11)) {
		t.Errorf("allocated %s outside NUMA node 1", got)
	}
}

func TestNewErrors(t *testing.T) {
	machine := dualSocketHT()
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Policy: "x", Machine: machine}, `unknown policy: "x"`},
		{Options{Policy: PolicyNone, Machine: machine, PolicyOptions: map[string]string{"a": "b"}}, "None policy: received unsupported options=map[a:b]"},
		{Options{Policy: PolicyStatic, Machine: machine}, "the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"},
		{Options{Policy: PolicyStatic, Machine: machine, Reserved: resource.MustParse("2"), ReservedCPUs: cpuset.New(0)}, "unable to reserve the required amount of CPUs (size of 0 did not equal 2)"},
		{Options{Policy: PolicyStatic, Machine: machine, Reserved: resource.MustParse("1"), ReservedCPUs: cpuset.New(99)}, "reserved-cpus: 99 is not a subset of online-cpus: 0-11"},
		{Options{Policy: PolicyStatic, Machine: machine, Reserved: resource.MustParse("1"), PolicyOptions: map[string]string{"x": "true"}}, `unknown CPU Manager Policy option: "x"`},
		{Options{Policy: PolicyStatic, Machine: machine, Reserved: resource.MustParse("1"), PolicyOptions: map[string]string{"distribute-cpus-across-numa": "true"}}, `"distribute-cpus-across-numa" is not implemented by nodekit`},
		{Options{Policy: PolicyStatic, Machine: machine, Reserved: resource.MustParse("1"), PolicyOptions: map[string]string{OptionFullPCPUsOnly: "yes"}}, `bad value for option "full-pcpus-only"`},
	} {
		_, err := New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s %v) = %v, want %q", tc.opts.Policy, tc.opts.PolicyOptions, err, tc.want)
		}
	}
}

// A state file written for another policy stops the manager, as the
// kubelet, with the kubelet's advice.
func TestStateOfAnotherPolicy(t *testing.T) {
	dir := t.TempDir()
	none, err := New(Options{Machine: dualSocketHT(), StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := none.Run(ctx); err != nil {
		t.Fatal(err)
	}
	static, err := New(Options{Policy: PolicyStatic, Reserved: resource.MustParse("1"), Machine: dualSocketHT(), StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	err = static.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `configured policy "static" differs from state checkpoint policy "none"`) {
		t.Fatalf("Run = %v", err)
	}
	p := guaranteed("p", "p", "1")
	if err := static.Allocate(p, &p.Spec.Containers[0]); err == nil {
		t.Fatal("Allocate succeeded on an unusable state")
	}
}

// The pods loop makes a pod active only after every admit handler agreed:
// its CPUs are not released meanwhile, but they are once another pod is
// admitted and it never became active (a later handler rejected it), or a
// reconcile period later.
func TestAdmittingPodIsNotStale(t *testing.T) {
	var active pods
	rt := &fakeRuntime{cpusets: map[string]string{}}
	clk := testingclock.NewFakeClock(time.Now())
	m, err := New(Options{Policy: PolicyStatic, Reserved: resource.MustParse("1"), Machine: dualSocketHT(),
		ActivePods: active.active, Runtime: rt, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	a := guaranteed("a", "a", "2")
	if err := m.Allocate(a, &a.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	m.reconcile(context.Background())
	if m.ExclusiveCPUs("a", "c0").Size() != 2 {
		t.Fatal("the CPUs of the pod being admitted were released")
	}
	b := guaranteed("b", "b", "1")
	if err := m.Allocate(b, &b.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if m.ExclusiveCPUs("a", "c0").Size() != 0 {
		t.Error("the CPUs of a pod rejected after allocation were kept past the next admission")
	}
	clk.Step(DefaultReconcilePeriod)
	m.reconcile(context.Background())
	if m.ExclusiveCPUs("b", "c0").Size() != 0 {
		t.Error("the CPUs of a pod never admitted were kept past a reconcile period")
	}
}
