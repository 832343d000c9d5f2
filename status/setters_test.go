package status

import (
	"context"
	"errors"
	"net"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/machine"
)

func hostAddrs(ips ...string) func() ([]net.Addr, error) {
	return func() ([]net.Addr, error) {
		var out []net.Addr
		for _, ip := range ips {
			out = append(out, &net.IPNet{IP: net.ParseIP(ip), Mask: net.CIDRMask(24, 32)})
		}
		return out, nil
	}
}

func TestNodeAddress(t *testing.T) {
	noLookup := func(string) ([]net.IP, error) { return nil, errors.New("no DNS") }
	noRoute := func(net.IP) (net.IP, error) { return nil, errors.New("no default route") }
	ips := func(s ...string) []net.IP {
		var out []net.IP
		for _, x := range s {
			out = append(out, net.ParseIP(x))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		opts    nodeAddressOptions
		want    []v1.NodeAddress
		wantErr string
	}{{
		name: "node IP on an interface",
		opts: nodeAddressOptions{NodeIPs: ips("10.0.0.5"), Hostname: "host-a", InterfaceAddrs: hostAddrs("10.0.0.5")},
		want: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: "host-a"}},
	}, {
		name: "loopback node IP accepted",
		opts: nodeAddressOptions{NodeIPs: ips("127.0.0.5"), Hostname: "host-a", InterfaceAddrs: hostAddrs()},
		want: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.5"}, {Type: v1.NodeHostName, Address: "host-a"}},
	}, {
		name:    "node IP not on this host",
		opts:    nodeAddressOptions{NodeIPs: ips("10.9.9.9"), Hostname: "host-a", InterfaceAddrs: hostAddrs("10.0.0.5")},
		wantErr: "not found on the host's network interfaces",
	}, {
		name:    "multicast node IP",
		opts:    nodeAddressOptions{NodeIPs: ips("224.0.0.1"), Hostname: "host-a", InterfaceAddrs: hostAddrs("224.0.0.1")},
		wantErr: "multicast",
	}, {
		name: "dual-stack",
		opts: nodeAddressOptions{NodeIPs: ips("10.0.0.5", "2001:db8::5"), Hostname: "host-a", InterfaceAddrs: hostAddrs("10.0.0.5", "2001:db8::5")},
		want: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeInternalIP, Address: "2001:db8::5"}, {Type: v1.NodeHostName, Address: "host-a"}},
	}, {
		name: "hostname is an IP",
		opts: nodeAddressOptions{Hostname: "192.168.1.7", LookupIP: noLookup, DefaultRouteIP: noRoute},
		want: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.1.7"}, {Type: v1.NodeHostName, Address: "192.168.1.7"}},
	}, {
		name: "DNS lookup prefers a usable IPv4",
		opts: nodeAddressOptions{Hostname: "host-a", InterfaceAddrs: hostAddrs("2001:db8::1", "10.0.0.6"), DefaultRouteIP: noRoute,
			LookupIP: func(host string) ([]net.IP, error) {
				if host != "node-a" {
					return nil, errors.New("looked up the wrong name " + host)
				}
				return ips("127.0.1.1", "fe80::1", "2001:db8::1", "10.0.0.99", "10.0.0.6"), nil
			}},
		want: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.6"}, {Type: v1.NodeHostName, Address: "host-a"}},
	}, {
		name: "DNS lookup falls back to the other family",
		opts: nodeAddressOptions{Hostname: "host-a", InterfaceAddrs: hostAddrs("2001:db8::1"), DefaultRouteIP: noRoute,
			LookupIP: func(string) ([]net.IP, error) { return ips("2001:db8::1"), nil }},
		want: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "2001:db8::1"}, {Type: v1.NodeHostName, Address: "host-a"}},
	}, {
		name: "default route",
		opts: nodeAddressOptions{Hostname: "host-a", LookupIP: noLookup,
			DefaultRouteIP: func(net.IP) (net.IP, error) { return net.ParseIP("172.16.0.4"), nil }},
		want: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "172.16.0.4"}, {Type: v1.NodeHostName, Address: "host-a"}},
	}, {
		name:    "nothing found",
		opts:    nodeAddressOptions{Hostname: "host-a", LookupIP: noLookup, DefaultRouteIP: noRoute},
		wantErr: "no default route",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := nodeAddress(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			node := newNode("node-a")
			prev := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "1.1.1.1"}}
			node.Status.Addresses = prev
			err = s(context.Background(), node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				if !reflect.DeepEqual(node.Status.Addresses, prev) {
					t.Errorf("addresses changed on error: %v", node.Status.Addresses)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(node.Status.Addresses, tc.want) {
				t.Errorf("addresses = %v, want %v", node.Status.Addresses, tc.want)
			}
		})
	}
}

