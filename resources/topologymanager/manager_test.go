package topologymanager

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/resources/topology"
)

func mask(ids ...int) BitMask {
	m, err := NewBitMask(ids...)
	if err != nil {
		panic(err)
	}
	return m
}

// fakeProvider returns fixed hints and records the allocations.
type fakeProvider struct {
	hints     map[string][]TopologyHint
	err       error
	allocated []string
	podCalls  int
	m         *Manager
	affinity  map[string]TopologyHint
}

func (f *fakeProvider) GetTopologyHints(*v1.Pod, *v1.Container) map[string][]TopologyHint {
	return f.hints
}

func (f *fakeProvider) GetPodTopologyHints(*v1.Pod) map[string][]TopologyHint {
	f.podCalls++
	return f.hints
}

func (f *fakeProvider) Allocate(pod *v1.Pod, c *v1.Container) error {
	if f.err != nil {
		return f.err
	}
	f.allocated = append(f.allocated, c.Name)
	if f.m != nil {
		if f.affinity == nil {
			f.affinity = map[string]TopologyHint{}
		}
		f.affinity[c.Name] = f.m.GetAffinity(string(pod.UID), c.Name)
	}
	return nil
}

func testPod(containers ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c})
	}
	return p
}

func newManager(t *testing.T, policy, scope string, numa int, opts map[string]string) *Manager {
	t.Helper()
	m, err := New(Options{Policy: policy, Scope: scope, PolicyOptions: opts, Machine: topology.Synthetic(1, numa, 2, 1, 1<<30)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMergePolicies(t *testing.T) {
	cpu := map[string][]TopologyHint{"cpu": {{mask(0), true}, {mask(1), true}, {mask(0, 1), false}}}
	memOn1 := map[string][]TopologyHint{"memory": {{mask(1), true}, {mask(0, 1), false}}}
	wide := map[string][]TopologyHint{"cpu": {{mask(0, 1), true}}}
	cannot := map[string][]TopologyHint{"cpu": {}}
	for _, tc := range []struct {
		name      string
		policy    string
		providers []map[string][]TopologyHint
		want      TopologyHint
		admit     bool
	}{
		{"best-effort aligns on the common node", PolicyBestEffort, []map[string][]TopologyHint{cpu, memOn1}, TopologyHint{mask(1), true}, true},
		{"no provider preference", PolicyBestEffort, []map[string][]TopologyHint{nil, {"cpu": nil}}, TopologyHint{mask(0, 1), true}, true},
		{"best-effort admits what cannot be placed", PolicyBestEffort, []map[string][]TopologyHint{cannot}, TopologyHint{mask(0, 1), false}, true},
		{"restricted rejects a non-preferred merge", PolicyRestricted, []map[string][]TopologyHint{cannot}, TopologyHint{mask(0, 1), false}, false},
		{"restricted admits a wide preferred hint", PolicyRestricted, []map[string][]TopologyHint{wide}, TopologyHint{mask(0, 1), true}, true},
		{"single-numa-node rejects a wide hint", PolicySingleNumaNode, []map[string][]TopologyHint{wide}, TopologyHint{0, false}, false},
		{"single-numa-node aligns", PolicySingleNumaNode, []map[string][]TopologyHint{cpu, memOn1}, TopologyHint{mask(1), true}, true},
		{"single-numa-node without preference", PolicySingleNumaNode, []map[string][]TopologyHint{nil}, TopologyHint{0, true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newManager(t, tc.policy, ScopeContainer, 2, nil)
			got, admit := merge(tc.policy, m.numa, m.popts, tc.providers)
			if got != tc.want || admit != tc.admit {
				t.Errorf("merge = %v %v, want %v %v", got, admit, tc.want, tc.admit)
			}
		})
	}
}

// Of two non-preferred merges the one as wide as the widest resource's
// narrowest hint wins, as the kubelet's bestNonPreferredAffinityCount.
func TestMergeNonPreferred(t *testing.T) {
	m := newManager(t, PolicyBestEffort, ScopeContainer, 4, nil)
	providers := []map[string][]TopologyHint{
		{"cpu": {{mask(0, 1), true}, {mask(0, 1, 2), false}}},
		{"memory": {{mask(2, 3), true}, {mask(1, 2, 3), false}}},
	}
	got, _ := merge(PolicyBestEffort, m.numa, m.popts, providers)
	if want := (TopologyHint{mask(1, 2), false}); got != want {
		t.Errorf("merge = %v, want %v", got, want)
	}
}

func TestPreferClosestNUMANodes(t *testing.T) {
	// 2 sockets of 2 NUMA nodes: 0 and 1 are close, 1 and 2 are not.
	m, err := New(Options{Policy: PolicyBestEffort, PolicyOptions: map[string]string{OptionPreferClosestNUMANodes: "true"}, Machine: topology.Synthetic(2, 2, 1, 1, 1<<30)})
	if err != nil {
		t.Fatal(err)
	}
	providers := []map[string][]TopologyHint{{"cpu": {{mask(1, 2), true}, {mask(2, 3), true}}}}
	if got, _ := merge(PolicyBestEffort, m.numa, m.popts, providers); got.NUMANodeAffinity != mask(2, 3) {
		t.Errorf("closest = %v, want 2,3 (same socket)", got)
	}
	m.popts.preferClosest = false
	if got, _ := merge(PolicyBestEffort, m.numa, m.popts, providers); got.NUMANodeAffinity != mask(1, 2) {
		t.Errorf("narrowest = %v, want 1,2 (lower)", got)
	}
}

func TestAdmitContainerScope(t *testing.T) {
	m := newManager(t, PolicySingleNumaNode, ScopeContainer, 2, nil)
	p := &fakeProvider{hints: map[string][]TopologyHint{"cpu": {{mask(1), true}}}, m: m}
	m.AddHintProvider(p)
	if err := m.Admit(testPod("a", "b")); err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.allocated, ",") != "a,b" || p.affinity["b"] != (TopologyHint{mask(1), true}) {
		t.Errorf("allocated %v with %v", p.allocated, p.affinity)
	}
	if got := m.GetAffinity("uid", "a"); got != (TopologyHint{mask(1), true}) {
		t.Errorf("GetAffinity = %v", got)
	}
	p.hints = map[string][]TopologyHint{"cpu": {{mask(0, 1), true}}}
	err := m.Admit(testPod("c"))
	var r interface{ Reason() string }
	if !errors.As(err, &r) || r.Reason() != "TopologyAffinityError" || err.Error() != "Resources cannot be allocated with Topology locality" {
		t.Fatalf("Admit = %v", err)
	}
}

func TestAdmitPodScope(t *testing.T) {
	m := newManager(t, PolicyRestricted, ScopePod, 2, nil)
	p := &fakeProvider{hints: map[string][]TopologyHint{"cpu": {{mask(0), true}, {mask(0, 1), false}}}, m: m}
	m.AddHintProvider(p)
	if err := m.Admit(testPod("a", "b")); err != nil {
		t.Fatal(err)
	}
	if p.podCalls != 1 || p.affinity["a"] != p.affinity["b"] || p.affinity["a"].NUMANodeAffinity != mask(0) {
		t.Errorf("pod hints asked %d times; affinities %v", p.podCalls, p.affinity)
	}
}

// With the none policy the providers allocate without hints.
func TestAdmitPolicyNone(t *testing.T) {
	m := newManager(t, PolicyNone, ScopeContainer, 2, map[string]string{"ignored": "x"})
	p := &fakeProvider{hints: map[string][]TopologyHint{"cpu": {}}}
	m.AddHintProvider(p)
	pod := testPod("b")
	pod.Spec.InitContainers = []v1.Container{{Name: "init"}}
	if err := m.Admit(pod); err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.allocated, ",") != "init,b" {
		t.Errorf("allocated %v", p.allocated)
	}
}

type reasoned struct{}

func (reasoned) Error() string  { return "SMT Alignment Error: x" }
func (reasoned) Reason() string { return "SMTAlignmentError" }

func TestAdmitAllocationErrors(t *testing.T) {
	m := newManager(t, PolicyBestEffort, ScopeContainer, 1, nil)
	p := &fakeProvider{err: errors.New("not enough cpus")}
	m.AddHintProvider(p)
	err := m.Admit(testPod("a"))
	var r interface{ Reason() string }
	if !errors.As(err, &r) || r.Reason() != "UnexpectedAdmissionError" || err.Error() != "Allocate failed due to not enough cpus, which is unexpected" {
		t.Fatalf("Admit = %v", err)
	}
	p.err = reasoned{}
	if err := m.Admit(testPod("a")); !errors.As(err, &r) || r.Reason() != "SMTAlignmentError" {
		t.Fatalf("Admit = %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	machine := topology.Synthetic(1, 9, 1, 1, 1<<30)
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Policy: "x", Machine: machine}, `unknown policy: "x"`},
		{Options{Policy: PolicyRestricted, Scope: "x", Machine: machine}, `unknown scope: "x"`},
		{Options{Policy: PolicyRestricted, Machine: machine}, "unsupported on machines with more than 8 NUMA Nodes"},
		{Options{Policy: PolicyRestricted, Machine: machine, PolicyOptions: map[string]string{OptionMaxAllowableNUMANodes: "4"}}, `the minimum value of "max-allowable-numa-nodes" should not be less than 8`},
		{Options{Policy: PolicyRestricted, Machine: machine, PolicyOptions: map[string]string{"x": "1"}}, `unknown Topology Manager Policy option: "x"`},
		{Options{Policy: PolicyRestricted, Machine: machine, PolicyOptions: map[string]string{OptionPreferClosestNUMANodes: "yes"}}, `bad value for option "prefer-closest-numa-nodes"`},
	} {
		_, err := New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.opts, err, tc.want)
		}
	}
	if _, err := New(Options{Policy: PolicyRestricted, Machine: machine, PolicyOptions: map[string]string{OptionMaxAllowableNUMANodes: "9"}}); err != nil {
		t.Errorf("9 NUMA nodes allowed: %v", err)
	}
}

