package status

import (
	"context"
	"errors"
	"github.com/nodekit/nodekit"
	"net"
	"os"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func okHealth(context.Context) (error, error) { return nil, nil }

func okVersion(context.Context) (string, string, error) { return "containerd", "1.6.20", nil }

func TestDefaultSettersOrderAndOptionalOnes(t *testing.T) {
	base := SetterOptions{Hostname: "h", Machine: machineFunc(testMachine()), RuntimeVersion: okVersion, RuntimeHealth: okHealth}
	names := func(opts SetterOptions) []string {
		t.Helper()
		setters, err := DefaultSetters(opts)
		if err != nil {
			t.Fatal(err)
		}
		resolved, err := resolveSetters(setters)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range resolved {
			out = append(out, s.Name)
		}
		return out
	}
	want := []string{SetterNodeAddress, SetterMachineInfo, SetterVersionInfo, SetterDaemonEndpoints, SetterGoRuntime,
		SetterDeclaredFeatures, SetterMemoryPressure, SetterDiskPressure, SetterPIDPressure, SetterNodeSchedulable, SetterReady}
	if got := names(base); !reflect.DeepEqual(got, want) {
		t.Errorf("setters = %v, want %v", got, want)
	}
	full := base
	full.ListImages = func(context.Context) ([]*runtimeapi.Image, error) { return nil, nil }
	full.RuntimeHandlers = func(context.Context) ([]*runtimeapi.RuntimeHandler, error) { return nil, nil }
	full.RuntimeFeatures = func(context.Context) (*runtimeapi.RuntimeFeatures, error) { return nil, nil }
	full.VolumesInUse = VolumesInUseFuncs{Synced: func() bool { return true }, InUse: func() []v1.UniqueVolumeName { return nil }}
	want = []string{SetterNodeAddress, SetterMachineInfo, SetterVersionInfo, SetterDaemonEndpoints, SetterImages, SetterGoRuntime,
		SetterRuntimeHandlers, SetterNodeFeatures, SetterDeclaredFeatures, SetterMemoryPressure, SetterDiskPressure, SetterPIDPressure,
		SetterNodeSchedulable, SetterReady, SetterVolumesInUse}
	if got := names(full); !reflect.DeepEqual(got, want) {
		t.Errorf("setters = %v, want %v", got, want)
	}
}

func TestDefaultSettersErrors(t *testing.T) {
	ok := SetterOptions{Hostname: "h", Machine: machineFunc(testMachine()), RuntimeVersion: okVersion, RuntimeHealth: okHealth}
	for name, edit := range map[string]func(*SetterOptions){
		"no hostname":        func(o *SetterOptions) { o.Hostname = "" },
		"no runtime health":  func(o *SetterOptions) { o.RuntimeHealth = nil },
		"no runtime version": func(o *SetterOptions) { o.RuntimeVersion = nil },
		"bad eviction":       func(o *SetterOptions) { o.EvictionHard = map[string]string{"memory.available": "-1"} },
		"bad port":           func(o *SetterOptions) { o.KubeletPort = 70000 },
		"bad max images":     func(o *SetterOptions) { n := int32(-5); o.NodeStatusMaxImages = &n },
		"bad node IPs":       func(o *SetterOptions) { o.NodeIPs = []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")} },
	} {
		opts := ok
		opts.ListImages = func(context.Context) ([]*runtimeapi.Image, error) { return nil, nil }
		edit(&opts)
		if _, err := DefaultSetters(opts); err == nil {
			t.Errorf("%s: DefaultSetters succeeded", name)
		}
	}
}

// TestDefaultSettersOnFixture runs every default setter on the fixture
// machine, reading it through the default Machine (machine.Read of Roots).
func TestDefaultSettersOnFixture(t *testing.T) {
	setters, err := DefaultSetters(SetterOptions{
		Hostname: "h", NodeIPs: []net.IP{net.ParseIP("127.0.0.9")},
		Roots:          fixtureRoots(t, "full"),
		KubeReserved:   v1.ResourceList{v1.ResourceMemory: q("1Gi")},
		EvictionHard:   map[string]string{"memory.available": "100Mi"},
		RuntimeVersion: okVersion,
		RuntimeHealth:  okHealth,
		Pressure:       PressureFuncs{Disk: func() bool { return true }},
	})
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	for _, s := range setters {
		if err := s.Set(context.Background(), node); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
	}
	assertResources(t, "capacity", node.Status.Capacity, v1.ResourceList{
		v1.ResourceCPU: q("5"), v1.ResourceMemory: q("16303428Ki"), v1.ResourcePods: q("110"),
		"hugepages-2Mi": q("1Gi"), "hugepages-1Gi": q("1Gi"), v1.ResourceEphemeralStorage: node.Status.Capacity[v1.ResourceEphemeralStorage],
	})
	// 16303428Ki - 1Gi kube-reserved - 100Mi eviction - 1Gi - 1Gi huge pages
	if got, want := node.Status.Allocatable[v1.ResourceMemory], q("16303428Ki"); got.Value() != want.Value()-(3<<30)-(100<<20) {
		t.Errorf("allocatable memory = %s", got.String())
	}
	info := node.Status.NodeInfo
	if info.OSImage != "Debian GNU/Linux 12 (bookworm)" || info.KernelVersion != "6.1.0-18-amd64" ||
		info.BootID != "5c3b1d7e-8a42-4f6b-9e0d-2a1c3b4d5e6f" || info.ContainerRuntimeVersion != "containerd://1.6.20" ||
		info.OperatingSystem == "" || info.KubeletVersion != nodekit.KubeletVersion() {
		t.Errorf("nodeInfo = %+v", info)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != defaultKubeletPort {
		t.Errorf("daemon endpoints = %+v", node.Status.DaemonEndpoints)
	}
	if c := findCondition(node, v1.NodeDiskPressure); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("DiskPressure = %+v", c)
	}
	if c := findCondition(node, v1.NodeReady); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}
	if last := node.Status.Conditions[len(node.Status.Conditions)-1]; last.Type != v1.NodeReady {
		t.Errorf("last condition = %s, want Ready", last.Type)
	}
}

func TestDefaultSettersMachineErrorIsRetried(t *testing.T) {
	roots := fixtureRoots(t, "full")
	roots.RootDir += "/not-yet"
	setters, err := DefaultSetters(SetterOptions{Hostname: "h", Roots: roots, RuntimeVersion: okVersion, RuntimeHealth: okHealth})
	if err != nil {
		t.Fatal(err)
	}
	var machineInfo Setter
	for _, s := range setters {
		if s.Name == SetterMachineInfo {
			machineInfo = s.Set
		}
	}
	node := newNode("n")
	if err := machineInfo(context.Background(), node); err == nil {
		t.Fatal("no error with a missing root directory")
	}
	if err := os.Mkdir(roots.RootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := machineInfo(context.Background(), node); err != nil {
		t.Fatalf("machine info not read again once the root directory exists: %v", err)
	}
	if node.Status.Capacity.Cpu().Value() != 5 {
		t.Errorf("cpu = %v", node.Status.Capacity.Cpu())
	}
}

func TestProvideDefaultSettersFillsFromGraph(t *testing.T) {
	var pressured bool
	setters, err := provideDefaultSetters(setterParams{
		Options:        Options{NodeName: "node-x"},
		Config:         SetterOptions{Machine: machineFunc(testMachine()), NodeIPs: []net.IP{net.ParseIP("127.0.0.9")}},
		RuntimeVersion: okVersion,
		RuntimeHealth:  func(context.Context) (error, error) { return nil, errors.New("cni not ready") },
		Pressure:       PressureFuncs{Memory: func() bool { pressured = true; return true }},
		HealthChecks:   []HealthCheck{{Name: "PLEG", Healthy: func() (bool, error) { return true, nil }}},
	})
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("node-x")
	for _, s := range setters {
		_ = s.Set(context.Background(), node)
	}
	if !pressured {
		t.Error("the graph's pressure func was not used")
	}
	if c := findCondition(node, v1.NodeReady); c.Message != "cni not ready" {
		t.Errorf("Ready = %+v, want the graph's runtime health", c)
	}
	if node.Status.Addresses[1].Address != "node-x" {
		t.Errorf("hostname address = %v, want the node name", node.Status.Addresses)
	}
}
