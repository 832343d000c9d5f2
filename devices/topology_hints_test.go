package devices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

func numaMask(ids ...int) topologymanager.BitMask {
	m, err := topologymanager.NewBitMask(ids...)
	if err != nil {
		panic(err)
	}
	return m
}

// numaDevices is dev-0…dev-3, dev-0 and dev-1 on NUMA node 0, dev-2 and
// dev-3 on NUMA node 1, as a plugin reports them.
func numaDevices() []*pluginapi.Device {
	devs := devices(4)
	for i, d := range devs {
		d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(i / 2)}}}
	}
	return devs
}

// startTopologyAligned starts a Manager whose devices the topology manager
// tm aligns on a synthetic two-NUMA-node machine, with a fake plugin of
// numaDevices preferring prefer, and returns it with tm.
func startTopologyAligned(t *testing.T, policy, scope string, prefer ...string) (*Manager, *topologymanager.Manager, *podSet) {
	t.Helper()
	machine := topology.Synthetic(1, 2, 2, 1, 1<<30)
	active := newPodSet()
	tm, err := topologymanager.New(topologymanager.Options{Policy: policy, Scope: scope, Machine: machine})
	if err != nil {
		t.Fatal(err)
	}
	// A short directory: a subtest's TempDir is too long for a unix socket.
	dir, err := os.MkdirTemp("", "devtopo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	opts := Options{
		PluginDir:  filepath.Join(dir, "device-plugins"),
		ActivePods: active.active,
		NUMANodes:  machine.NUMANodeIDs(),
		Affinity:   tm.GetAffinity,
	}
	m, _, _ := startWithPlugin(t, opts, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: len(prefer) > 0}, numaDevices(), prefer...)
	tm.AddHintProvider(m.HintProvider(context.Background()))
	return m, tm, active
}

// deviceNodes is the NUMA nodes of the container's devices.
func deviceNodes(m *Manager, pod *v1.Pod, container string) []int {
	var nodes []int
	for _, d := range m.ContainerDevices(string(pod.UID), container) {
		for _, n := range d.Topology.GetNodes() {
			if !slices.Contains(nodes, int(n.ID)) {
				nodes = append(nodes, int(n.ID))
			}
		}
	}
	slices.Sort(nodes)
	return nodes
}

func TestTopologyHints(t *testing.T) {
	m, _, _ := startTopologyAligned(t, topologymanager.PolicySingleNumaNode, topologymanager.ScopeContainer)
	single := []topologymanager.TopologyHint{
		{NUMANodeAffinity: numaMask(0), Preferred: true},
		{NUMANodeAffinity: numaMask(1), Preferred: true},
		{NUMANodeAffinity: numaMask(0, 1), Preferred: false},
	}
	for _, tc := range []struct {
		request int64
		want    []topologymanager.TopologyHint
	}{
		{1, single},
		{2, single},
		{3, []topologymanager.TopologyHint{{NUMANodeAffinity: numaMask(0, 1), Preferred: true}}},
		{4, []topologymanager.TopologyHint{{NUMANodeAffinity: numaMask(0, 1), Preferred: true}}},
		{5, []topologymanager.TopologyHint{}},
	} {
		pod := testPod(fmt.Sprintf("hints-%d", tc.request), tc.request)
		got := m.GetTopologyHints(context.Background(), pod, &pod.Spec.Containers[0])
		if !reflect.DeepEqual(got, map[string][]topologymanager.TopologyHint{testResource: tc.want}) {
			t.Errorf("request %d: hints %v, want %v", tc.request, got, tc.want)
		}
		if pod := testPod("pod-"+pod.Name, tc.request); !reflect.DeepEqual(m.GetPodTopologyHints(context.Background(), pod), got) {
			t.Errorf("request %d: pod hints %v, want the container's %v", tc.request, m.GetPodTopologyHints(context.Background(), pod), got)
		}
	}
	// A container without device plugin resources has no hints.
	pod := testPod("none", 1)
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}
	if got := m.GetTopologyHints(context.Background(), pod, &pod.Spec.Containers[0]); len(got) != 0 {
		t.Errorf("hints of a container without devices: %v", got)
	}
}

