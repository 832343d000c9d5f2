package stats_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/machine"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/stats"
)

type fixedSummary struct {
	s   *statsapi.Summary
	err error
}

func (f fixedSummary) CPUAndMemory(context.Context) (*statsapi.Summary, error) { return f.s, f.err }

func TestResourceMetricsCollector(t *testing.T) {
	t0 := metav1.NewTime(time.UnixMilli(1772366400000))
	t1 := metav1.NewTime(time.UnixMilli(1772366401000))
	s := &statsapi.Summary{
		Node: statsapi.NodeStats{
			CPU:    &statsapi.CPUStats{Time: t0, UsageCoreNanoSeconds: ptr(50e9)},
			Memory: &statsapi.MemoryStats{Time: t0, WorkingSetBytes: ptr(2 << 30)},
			Swap:   &statsapi.SwapStats{Time: t0, SwapUsageBytes: ptr(1024)},
		},
		Pods: []statsapi.PodStats{{
			PodRef: statsapi.PodReference{Name: "web", Namespace: "default", UID: "uid-1"},
			CPU:    &statsapi.CPUStats{Time: t1, UsageCoreNanoSeconds: ptr(2.5e9)},
			Memory: &statsapi.MemoryStats{Time: t1, WorkingSetBytes: ptr(128 << 20)},
			Containers: []statsapi.ContainerStats{{
				Name:      "app",
				StartTime: metav1.NewTime(time.Unix(1772366000, 500e6)),
				CPU:       &statsapi.CPUStats{Time: t1, UsageCoreNanoSeconds: ptr(1.5e9)},
				Memory:    &statsapi.MemoryStats{Time: t1, WorkingSetBytes: ptr(64 << 20)},
				Swap:      &statsapi.SwapStats{Time: t1, SwapUsageBytes: ptr(0), SwapAvailableBytes: ptr(0)},
			}},
		}},
	}
	const want = `
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 1.5 1772366401000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 6.7108864e+07 1772366401000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="default",pod="web"} 1.7723660005e+09
# HELP container_swap_limit_bytes [ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems
# TYPE container_swap_limit_bytes gauge
container_swap_limit_bytes{container="app",namespace="default",pod="web"} 0 1772366401000
# HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems
# TYPE container_swap_usage_bytes gauge
container_swap_usage_bytes{container="app",namespace="default",pod="web"} 0 1772366401000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 50 1772366400000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 2.147483648e+09 1772366400000
# HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
# TYPE node_swap_usage_bytes gauge
node_swap_usage_bytes 1024 1772366400000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="web"} 2.5 1772366401000
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="default",pod="web"} 1.34217728e+08 1772366401000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`
	if err := testutil.CollectAndCompare(stats.ResourceMetricsCollector(fixedSummary{s: s}, logr.Discard()), strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	const wantErr = `
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 1
`
	if err := testutil.CollectAndCompare(stats.ResourceMetricsCollector(fixedSummary{err: errors.New("no runtime")}, logr.Discard()), strings.NewReader(wantErr)); err != nil {
		t.Error(err)
	}
}

// gather collects c and returns every sample by name and labels, as
// `name{k="v",...}`, sorted label pairs.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(pairs)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			out[mf.GetName()+"{"+strings.Join(pairs, ",")+"}"] = v
		}
	}
	return out
}

// TestCadvisorCollector checks the series, with the pods read from their
// cgroups (the default) and from the runtime's pod sandbox stats (the
// collector then lists the pod cgroups to label the rows).
func TestCadvisorCollector(t *testing.T) {
	t.Run("PodCgroups", func(t *testing.T) { testCadvisorCollector(t, false, 100<<20) })
	t.Run("SandboxStats", func(t *testing.T) { testCadvisorCollector(t, true, 64<<20) })
}

