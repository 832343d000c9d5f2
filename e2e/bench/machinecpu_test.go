package bench

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/e2e/cluster"
)

func TestParseProcStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	data := []byte("cpu  100 50 30 900 20 4 6 2 7 0\ncpu0 50 25 15 450 10 2 3 1 7 0\ncpu1 50 25 15 450 10 2 3 1 0 0\nintr 1 2 3\nctxt 5\n")
	cpus, busy, interrupts, niced, err := parseProcStat(data)
	if err != nil {
		t.Fatal(err)
	}
	// Busy leaves idle and iowait out; guest is inside user already.
	if cpus != 2 || busy != 1920*time.Millisecond || interrupts != 100*time.Millisecond || niced != 500*time.Millisecond {
		t.Errorf("parseProcStat = %d CPUs, busy %s, interrupts %s, niced %s; want 2, 1.92s, 100ms, 500ms", cpus, busy, interrupts, niced)
	}
	for _, bad := range []string{"", "cpu  1 2 3\ncpu0 1 2 3\n", "cpu  1 2 3 4 5 6 7 x\ncpu0 1\n", "cpu  1 2 3 4 5 6 7 8\n"} {
		if _, _, _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

func TestParseProcCgroup(t *testing.T) {
	v1 := "9:name=systemd:/\n3:cpu,cpuacct:/nb-1-containerd\n0::/\n"
	if got, err := parseProcCgroup([]byte(v1)); err != nil || got != "/nb-1-containerd" {
		t.Errorf("v1: %q, %v; want the cpuacct hierarchy's /nb-1-containerd", got, err)
	}
	if got, err := parseProcCgroup([]byte("0::/system.slice/x\n")); err != nil || got != "/system.slice/x" {
		t.Errorf("v2: %q, %v", got, err)
	}
	if _, err := parseProcCgroup([]byte("4:memory:/a\n")); err == nil {
		t.Error("no cpuacct nor v2 line: no error")
	}
}

func TestMachineCPUSplitsTheBusyTime(t *testing.T) {
	at := time.Now()
	before := cpuSample{at: at, cpus: 2, busy: 10 * time.Second, interrupts: time.Second, niced: time.Second, agent: time.Second, runtime: 2 * time.Second,
		pods: 0, controlPlane: 3 * time.Second, self: time.Second, calls: map[string]float64{"RunPodSandbox": 5, "Version": 2}}
	after := cpuSample{at: at.Add(5 * time.Second), cpus: 2, busy: 19 * time.Second, interrupts: 1200 * time.Millisecond, niced: 1300 * time.Millisecond, agent: 1500 * time.Millisecond,
		runtime: 6 * time.Second, pods: time.Second, controlPlane: 4 * time.Second, self: 1100 * time.Millisecond,
		calls: map[string]float64{"RunPodSandbox": 35, "Version": 2, "ContainerStatus": 30}}
	m := machineCPU(before, after)
	want := MachineCPU{Window: 5 * time.Second, CPUs: 2, Busy: 9 * time.Second, Agent: 500 * time.Millisecond, Runtime: 4 * time.Second,
		Pods: time.Second, ControlPlane: time.Second, Bench: 100 * time.Millisecond, Interrupts: 200 * time.Millisecond,
		Niced: 300 * time.Millisecond, Rest: 2400 * time.Millisecond}
	calls := m.RuntimeCalls
	if got := *m; !reflect.DeepEqual(withoutCalls(got), want) {
		t.Errorf("machineCPU = %+v, want %+v", got, want)
	}
	if len(calls) != 2 || calls["RunPodSandbox"] != 30 || calls["ContainerStatus"] != 30 {
		t.Errorf("RuntimeCalls = %v; want RunPodSandbox 30, ContainerStatus 30 (Version unchanged: left out)", calls)
	}
	if got := m.RuntimeCallTotal(); got != 60 {
		t.Errorf("RuntimeCallTotal = %v, want 60", got)
	}
	if got := m.FormatRuntimeCalls(); got != "ContainerStatus 30, RunPodSandbox 30" {
		t.Errorf("FormatRuntimeCalls = %q", got)
	}
	if got, want := m.String(), "9.00 CPU-s busy (90 % of 2 CPUs × 5s): agent 0.50, runtime 4.00, pods 1.00, control plane 1.00, nodebench 0.10, rest 2.40 (interrupts 0.20, niced 0.30); CRI calls 60: ContainerStatus 30, RunPodSandbox 30"; got != want {
		t.Errorf("String = %q\nwant       %q", got, want)
	}
	if u := m.Utilization(); math.Abs(u-0.9) > 1e-9 {
		t.Errorf("Utilization = %v, want 0.9 (9 CPU-s of 2 CPUs × 5 s)", u)
	}
	if u := (&MachineCPU{}).Utilization(); u != 0 {
		t.Errorf("an empty window's Utilization = %v, want 0", u)
	}
}

func TestCRICallsCountsOnlyTheCRI(t *testing.T) {
	m, err := cluster.ParseMetrics(strings.NewReader(`# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_code="OK",grpc_method="RunPodSandbox",grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 30
grpc_server_handled_total{grpc_code="Unknown",grpc_method="RunPodSandbox",grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 1
grpc_server_handled_total{grpc_code="OK",grpc_method="ImageStatus",grpc_service="runtime.v1.ImageService",grpc_type="unary"} 4
grpc_server_handled_total{grpc_code="OK",grpc_method="Version",grpc_service="containerd.services.version.v1.Version",grpc_type="unary"} 9
`))
	if err != nil {
		t.Fatal(err)
	}
	calls := criCalls(m)
	if len(calls) != 2 || calls["RunPodSandbox"] != 31 || calls["ImageStatus"] != 4 {
		t.Errorf("criCalls = %v; want RunPodSandbox 31 (every code), ImageStatus 4, and containerd's own services left out", calls)
	}
	if calls := criCalls(cluster.Metrics{}); len(calls) != 0 {
		t.Errorf("no family: %v", calls)
	}
}

func withoutCalls(m MachineCPU) MachineCPU {
	m.RuntimeCalls = nil
	return m
}