func TestTopologyHintsWithoutDeviceTopology(t *testing.T) {
	opts := Options{PluginDir: filepath.Join(t.TempDir(), "device-plugins"), NUMANodes: []int{0, 1}}
	m, _, _ := startWithPlugin(t, opts, &pluginapi.DevicePluginOptions{}, devices(4))
	pod := testPod("p", 2)
	got := m.GetTopologyHints(context.Background(), pod, &pod.Spec.Containers[0])
	if h, ok := got[testResource]; !ok || h != nil {
		t.Fatalf("hints of devices without NUMA nodes: %v, want %s: nil (no preference)", got, testResource)
	}
}

func TestTopologyHintsOfAllocatedContainer(t *testing.T) {
	m, tm, active := startTopologyAligned(t, topologymanager.PolicySingleNumaNode, topologymanager.ScopeContainer)
	pod := testPod("a", 2)
	active.add(pod)
	if err := tm.Admit(pod); err != nil {
		t.Fatal(err)
	}
	nodes := deviceNodes(m, pod, "c")
	if len(nodes) != 1 {
		t.Fatalf("devices of a single-numa-node pod on NUMA nodes %v", nodes)
	}
	// An agent restart asks again: the hints are those of the devices the
	// container holds.
	got := m.GetTopologyHints(context.Background(), pod, &pod.Spec.Containers[0])[testResource]
	want := []topologymanager.TopologyHint{{NUMANodeAffinity: numaMask(nodes[0]), Preferred: true}, {NUMANodeAffinity: numaMask(0, 1), Preferred: false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hints of the allocated container: %v, want %v", got, want)
	}
	// The other node's two devices are still free; three are not.
	if got := m.GetTopologyHints(context.Background(), testPod("b", 3), &testPod("b", 3).Spec.Containers[0])[testResource]; len(got) != 0 {
		t.Errorf("hints for 3 devices with 2 free: %v, want none", got)
	}
}

func TestTopologyManagerAlignsDevices(t *testing.T) {
	// The plugin prefers dev-1 (NUMA node 0) and dev-2 (node 1); the
	// affinity the topology manager chose wins over its preference.
	m, tm, active := startTopologyAligned(t, topologymanager.PolicySingleNumaNode, topologymanager.ScopeContainer, "dev-1", "dev-2")
	admit := func(uid string, n int64) *v1.Pod {
		t.Helper()
		pod := testPod(uid, n)
		active.add(pod)
		if err := tm.Admit(pod); err != nil {
			t.Fatalf("admit pod %s (%d devices): %v", uid, n, err)
		}
		return pod
	}
	ids := func(uid string) []string {
		var out []string
		for _, d := range m.ContainerDevices(uid, "c") {
			out = append(out, d.DeviceIds...)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	a := admit("a", 2)
	if nodes := deviceNodes(m, a, "c"); !reflect.DeepEqual(nodes, []int{0}) {
		t.Errorf("pod a's devices on NUMA nodes %v, want [0]", nodes)
	}
	if got := tm.GetAffinity("a", "c"); got.NUMANodeAffinity != numaMask(0) || !got.Preferred {
		t.Errorf("affinity %v, want NUMA node 0, preferred", got)
	}
	active.remove("a")
	// One device each: node 0 (the narrowest, lowest) while it has free
	// devices, the plugin's preferred one first, then node 1.
	admit("b", 1)
	admit("c", 1)
	admit("d", 1)
	if b, c, d := ids("b"), ids("c"), ids("d"); !reflect.DeepEqual([][]string{b, c, d}, [][]string{{"dev-1"}, {"dev-0"}, {"dev-2"}}) {
		t.Errorf("devices of b, c, d: %v %v %v, want dev-1 dev-0 dev-2", b, c, d)
	}
	// With dev-0 (node 0) and dev-3 (node 1) free, two devices fit only
	// across both nodes: single-numa-node refuses.
	active.remove("c")
	e := testPod("e", 2)
	active.add(e)
	err := tm.Admit(e)
	var affinity topologymanager.TopologyAffinityError
	if !errors.As(err, &affinity) {
		t.Fatalf("admit 2 devices with 1 free on each node: %v, want TopologyAffinityError", err)
	}
	if r := err.(interface{ Reason() string }).Reason(); r != "TopologyAffinityError" {
		t.Errorf("reason %q", r)
	}
	if got := ids("e"); len(got) != 0 {
		t.Errorf("pod e refused but holds %v", got)
	}
}

func TestBestEffortTakesDevicesAcrossNodes(t *testing.T) {
	m, tm, active := startTopologyAligned(t, topologymanager.PolicyBestEffort, topologymanager.ScopeContainer)
	for _, uid := range []string{"a", "b", "c"} {
		pod := testPod(uid, 1)
		active.add(pod)
		if err := tm.Admit(pod); err != nil {
			t.Fatal(err)
		}
	}
	// a and b filled node 0, c took a device of node 1; free b's.
	active.remove("b")
	pod := testPod("d", 2)
	active.add(pod)
	if err := tm.Admit(pod); err != nil {
		t.Fatalf("best-effort admit across nodes: %v", err)
	}
	if nodes := deviceNodes(m, pod, "c"); !reflect.DeepEqual(nodes, []int{0, 1}) {
		t.Errorf("devices on NUMA nodes %v, want [0 1]", nodes)
	}
	if got := tm.GetAffinity("d", "c"); got.NUMANodeAffinity != numaMask(0, 1) || got.Preferred {
		t.Errorf("affinity %v, want both nodes, not preferred", got)
	}
}

func TestTopologyManagerRefusesUnalignableDevices(t *testing.T) {
	for _, tc := range []struct {
		policy, scope string
		admit         bool
	}{
		{topologymanager.PolicySingleNumaNode, topologymanager.ScopeContainer, false},
		{topologymanager.PolicySingleNumaNode, topologymanager.ScopePod, false},
		// Three devices need both nodes: that is the narrowest affinity,
		// preferred, so restricted and best-effort admit.
		{topologymanager.PolicyRestricted, topologymanager.ScopeContainer, true},
		{topologymanager.PolicyBestEffort, topologymanager.ScopePod, true},
	} {
		t.Run(tc.policy+"/"+tc.scope, func(t *testing.T) {
			m, tm, active := startTopologyAligned(t, tc.policy, tc.scope)
			pod := testPod("p", 3)
			active.add(pod)
			err := tm.Admit(pod)
			if tc.admit {
				if err != nil {
					t.Fatalf("admit: %v", err)
				}
				if nodes := deviceNodes(m, pod, "c"); !reflect.DeepEqual(nodes, []int{0, 1}) {
					t.Errorf("devices on NUMA nodes %v", nodes)
				}
				return
			}
			if !errors.As(err, new(topologymanager.TopologyAffinityError)) {
				t.Fatalf("admit 3 devices on two nodes of 2: %v, want TopologyAffinityError", err)
			}
			if got := m.ContainerDevices("p", "c"); len(got) != 0 {
				t.Errorf("refused pod holds %v", got)
			}
		})
	}
}

func TestPodScopeAlignsInitAndAppContainers(t *testing.T) {
	m, tm, active := startTopologyAligned(t, topologymanager.PolicySingleNumaNode, topologymanager.ScopePod)
	pod := testPod("p", 2)
	init := pod.Spec.Containers[0]
	init.Name = "init"
	pod.Spec.InitContainers = []v1.Container{init}
	active.add(pod)
	if err := tm.Admit(pod); err != nil {
		t.Fatal(err)
	}
	// The app container reuses the init container's devices: the pod's
	// request is 2, on one node.
	if a, b := deviceNodes(m, pod, "init"), deviceNodes(m, pod, "c"); !reflect.DeepEqual(a, b) || len(a) != 1 {
		t.Errorf("init container's devices on %v, app container's on %v, want the same single node", a, b)
	}
	if got, want := m.ContainerDevices("p", "c"), m.ContainerDevices("p", "init"); !reflect.DeepEqual(got, want) {
		t.Errorf("app container's devices %v, want the init container's %v", got, want)
	}
}