func TestForgetInactive(t *testing.T) {
	var active []*v1.Pod
	m, err := New(Options{Policy: PolicyBestEffort, Machine: topology.Synthetic(1, 2, 1, 1, 1), ActivePods: func() []*v1.Pod { return active }})
	if err != nil {
		t.Fatal(err)
	}
	m.AddHintProvider(&fakeProvider{hints: map[string][]TopologyHint{"cpu": {{mask(0), true}}}})
	if err := m.Admit(testPod("a")); err != nil {
		t.Fatal(err)
	}
	other := testPod("a")
	other.UID = "other"
	if err := m.Admit(other); err != nil {
		t.Fatal(err)
	}
	if got := m.GetAffinity("uid", "a"); got != (TopologyHint{}) {
		t.Errorf("inactive pod's affinity kept: %v", got)
	}
}

func TestBitMask(t *testing.T) {
	if _, err := NewBitMask(64); err == nil {
		t.Error("bit 64 accepted")
	}
	if got := mask(0, 2).String(); got != "0101" {
		t.Errorf("String = %s, want the kubelet's 0101", got)
	}
	var all []BitMask
	IterateBitMasks([]int{0, 1, 2}, func(m BitMask) { all = append(all, m) })
	want := []BitMask{mask(0), mask(1), mask(2), mask(0, 1), mask(0, 2), mask(1, 2), mask(0, 1, 2)}
	if len(all) != len(want) {
		t.Fatalf("IterateBitMasks = %v", all)
	}
	for i := range want {
		if all[i] != want[i] {
			t.Fatalf("IterateBitMasks = %v, want %v", all, want)
		}
	}
	if !mask(1).IsNarrowerThan(mask(0, 1)) || mask(1).IsNarrowerThan(mask(0)) {
		t.Error("IsNarrowerThan")
	}
}