func testCadvisorCollector(t *testing.T, fromCRI bool, podWorkingSet float64) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.setCgroup("/kubepods", cgroupValues{cpu: 20e9, usage: 2 * gib, inactive: gib / 2, rss: gib, limit: 6 * gib})
	sb, ids := h.runPod("default", "web", "uid-1", "cpu 250m; memory 64Mi", "app")
	pod := "/kubepods/besteffort/poduid-1"
	h.setCgroup(pod, cgroupValues{cpu: 3e9, usage: 100 << 20, rss: 50 << 20})
	h.setCgroup(pod+"/"+sb, cgroupValues{procs: []int{100}})
	h.setCgroup(pod+"/"+ids[0], cgroupValues{procs: []int{101}})
	o := h.options()
	o.Cgroups = h.cgroups()
	o.PodStatsFromCRI = fromCRI
	p := h.provider(o)
	h.clock.Step(10 * time.Second)

	host := func() (*machine.Info, error) {
		return &machine.Info{BootID: "b00t-1d", NumCores: 4, MemoryCapacity: 8000000 * 1024, SwapCapacity: 2000 * 1024}, nil
	}
	got := gather(t, stats.CadvisorCollector(p, stats.CadvisorOptions{Machine: host}))
	// row returns a sample key with cAdvisor's labels and extra ones.
	row := func(container, id, image, name, namespace, pod string) func(metric string, extra ...string) string {
		return func(metric string, extra ...string) string {
			pairs := append([]string{
				fmt.Sprintf("container=%q", container), fmt.Sprintf("id=%q", id), fmt.Sprintf("image=%q", image),
				fmt.Sprintf("name=%q", name), fmt.Sprintf("namespace=%q", namespace), fmt.Sprintf("pod=%q", pod),
			}, extra...)
			sort.Strings(pairs)
			return metric + "{" + strings.Join(pairs, ",") + "}"
		}
	}
	root := row("", "/", "", "", "", "")
	machine := `{boot_id="b00t-1d",machine_id="",system_uuid=""}`
	app := row("app", pod+"/"+ids[0], "registry.k8s.io/app:1.0", ids[0], "default", "web")
	for key, want := range map[string]float64{
		"machine_cpu_cores" + machine:                                                4,
		"machine_memory_bytes" + machine:                                             8000000 * 1024,
		"machine_swap_bytes" + machine:                                               2000 * 1024,
		"container_scrape_error{}":                                                   0,
		root("container_cpu_usage_seconds_total", `cpu="total"`):                     50,
		root("container_memory_working_set_bytes"):                                   2 * gib,
		root("container_memory_rss"):                                                 gib / 2,
		root("container_memory_usage_bytes"):                                         3 * gib,
		root("container_network_receive_bytes_total", `interface="eth0"`):            1000,
		root("container_network_transmit_bytes_total", `interface="cni0"`):           400,
		root("container_start_time_seconds"):                                         float64(bootTime.Unix()),
		row("", "/kubepods", "", "", "", "")("container_memory_working_set_bytes"):   gib * 3 / 2,
		row("", pod, "", "", "default", "web")("container_memory_working_set_bytes"): podWorkingSet,
		app("container_cpu_usage_seconds_total", `cpu="total"`):                      2.5,
		app("container_memory_working_set_bytes"):                                    64 << 20,
		app("container_last_seen"):                                                   float64(epoch.Add(10 * time.Second).Unix()),
	} {
		v, ok := got[key]
		if !ok {
			t.Errorf("no sample %s", key)
			continue
		}
		if v != want {
			t.Errorf("%s = %v, want %v", key, v, want)
		}
	}
	if _, ok := got[root("container_fs_usage_bytes", `device="/dev/sdb1"`)]; !ok {
		t.Errorf("no nodefs usage on the root container's device /dev/sdb1: %v", keys(got, "container_fs_usage_bytes"))
	}
	for k := range got {
		if strings.HasPrefix(k, "container_network_") && strings.Contains(k, `container="app"`) {
			t.Errorf("network sample on a container row (cAdvisor reports it on the pod's): %s", k)
		}
		if strings.HasPrefix(k, "container_fs_") && !strings.Contains(k, `id="/"`) {
			t.Errorf("filesystem sample outside the root row: %s", k)
		}
	}
}

func keys(m map[string]float64, prefix string) []string {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func TestCadvisorCollectorMachineAndError(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	p := h.provider(h.options())
	if err := h.cri.SetError("ListPodSandbox", errors.New("runtime down")); err != nil {
		t.Fatal(err)
	}
	got := gather(t, stats.CadvisorCollector(p, stats.CadvisorOptions{Machine: func() (*machine.Info, error) {
		return &machine.Info{MachineID: "m", SystemUUID: "u", BootID: "b", NumCores: 2, MemoryCapacity: 1 << 30}, nil
	}}))
	want := map[string]float64{
		"container_scrape_error{}":                                         1,
		`machine_cpu_cores{boot_id="b",machine_id="m",system_uuid="u"}`:    2,
		`machine_memory_bytes{boot_id="b",machine_id="m",system_uuid="u"}`: 1 << 30,
		`machine_swap_bytes{boot_id="b",machine_id="m",system_uuid="u"}`:   0,
	}
	if len(got) != len(want) {
		t.Errorf("samples = %v, want only %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// Without Machine the collector reads no host facts of its own: no
	// machine_* series.
	for k := range gather(t, stats.CadvisorCollector(p, stats.CadvisorOptions{})) {
		if strings.HasPrefix(k, "machine_") {
			t.Errorf("%s without Options.Machine", k)
		}
	}
}

// A failed collection's error goes to the node's logger, which names the
// node, not to klog's global one.
func TestCollectorsLogOnTheNodesLogger(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 2}).WithValues("node", "node-a")
	failing := errors.New("runtime down")
	testutil.CollectAndCount(stats.ResourceMetricsCollector(fixedSummary{err: failing}, logger))
	testutil.CollectAndCount(stats.VolumeStatsCollector(fullSummary{err: failing}, logger))
	if len(lines) != 2 {
		t.Fatalf("logged %q, want the two collectors' errors", lines)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"node"="node-a"`) || !strings.Contains(l, "runtime down") {
			t.Errorf("line %s: want the node's name and the error", l)
		}
	}
}