func TestNodeAddressLoopbackWarnsOnce(t *testing.T) {
	var warnings int
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, "loopback") {
			warnings++
		}
	}, funcr.Options{})
	ctx := klog.NewContext(context.Background(), logger)
	s, err := nodeAddress(nodeAddressOptions{NodeIPs: []net.IP{net.ParseIP("127.0.0.3")}, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := s(ctx, newNode("n")); err != nil {
			t.Fatal(err)
		}
	}
	if warnings != 1 {
		t.Errorf("loopback warning logged %d times, want once", warnings)
	}
}

func TestNodeAddressBadOptions(t *testing.T) {
	for name, opts := range map[string]nodeAddressOptions{
		"no hostname":  {},
		"three IPs":    {Hostname: "h", NodeIPs: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.0.0.2")}},
		"same family":  {Hostname: "h", NodeIPs: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")}},
		"nil (bad) IP": {Hostname: "h", NodeIPs: []net.IP{net.ParseIP("not-an-ip")}},
	} {
		if _, err := nodeAddress(opts); err == nil {
			t.Errorf("%s: NodeAddress succeeded", name)
		}
	}
}

func TestMachineInfoCapacityAndAllocatable(t *testing.T) {
	s, err := machineInfo(machineInfoOptions{
		Machine:        machineFunc(testMachine()),
		KubeReserved:   v1.ResourceList{v1.ResourceCPU: q("100m"), v1.ResourceMemory: q("256Mi")},
		SystemReserved: v1.ResourceList{v1.ResourceCPU: q("200m"), v1.ResourceMemory: q("512Mi"), v1.ResourceEphemeralStorage: q("1Gi")},
		EvictionHard:   map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%", "nodefs.inodesFree": "5%"},
	})
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	node.Status.Capacity = v1.ResourceList{"example.com/gpu": q("2")}
	node.Status.Allocatable = v1.ResourceList{"example.com/gone": q("1")}
	mustSet(t, s, node)

	wantCap := v1.ResourceList{
		v1.ResourceCPU: q("4"), v1.ResourceMemory: q("8Gi"), "hugepages-2Mi": q("200Mi"),
		v1.ResourcePods: q("110"), v1.ResourceEphemeralStorage: q("100G"), "example.com/gpu": q("2"),
	}
	// nodefs.available<10% reserves 10% of the disk, computed with the
	// kubelet's float32 percentage: a few bytes more than 10e9.
	disk, pct := float64(100e9), float32(10)
	evictionDisk := int64(disk * float64(pct/100))
	if evictionDisk < 10e9 || evictionDisk > 10e9+1000 {
		t.Fatalf("eviction reservation %d is not about 10%% of the disk", evictionDisk)
	}
	wantAlloc := v1.ResourceList{
		v1.ResourceCPU:              q("3700m"),
		v1.ResourceMemory:           q("7124Mi"), // 8192 - 256 - 512 - 100 (eviction) - 200 (huge pages)
		"hugepages-2Mi":             q("200Mi"),
		v1.ResourcePods:             q("110"),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(100e9-(1<<30)-evictionDisk, resource.DecimalSI),
		"example.com/gpu":           q("2"),
	}
	assertResources(t, "capacity", node.Status.Capacity, wantCap)
	assertResources(t, "allocatable", node.Status.Allocatable, wantAlloc)
	info := node.Status.NodeInfo
	if info.MachineID != "machine-1" || info.SystemUUID != "uuid-1" || info.BootID != "boot-1" {
		t.Errorf("nodeInfo IDs = %q %q %q", info.MachineID, info.SystemUUID, info.BootID)
	}
	if info.Swap != nil || info.RunningInUserNamespace == nil || *info.RunningInUserNamespace {
		t.Errorf("swap %v, runningInUserNamespace %v: want nil, false", info.Swap, info.RunningInUserNamespace)
	}
}

func assertResources(t *testing.T, what string, got, want v1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
		return
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g.Cmp(w) != 0 {
			t.Errorf("%s[%s] = %v, want %v", what, name, g.String(), w.String())
		}
	}
}

func TestMachineInfoPodsAndClamping(t *testing.T) {
	m := testMachine()
	m.SwapCapacity = 1 << 30
	m.RunningInUserNamespace = true
	for _, tc := range []struct {
		maxPods, podsPerCore int32
		want                 int64
	}{{0, 0, 110}, {50, 0, 50}, {110, 10, 40}, {110, 100, 110}} {
		s, err := machineInfo(machineInfoOptions{
			Machine: machineFunc(m), MaxPods: tc.maxPods, PodsPerCore: tc.podsPerCore,
			SystemReserved:                  v1.ResourceList{v1.ResourceCPU: q("10")},
			NoLocalStorageCapacityIsolation: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		node := newNode("n")
		mustSet(t, s, node)
		if got := node.Status.Capacity[v1.ResourcePods]; got.Value() != tc.want {
			t.Errorf("maxPods %d podsPerCore %d: pods = %v, want %d", tc.maxPods, tc.podsPerCore, got.String(), tc.want)
		}
		if got := node.Status.Allocatable[v1.ResourceCPU]; !got.IsZero() {
			t.Errorf("allocatable cpu = %v, want clamped to 0", got.String())
		}
		if _, ok := node.Status.Capacity[v1.ResourceEphemeralStorage]; ok {
			t.Error("ephemeral-storage reported without local storage capacity isolation")
		}
		if node.Status.NodeInfo.Swap == nil || *node.Status.NodeInfo.Swap.Capacity != 1<<30 {
			t.Errorf("swap = %v, want 1Gi", node.Status.NodeInfo.Swap)
		}
		if p := node.Status.NodeInfo.RunningInUserNamespace; p == nil || !*p {
			t.Error("runningInUserNamespace not true")
		}
	}
}

func TestMachineInfoError(t *testing.T) {
	s, err := machineInfo(machineInfoOptions{
		Machine: func() (*machine.Info, error) { return nil, errors.New("no /proc") },
		MaxPods: 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	if err := s(context.Background(), node); err == nil || !strings.Contains(err.Error(), "no /proc") {
		t.Fatalf("error = %v, want the machine error", err)
	}
	assertResources(t, "capacity", node.Status.Capacity, v1.ResourceList{v1.ResourceCPU: q("0"), v1.ResourceMemory: q("0"), v1.ResourcePods: q("30")})
	assertResources(t, "allocatable", node.Status.Allocatable, v1.ResourceList{v1.ResourceCPU: q("0"), v1.ResourceMemory: q("0"), v1.ResourcePods: q("30")})
}

func TestMachineInfoRebootEvent(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	s, err := machineInfo(machineInfoOptions{Machine: machineFunc(testMachine()), Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	stale := func() *v1.Node {
		n := newNode("n")
		n.Status.NodeInfo.BootID = "boot-0"
		return n
	}
	if err := s(withDryRun(context.Background()), stale()); err != nil {
		t.Fatal(err)
	}
	if ev := drainEvents(rec); len(ev) != 0 {
		t.Fatalf("dry run recorded %v", ev)
	}
	node := stale()
	mustSet(t, s, node)
	mustSet(t, s, stale())
	want := []string{"Warning Rebooted Node n has been rebooted, boot id: boot-1"}
	if ev := drainEvents(rec); !reflect.DeepEqual(ev, want) {
		t.Errorf("events = %q, want %q", ev, want)
	}
	if node.Status.NodeInfo.BootID != "boot-1" {
		t.Errorf("bootID = %q, want boot-1", node.Status.NodeInfo.BootID)
	}
	mustSet(t, s, newNode("fresh"))
	if ev := drainEvents(rec); len(ev) != 0 {
		t.Errorf("a node without a boot ID recorded %v", ev)
	}
}

func TestMachineInfoBadOptions(t *testing.T) {
	m := machineFunc(testMachine())
	for name, opts := range map[string]machineInfoOptions{
		"no machine":           {},
		"negative max pods":    {Machine: m, MaxPods: -1},
		"negative reservation": {Machine: m, KubeReserved: v1.ResourceList{v1.ResourceCPU: q("-1")}},
		"unknown signal":       {Machine: m, EvictionHard: map[string]string{"memory.free": "1Gi"}},
		"negative percentage":  {Machine: m, EvictionHard: map[string]string{"nodefs.available": "-5%"}},
		"percentage over 100":  {Machine: m, EvictionHard: map[string]string{"nodefs.available": "150%"}},
		"bad percentage":       {Machine: m, EvictionHard: map[string]string{"nodefs.available": "x%"}},
		"zero quantity":        {Machine: m, EvictionHard: map[string]string{"memory.available": "0Mi"}},
		"bad quantity":         {Machine: m, EvictionHard: map[string]string{"memory.available": "lots"}},
	} {
		if _, err := machineInfo(opts); err == nil {
			t.Errorf("%s: MachineInfo succeeded", name)
		}
	}
	if _, err := machineInfo(machineInfoOptions{Machine: m, EvictionHard: map[string]string{"nodefs.available": "0%", "memory.available": "100%"}}); err != nil {
		t.Errorf("0%% and 100%% must be ignored as in the kubelet: %v", err)
	}
}

func TestVersionInfo(t *testing.T) {
	var rtErr error
	name := "containerd"
	s, err := versionInfo(versionInfoOptions{
		Machine: machineFunc(testMachine()),
		RuntimeVersion: func(context.Context) (string, string, error) {
			return name, "1.6.20", rtErr
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	node.Status.NodeInfo.KubeProxyVersion = "v1.20.0"
	mustSet(t, s, node)
	want := v1.NodeSystemInfo{
		KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12 (bookworm)",
		ContainerRuntimeVersion: "containerd://1.6.20", KubeletVersion: nodekit.KubeletVersion(),
	}
	if node.Status.NodeInfo != want {
		t.Errorf("nodeInfo = %+v, want %+v", node.Status.NodeInfo, want)
	}
	rtErr = errors.New("connection refused")
	name = ""
	mustSet(t, s, node)
	if got := node.Status.NodeInfo.ContainerRuntimeVersion; got != "containerd://Unknown" {
		t.Errorf("runtime version while down = %q, want containerd://Unknown", got)
	}

	fresh, err := versionInfo(versionInfoOptions{Machine: machineFunc(testMachine()), KubeletVersion: "v9.9.9",
		RuntimeVersion: func(context.Context) (string, string, error) { return "", "", errors.New("down") }})
	if err != nil {
		t.Fatal(err)
	}
	node = newNode("n")
	node.Status.NodeInfo.ContainerRuntimeVersion = "cri-o://1.30"
	mustSet(t, fresh, node)
	if got := node.Status.NodeInfo.ContainerRuntimeVersion; got != "cri-o://Unknown" {
		t.Errorf("runtime version = %q, want the name on the node", got)
	}
	if got := node.Status.NodeInfo.KubeletVersion; got != "v9.9.9" {
		t.Errorf("kubelet version = %q", got)
	}
	node = newNode("n")
	mustSet(t, fresh, node)
	if got := node.Status.NodeInfo.ContainerRuntimeVersion; got != "Unknown://Unknown" {
		t.Errorf("runtime version = %q, want Unknown://Unknown", got)
	}

	broken, err := versionInfo(versionInfoOptions{
		Machine:        func() (*machine.Info, error) { return nil, errors.New("no proc") },
		RuntimeVersion: func(context.Context) (string, string, error) { return "containerd", "2.0", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	node = newNode("n")
	if err := broken(context.Background(), node); err == nil {
		t.Error("no error when machine info fails")
	}
	if node.Status.NodeInfo.ContainerRuntimeVersion != "containerd://2.0" {
		t.Errorf("runtime version not set when machine info fails: %q", node.Status.NodeInfo.ContainerRuntimeVersion)
	}
	if _, err := versionInfo(versionInfoOptions{}); err == nil {
		t.Error("VersionInfo without funcs succeeded")
	}
}

func fullCapacity() v1.ResourceList {
	return v1.ResourceList{v1.ResourceCPU: q("1"), v1.ResourceMemory: q("1Gi"), v1.ResourcePods: q("110"), v1.ResourceEphemeralStorage: q("1G")}
}

func TestReadyConditionMessages(t *testing.T) {
	runtimeDown := errors.New("container runtime not ready: RuntimeReady=false reason:Down message:socket gone")
	networkDown := errors.New("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni config uninitialized")
	for _, tc := range []struct {
		name             string
		runtime, network error
		checks           []HealthCheck
		capacity         v1.ResourceList
		noStorage        bool
		soft             error
		wantStatus       v1.ConditionStatus
		wantReason       string
		wantMessage      string
	}{{
		name: "ready", capacity: fullCapacity(),
		wantStatus: v1.ConditionTrue, wantReason: "KubeletReady", wantMessage: "kubelet is posting ready status",
	}, {
		name: "runtime down", runtime: runtimeDown, capacity: fullCapacity(),
		wantStatus: v1.ConditionFalse, wantReason: "KubeletNotReady", wantMessage: runtimeDown.Error(),
	}, {
		name: "network down", network: networkDown, capacity: fullCapacity(),
		wantStatus: v1.ConditionFalse, wantReason: "KubeletNotReady", wantMessage: networkDown.Error(),
	}, {
		name: "everything wrong", runtime: runtimeDown, network: networkDown,
		checks: []HealthCheck{
			{Name: "PLEG", Healthy: func() (bool, error) {
				return false, errors.New("PLEG is not healthy: pleg was last seen active 3m0.1s ago; threshold is 3m0s")
			}},
			{Name: "fine", Healthy: func() (bool, error) { return true, nil }},
		},
		wantStatus: v1.ConditionFalse, wantReason: "KubeletNotReady",
		wantMessage: "[" + runtimeDown.Error() + ", PLEG is not healthy: pleg was last seen active 3m0.1s ago; threshold is 3m0s, " +
			networkDown.Error() + ", missing node capacity for resources: cpu, memory, pods, ephemeral-storage]",
	}, {
		name: "missing capacity without storage isolation", noStorage: true, capacity: v1.ResourceList{v1.ResourceCPU: q("1")},
		wantStatus: v1.ConditionFalse, wantReason: "KubeletNotReady", wantMessage: "missing node capacity for resources: memory, pods",
	}, {
		name: "soft requirements", capacity: fullCapacity(), soft: errors.New("cpu quota not supported"),
		wantStatus: v1.ConditionTrue, wantReason: "KubeletReady", wantMessage: "kubelet is posting ready status. WARNING: cpu quota not supported",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := readyOptions{
				RuntimeHealth: func(context.Context) (error, error) { return tc.runtime, tc.network },
				HealthChecks:  tc.checks, NoLocalStorageCapacityIsolation: tc.noStorage,
				Clock: testingclock.NewFakePassiveClock(time.Unix(1000, 0)),
			}
			if tc.soft != nil {
				opts.SoftRequirements = func() error { return tc.soft }
			}
			s, err := readyCondition(opts)
			if err != nil {
				t.Fatal(err)
			}
			node := newNode("n")
			node.Status.Capacity = tc.capacity
			mustSet(t, s, node)
			c := findCondition(node, v1.NodeReady)
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.Message != tc.wantMessage {
				t.Errorf("Ready = %+v\nwant %s %s %q", c, tc.wantStatus, tc.wantReason, tc.wantMessage)
			}
		})
	}
}

func TestReadyConditionTransitions(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	rec := record.NewFakeRecorder(10)
	var rtErr error
	s, err := readyCondition(readyOptions{
		RuntimeHealth: func(context.Context) (error, error) { return rtErr, nil },
		Clock:         clk, Recorder: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	node.Status.Capacity = fullCapacity()
	node.Status.Conditions = []v1.NodeCondition{{Type: "Foreign", Status: v1.ConditionTrue}}
	mustSet(t, s, node)
	t0 := metav1.NewTime(clk.Now())
	if len(node.Status.Conditions) != 2 || node.Status.Conditions[1].Type != v1.NodeReady {
		t.Fatalf("conditions = %+v, want Ready appended last", node.Status.Conditions)
	}
	if ev := drainEvents(rec); len(ev) != 0 {
		t.Errorf("a new Ready condition recorded %v", ev)
	}

	clk.SetTime(clk.Now().Add(10 * time.Second))
	mustSet(t, s, node)
	c := findCondition(node, v1.NodeReady)
	if !c.LastTransitionTime.Equal(&t0) || c.LastHeartbeatTime.Equal(&t0) {
		t.Errorf("same status: transition %v (want %v kept), heartbeat %v (want moved)", c.LastTransitionTime, t0, c.LastHeartbeatTime)
	}

	rtErr = errors.New("runtime gone")
	clk.SetTime(clk.Now().Add(10 * time.Second))
	if err := s(withDryRun(context.Background()), node.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if ev := drainEvents(rec); len(ev) != 0 {
		t.Errorf("dry run recorded %v", ev)
	}
	mustSet(t, s, node)
	c = findCondition(node, v1.NodeReady)
	if c.Status != v1.ConditionFalse || !c.LastTransitionTime.Equal(&metav1.Time{Time: clk.Now()}) {
		t.Errorf("after flip: %+v", c)
	}
	rtErr = nil
	mustSet(t, s, node)
	want := []string{"Normal NodeNotReady Node n status is now: NodeNotReady", "Normal NodeReady Node n status is now: NodeReady"}
	if ev := drainEvents(rec); !reflect.DeepEqual(ev, want) {
		t.Errorf("events = %q, want %q", ev, want)
	}
}

func TestReadyConditionBadOptions(t *testing.T) {
	if _, err := readyCondition(readyOptions{}); err == nil {
		t.Error("ReadyCondition without RuntimeHealth succeeded")
	}
	ok := func(context.Context) (error, error) { return nil, nil }
	if _, err := readyCondition(readyOptions{RuntimeHealth: ok, HealthChecks: []HealthCheck{{Name: "PLEG"}}}); err == nil {
		t.Error("ReadyCondition with a health check without func succeeded")
	}
}

func TestPressureConditions(t *testing.T) {
	for _, tc := range []struct {
		build                   func(pressureOptions) Setter
		condition               v1.NodeConditionType
		reasonFalse, reasonTrue string
		eventFalse, eventTrue   string
	}{
		{memoryPressureCondition, v1.NodeMemoryPressure, "KubeletHasSufficientMemory", "KubeletHasInsufficientMemory", "NodeHasSufficientMemory", "NodeHasInsufficientMemory"},
		{diskPressureCondition, v1.NodeDiskPressure, "KubeletHasNoDiskPressure", "KubeletHasDiskPressure", "NodeHasNoDiskPressure", "NodeHasDiskPressure"},
		{pidPressureCondition, v1.NodePIDPressure, "KubeletHasSufficientPID", "KubeletHasInsufficientPID", "NodeHasSufficientPID", "NodeHasInsufficientPID"},
	} {
		t.Run(string(tc.condition), func(t *testing.T) {
			clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
			rec := record.NewFakeRecorder(10)
			pressure := false
			s := tc.build(pressureOptions{Pressure: func() bool { return pressure }, Clock: clk, Recorder: rec})
			node := newNode("n")
			mustSet(t, s, node)
			c := findCondition(node, tc.condition)
			t0 := metav1.NewTime(clk.Now())
			if c == nil || c.Status != v1.ConditionFalse || c.Reason != tc.reasonFalse || !c.LastTransitionTime.Equal(&t0) {
				t.Fatalf("new condition = %+v", c)
			}
			clk.SetTime(clk.Now().Add(time.Minute))
			mustSet(t, s, node)
			c = findCondition(node, tc.condition)
			if !c.LastTransitionTime.Equal(&t0) || c.LastHeartbeatTime.Equal(&t0) {
				t.Errorf("no flip: transition %v heartbeat %v", c.LastTransitionTime, c.LastHeartbeatTime)
			}
			pressure = true
			mustSet(t, s, node)
			c = findCondition(node, tc.condition)
			if c.Status != v1.ConditionTrue || c.Reason != tc.reasonTrue || c.LastTransitionTime.Equal(&t0) {
				t.Errorf("under pressure: %+v", c)
			}
			want := []string{
				"Normal " + tc.eventFalse + " Node n status is now: " + tc.eventFalse,
				"Normal " + tc.eventTrue + " Node n status is now: " + tc.eventTrue,
			}
			if ev := drainEvents(rec); !reflect.DeepEqual(ev, want) {
				t.Errorf("events = %q, want %q", ev, want)
			}
			if len(node.Status.Conditions) != 1 {
				t.Errorf("conditions = %v, want one", node.Status.Conditions)
			}
		})
	}
	node := newNode("n")
	mustSet(t, memoryPressureCondition(pressureOptions{}), node)
	if c := findCondition(node, v1.NodeMemoryPressure); c == nil || c.Status != v1.ConditionFalse {
		t.Errorf("nil pressure func: %+v, want False", c)
	}
}

func TestNodeSchedulable(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	s := nodeSchedulable(rec)
	node := newNode("n")
	mustSet(t, s, node)
	node.Spec.Unschedulable = true
	if err := s(withDryRun(context.Background()), node); err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, node)
	mustSet(t, s, node)
	node.Spec.Unschedulable = false
	mustSet(t, s, node)
	want := []string{"Normal NodeNotSchedulable Node n status is now: NodeNotSchedulable", "Normal NodeSchedulable Node n status is now: NodeSchedulable"}
	if ev := drainEvents(rec); !reflect.DeepEqual(ev, want) {
		t.Errorf("events = %q, want %q", ev, want)
	}
}

func TestImages(t *testing.T) {
	images := []*runtimeapi.Image{
		{Id: "sha256:small", Size: 10, RepoTags: []string{"small:1"}},
		nil,
		{Id: "sha256:big", Size: 1000, RepoDigests: []string{"big@sha256:1", "big@sha256:2", "big@sha256:3"},
			RepoTags: []string{"big:1", "big:2", "big:3"}},
		{Id: "sha256:aaa", Size: 500, RepoTags: []string{"tie-a:1"}},
		{Id: "sha256:bbb", Size: 500, RepoTags: []string{"tie-b:1"}},
		{Id: "sha256:dangling", Size: 5},
	}
	list := func(context.Context) ([]*runtimeapi.Image, error) { return images, nil }
	s, err := imagesSetter(3, list)
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	mustSet(t, s, node)
	want := []v1.ContainerImage{
		{Names: []string{"big@sha256:1", "big@sha256:2", "big@sha256:3", "big:1", "big:2"}, SizeBytes: 1000},
		{Names: []string{"tie-b:1"}, SizeBytes: 500},
		{Names: []string{"tie-a:1"}, SizeBytes: 500},
	}
	if !reflect.DeepEqual(node.Status.Images, want) {
		t.Errorf("images = %+v\nwant %+v", node.Status.Images, want)
	}
	if images[0].Id != "sha256:small" {
		t.Error("Images reordered the list it was given")
	}

	all, _ := imagesSetter(-1, list)
	mustSet(t, all, node)
	if len(node.Status.Images) != 5 || node.Status.Images[4].SizeBytes != 5 {
		t.Errorf("-1: images = %+v, want all 5", node.Status.Images)
	}
	none, _ := imagesSetter(0, list)
	mustSet(t, none, node)
	if node.Status.Images != nil {
		t.Errorf("0: images = %+v, want none", node.Status.Images)
	}

	failing, _ := imagesSetter(50, func(context.Context) ([]*runtimeapi.Image, error) { return nil, errors.New("runtime down") })
	node.Status.Images = want
	if err := failing(context.Background(), node); err == nil || node.Status.Images != nil {
		t.Errorf("on error: err %v, images %v; want an error and no images", err, node.Status.Images)
	}
	if _, err := imagesSetter(-2, list); err == nil {
		t.Error("imagesSetter(-2) succeeded")
	}
	if _, err := imagesSetter(1, nil); err == nil {
		t.Error("Images without list func succeeded")
	}
}

func TestRuntimeHandlers(t *testing.T) {
	var fail error
	s, err := runtimeHandlers(func(context.Context) ([]*runtimeapi.RuntimeHandler, error) {
		return []*runtimeapi.RuntimeHandler{
			{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}},
			{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}},
			{Name: "kata"},
			nil,
		}, fail
	})
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	mustSet(t, s, node)
	yes, no := true, false
	want := []v1.NodeRuntimeHandler{
		{Name: "", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &no, UserNamespaces: &yes}},
		{Name: "kata", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &no, UserNamespaces: &no}},
		{Name: "runc", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &no}},
	}
	if !reflect.DeepEqual(node.Status.RuntimeHandlers, want) {
		t.Errorf("handlers = %+v, want %+v", node.Status.RuntimeHandlers, want)
	}
	fail = errors.New("down")
	if err := s(context.Background(), node); err == nil || !reflect.DeepEqual(node.Status.RuntimeHandlers, want) {
		t.Errorf("on error: err %v, handlers %+v; want an error and the old handlers", err, node.Status.RuntimeHandlers)
	}
}

func TestNodeFeaturesDeclaredFeaturesGoRuntimeDaemonEndpoints(t *testing.T) {
	var features *runtimeapi.RuntimeFeatures
	nf, err := nodeFeatures(func(context.Context) (*runtimeapi.RuntimeFeatures, error) { return features, nil })
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	mustSet(t, nf, node)
	if node.Status.Features != nil {
		t.Errorf("features = %+v with none reported", node.Status.Features)
	}
	features = &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true}
	mustSet(t, nf, node)
	if f := node.Status.Features; f == nil || !*f.SupplementalGroupsPolicy {
		t.Errorf("features = %+v, want supplementalGroupsPolicy", f)
	}

	names := []string{"b", "a"}
	mustSet(t, declaredFeatures(names), node)
	names[0] = "changed"
	if !reflect.DeepEqual(node.Status.DeclaredFeatures, []string{"a", "b"}) {
		t.Errorf("declared features = %v", node.Status.DeclaredFeatures)
	}
	mustSet(t, declaredFeatures(nil), node)
	if len(node.Status.DeclaredFeatures) != 2 {
		t.Error("a nil list cleared the declared features")
	}

	mustSet(t, goRuntime(), node)
	if node.Status.NodeInfo.OperatingSystem != goruntime.GOOS || node.Status.NodeInfo.Architecture != goruntime.GOARCH {
		t.Errorf("nodeInfo os/arch = %q/%q", node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture)
	}

	de, err := daemonEndpoints(10250)
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, de, node)
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("daemon endpoints = %+v", node.Status.DaemonEndpoints)
	}
	if _, err := daemonEndpoints(0); err == nil {
		t.Error("daemonEndpoints(0) succeeded")
	}
}

func TestResolveSetters(t *testing.T) {
	var ran []string
	mk := func(name string, order int, def bool) OrderedSetter {
		return OrderedSetter{Name: name, Order: order, isDefault: def, Set: func(context.Context, *v1.Node) error {
			ran = append(ran, name)
			return nil
		}}
	}
	replacement := mk("B", 5, false)
	got, err := resolveSetters([]OrderedSetter{
		mk("Ready", OrderReady, true), mk("B", 200, true), mk("A", 100, true), mk("C", 300, true),
		replacement, {Name: "C"}, mk("Z", 100, false),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		mustSet(t, s.Set, newNode("n"))
	}
	if want := []string{"B", "A", "Z", "Ready"}; !reflect.DeepEqual(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	for name, in := range map[string][]OrderedSetter{
		"no name":                {{Order: 1, Set: replacement.Set}},
		"duplicate custom":       {mk("X", 1, false), mk("X", 2, false)},
		"duplicate default":      {mk("X", 1, true), mk("X", 2, true)},
		"nil Set and no default": {{Name: "Typo"}},
	} {
		if _, err := resolveSetters(in); err == nil {
			t.Errorf("%s: resolveSetters succeeded", name)
		}
	}
}

func TestVolumesInUse(t *testing.T) {
	synced := false
	inUse := []v1.UniqueVolumeName{"kubernetes.io/csi/driver^vol-1"}
	set, err := volumesInUse(VolumesInUseFuncs{Synced: func() bool { return synced }, InUse: func() []v1.UniqueVolumeName { return inUse }})
	if err != nil {
		t.Fatal(err)
	}
	node := newNode("n")
	node.Status.VolumesInUse = []v1.UniqueVolumeName{"previous"}
	if err := set(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if len(node.Status.VolumesInUse) != 1 || node.Status.VolumesInUse[0] != "previous" {
		t.Errorf("before the volume manager synced: %v, want the list left alone", node.Status.VolumesInUse)
	}
	synced = true
	if err := set(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if len(node.Status.VolumesInUse) != 1 || node.Status.VolumesInUse[0] != inUse[0] {
		t.Errorf("synced: %v, want %v", node.Status.VolumesInUse, inUse)
	}
	inUse = nil
	_ = set(context.Background(), node)
	if node.Status.VolumesInUse != nil {
		t.Errorf("no volume in use: %v, want none", node.Status.VolumesInUse)
	}
	if _, err := volumesInUse(VolumesInUseFuncs{Synced: func() bool { return true }}); err == nil {
		t.Error("a VolumesInUse setter without InUse was built")
	}
}
