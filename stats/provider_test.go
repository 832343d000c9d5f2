package stats_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/stats"
)

const gib = 1 << 30

// cgroups returns a cgroupfs-driver Manager over the host's cgroup tree,
// as the agent wires one into Options.Cgroups.
func (h *host) cgroups() *cgroupdriver.Manager {
	h.t.Helper()
	m, err := cgroupdriver.New(cgroupdriver.Options{FS: cgroupdriver.FSOptions{Root: h.cgroup, Version: h.version}})
	if err != nil {
		h.t.Fatal(err)
	}
	return m
}

func statfsOf(t *testing.T, path string) unix.Statfs_t {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func blocksOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512
}

func findContainer(t *testing.T, ps statsapi.PodStats, name string) statsapi.ContainerStats {
	t.Helper()
	for _, c := range ps.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("pod %s/%s has no container %q: %+v", ps.PodRef.Namespace, ps.PodRef.Name, name, ps.Containers)
	return statsapi.ContainerStats{}
}

func findSystemContainer(t *testing.T, n statsapi.NodeStats, name string) statsapi.ContainerStats {
	t.Helper()
	for _, c := range n.SystemContainers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no system container %q in %+v", name, n.SystemContainers)
	return statsapi.ContainerStats{}
}

func check(t *testing.T, what string, got, want any) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TestSummaryV1FromSandboxStats checks every field the eviction manager
// reads, on a cgroup v1 tree, with pod stats from ListPodSandboxStats
// (containerd 1.6 answers it).
func TestSummaryV1FromSandboxStats(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.setCgroup("/kubepods", cgroupValues{cpu: 20e9, usage: 2 * gib, inactive: gib / 2, rss: gib, limit: 6 * gib})
	sb, ids := h.runPod("default", "web", "uid-1", "cpu 250m; memory 64Mi; log hello", "app", "sidecar")
	h.write(h.rootDir, "pods/uid-1/etc-hosts", "127.0.0.1 localhost\n")
	o := h.options()
	o.Cgroups = h.cgroups()
	o.PodStatsFromCRI = true
	o.VolumeStats = func(uid types.UID) (stats.PodVolumeStats, bool) {
		if uid != "uid-1" {
			return stats.PodVolumeStats{}, false
		}
		return stats.PodVolumeStats{
			Ephemeral:  []statsapi.VolumeStats{{Name: "cache", FsStats: statsapi.FsStats{UsedBytes: ptr(1000), InodesUsed: ptr(2)}}},
			Persistent: []statsapi.VolumeStats{{Name: "data", FsStats: statsapi.FsStats{UsedBytes: ptr(5000)}, PVCRef: &statsapi.PVCReference{Name: "data", Namespace: "default"}}},
		}, true
	}
	p := h.provider(o)
	s, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Between rounds a provider keeps no read buffer: a fleet's agents
	// share a few.
	check(t, "read buffer held after the round", p.HoldsReadBuffer(), false)

	n := s.Node
	check(t, "nodeName", n.NodeName, "node-1")
	check(t, "startTime", n.StartTime.Time.Equal(bootTime), true)
	check(t, "cpu.usageCoreNanoSeconds", val(n.CPU.UsageCoreNanoSeconds), uint64(50e9))
	check(t, "cpu.usageNanoCores (one sample)", val(n.CPU.UsageNanoCores), uint64(0))
	check(t, "memory.usageBytes", val(n.Memory.UsageBytes), uint64(3*gib))
	check(t, "memory.workingSetBytes", val(n.Memory.WorkingSetBytes), uint64(2*gib))
	check(t, "memory.availableBytes", val(n.Memory.AvailableBytes), uint64(8000000*1024-2*gib))
	check(t, "memory.rssBytes", val(n.Memory.RSSBytes), uint64(gib/2))
	check(t, "memory.pageFaults", val(n.Memory.PageFaults), uint64(10))
	check(t, "memory.majorPageFaults", val(n.Memory.MajorPageFaults), uint64(1))
	if n.Network == nil || len(n.Network.Interfaces) != 2 || n.Network.Interfaces[0].Name != "eth0" || n.Network.Interfaces[1].Name != "cni0" {
		t.Fatalf("node network = %+v, want eth0 and cni0 (lo and veth left out)", n.Network)
	}
	check(t, "network default interface", n.Network.Name, "eth0")
	check(t, "network rxBytes", val(n.Network.RxBytes), uint64(1000))
	check(t, "network txErrors", val(n.Network.TxErrors), uint64(2))

	st := statfsOf(t, h.rootDir)
	check(t, "fs.capacityBytes", val(n.Fs.CapacityBytes), uint64(st.Frsize)*st.Blocks)
	check(t, "fs.inodes", val(n.Fs.Inodes), st.Files)
	if n.Fs.AvailableBytes == nil || n.Fs.UsedBytes == nil || n.Fs.InodesFree == nil || n.Fs.InodesUsed == nil {
		t.Errorf("fs = %+v, want available, used and inode counts", n.Fs)
	}
	imgSt := statfsOf(t, filepath.Join(h.dir, "images"))
	for name, fs := range map[string]*statsapi.FsStats{"imageFs": n.Runtime.ImageFs, "containerFs": n.Runtime.ContainerFs} {
		check(t, name+".usedBytes", val(fs.UsedBytes), uint64(10<<20))
		check(t, name+".inodesUsed", val(fs.InodesUsed), uint64(1))
		check(t, name+".capacityBytes", val(fs.CapacityBytes), uint64(imgSt.Frsize)*imgSt.Blocks)
		check(t, name+".time", fs.Time.Time.Equal(epoch), true)
	}
	check(t, "rlimit.maxpid", ival(n.Rlimit.MaxPID), int64(126000))
	check(t, "rlimit.curproc", ival(n.Rlimit.NumOfRunningProcesses), int64(412))

	pods := findSystemContainer(t, n, statsapi.SystemContainerPods)
	check(t, "pods.memory.workingSetBytes", val(pods.Memory.WorkingSetBytes), uint64(gib*3/2))
	check(t, "pods.memory.availableBytes", val(pods.Memory.AvailableBytes), uint64(6*gib-gib*3/2))
	check(t, "pods.cpu.usageCoreNanoSeconds", val(pods.CPU.UsageCoreNanoSeconds), uint64(20e9))
	if len(n.SystemContainers) != 1 {
		t.Errorf("system containers = %d, want only pods (no kubelet, runtime or misc cgroup configured)", len(n.SystemContainers))
	}

	if len(s.Pods) != 1 {
		t.Fatalf("%d pods, want 1", len(s.Pods))
	}
	ps := s.Pods[0]
	check(t, "podRef", ps.PodRef, statsapi.PodReference{Name: "web", Namespace: "default", UID: "uid-1"})
	check(t, "pod.memory.workingSetBytes", val(ps.Memory.WorkingSetBytes), uint64(128<<20))
	check(t, "pod.processes", val(ps.ProcessStats.ProcessCount), uint64(2))
	if ps.Network == nil {
		t.Error("pod network is nil, want the runtime's")
	}
	check(t, "containers", len(ps.Containers), 2)
	app := findContainer(t, ps, "app")
	check(t, "app.memory.workingSetBytes", val(app.Memory.WorkingSetBytes), uint64(64<<20))
	check(t, "app.cpu.usageNanoCores (runtime's, first sample)", val(app.CPU.UsageNanoCores), uint64(250e6))
	check(t, "app.rootfs.usedBytes", val(app.Rootfs.UsedBytes), uint64(32<<10))
	check(t, "app.rootfs.inodesUsed", val(app.Rootfs.InodesUsed), uint64(8))
	check(t, "app.rootfs.capacityBytes", val(app.Rootfs.CapacityBytes), uint64(imgSt.Frsize)*imgSt.Blocks)
	logFile := filepath.Join(h.logsDir, "default_web_uid-1", "app", "0.log")
	logBytes := blocksOf(t, logFile)
	if app.Logs == nil {
		t.Fatalf("app has no log stats (log %s)", logFile)
	}
	check(t, "app.logs.usedBytes", val(app.Logs.UsedBytes), logBytes)
	check(t, "app.logs.inodesUsed", val(app.Logs.InodesUsed), uint64(1))
	check(t, "app.logs.capacityBytes", val(app.Logs.CapacityBytes), uint64(st.Frsize)*st.Blocks)

	hostsBytes := blocksOf(t, filepath.Join(h.rootDir, "pods/uid-1/etc-hosts"))
	sidecarLog := blocksOf(t, filepath.Join(h.logsDir, "default_web_uid-1", "sidecar", "0.log"))
	wantEphemeral := 2*uint64(32<<10) + logBytes + sidecarLog + 1000 + hostsBytes
	check(t, "ephemeral-storage.usedBytes", val(ps.EphemeralStorage.UsedBytes), wantEphemeral)
	check(t, "ephemeral-storage.inodesUsed", val(ps.EphemeralStorage.InodesUsed), uint64(2*8+2+2+1))
	check(t, "ephemeral-storage.capacityBytes", val(ps.EphemeralStorage.CapacityBytes), uint64(st.Frsize)*st.Blocks)
	if len(ps.VolumeStats) != 2 || ps.VolumeStats[0].Name != "cache" || ps.VolumeStats[1].Name != "data" {
		t.Errorf("volume stats = %+v, want cache then data", ps.VolumeStats)
	}
	_ = sb
	_ = ids
}

func ptr(v uint64) *uint64 { return &v }

// TestSummaryV2 checks the root cgroup's emulated usage (no memory.current
// at the root of a v2 tree) and a v2 kubepods cgroup.
func TestSummaryV2(t *testing.T) {
	h := newHost(t, 2)
	h.startCRI(fakecri.Options{})
	h.setCgroup("/kubepods", cgroupValues{cpu: 7e9, usage: gib, inactive: gib / 4, rss: gib / 2, limit: 4 * gib})
	o := h.options()
	o.Cgroups = h.cgroups()
	s, err := h.provider(o).Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	// Root usage is anon + file from memory.stat: 3Gi, less 1Gi inactive.
	check(t, "memory.usageBytes", val(n.Memory.UsageBytes), uint64(3*gib))
	check(t, "memory.workingSetBytes", val(n.Memory.WorkingSetBytes), uint64(2*gib))
	check(t, "memory.availableBytes", val(n.Memory.AvailableBytes), uint64(8000000*1024-2*gib))
	check(t, "cpu.usageCoreNanoSeconds", val(n.CPU.UsageCoreNanoSeconds), uint64(50e9))
	check(t, "swap.swapUsageBytes", val(n.Swap.SwapUsageBytes), uint64(1500*1024))
	pods := findSystemContainer(t, n, statsapi.SystemContainerPods)
	check(t, "pods.memory.workingSetBytes", val(pods.Memory.WorkingSetBytes), uint64(gib*3/4))
	check(t, "pods.memory.availableBytes", val(pods.Memory.AvailableBytes), uint64(4*gib-gib*3/4))
	check(t, "pods.cpu.usageCoreNanoSeconds", val(pods.CPU.UsageCoreNanoSeconds), uint64(7e9))
}

// TestCPURatesAndCache checks usageNanoCores from two samples and that a
// summary is served from the cache for MaxAge.
func TestCPURatesAndCache(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.runPod("default", "web", "uid-1", "cpu 500m", "app")
	p := h.provider(h.options())
	ctx := context.Background()
	first, err := p.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Step(5 * time.Second)
	h.setCgroup("/", cgroupValues{cpu: 50e9 + 5e9, usage: 3 << 30, inactive: 1 << 30, rss: 1 << 29})
	again, err := p.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatal("a summary younger than MaxAge was computed again")
	}
	calls := h.cri.Calls("ListPodSandboxStats")
	h.clock.Step(5 * time.Second)
	second, err := p.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || h.cri.Calls("ListPodSandboxStats") != calls+1 {
		t.Fatal("a summary as old as MaxAge was served from the cache")
	}
	// 5 s of CPU over 10 s.
	check(t, "node usageNanoCores", val(second.Node.CPU.UsageNanoCores), uint64(5e8))
	app := findContainer(t, second.Pods[0], "app")
	// fakecri's container used 500m for 10 s: 5e9 ns.
	check(t, "app usageCoreNanoSeconds", val(app.CPU.UsageCoreNanoSeconds), uint64(5e9))
	check(t, "app usageNanoCores", val(app.CPU.UsageNanoCores), uint64(5e8))
}

// TestFreshSummary: FreshSummary computes a summary even when a cached one
// is younger than MaxAge, and Summary then serves that new one.
func TestFreshSummary(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.runPod("default", "web", "uid-1", "cpu 500m", "app")
	p := h.provider(h.options())
	ctx := context.Background()
	first, err := p.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Step(time.Second)
	fresh, err := p.FreshSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fresh == first || !fresh.Node.Memory.Time.After(first.Node.Memory.Time.Time) {
		t.Fatal("FreshSummary returned the cached summary")
	}
	if again, err := p.Summary(ctx); err != nil || again != fresh {
		t.Fatalf("Summary after FreshSummary: err %v, same summary %t; want the fresh one from the cache", err, again == fresh)
	}
}

// TestPodsFromPodCgroups checks the default with the pod cgroups known
// (cgroup v2, pod cgroups of the cgroupfs driver): pod CPU, memory,
// processes and network come from the pod cgroup and procfs, containers
// from ListContainerStats, and ListPodSandboxStats is not asked.
func TestPodsFromPodCgroups(t *testing.T) {
	h := newHost(t, 2)
	h.startCRI(fakecri.Options{})
	sb, ids := h.runPod("kube-system", "dns", "uid-2", "memory 10Mi", "dns")
	pod := "/kubepods/besteffort/poduid-2"
	h.setCgroup("/kubepods", cgroupValues{cpu: 1e9, usage: gib, rss: gib / 2})
	h.setCgroup("/kubepods/besteffort", cgroupValues{cpu: 1e9, usage: gib, rss: gib / 2})
	h.setCgroup(pod, cgroupValues{cpu: 3e9, usage: 300 << 20, inactive: 100 << 20, rss: 150 << 20, limit: 512 << 20})
	h.setCgroup(pod+"/"+sb, cgroupValues{procs: []int{100}})
	h.setCgroup(pod+"/"+ids[0], cgroupValues{procs: []int{101, 102}})
	h.write(h.proc, "101/net/dev", netDev(map[string][4]uint64{"lo": {9, 0, 9, 0}, "eth0": {700, 0, 800, 0}}))
	o := h.options()
	cg := &countingCgroups{Manager: h.cgroups()}
	o.Cgroups = cg
	p := h.provider(o)
	s, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("%d pods, want 1", len(s.Pods))
	}
	ps := s.Pods[0]
	check(t, "pod.cpu.usageCoreNanoSeconds", val(ps.CPU.UsageCoreNanoSeconds), uint64(3e9))
	check(t, "pod.memory.workingSetBytes", val(ps.Memory.WorkingSetBytes), uint64(200<<20))
	check(t, "pod.memory.availableBytes", val(ps.Memory.AvailableBytes), uint64(312<<20))
	check(t, "pod.processes (containers only)", val(ps.ProcessStats.ProcessCount), uint64(2))
	if ps.Network == nil || len(ps.Network.Interfaces) != 1 || val(ps.Network.RxBytes) != uint64(700) {
		t.Errorf("pod network = %+v, want eth0 from a process of the pod", ps.Network)
	}
	check(t, "dns.memory.workingSetBytes", val(findContainer(t, ps, "dns").Memory.WorkingSetBytes), uint64(10<<20))

	h.clock.Step(time.Minute)
	if _, err := p.Summary(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(t, "ListPodSandboxStats calls", h.cri.Calls("ListPodSandboxStats"), 0)
	check(t, "ListContainerStats calls", h.cri.Calls("ListContainerStats"), 2)
	check(t, "pod cgroup listings (kept across rounds)", cg.lists, 1)

	// A new pod has its cgroup looked up once.
	h.runPod("default", "new", "uid-3", "", "c")
	h.setCgroup("/kubepods/besteffort/poduid-3", cgroupValues{cpu: 9e9, usage: 1 << 20})
	h.clock.Step(time.Minute)
	s, err = p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	check(t, "pod cgroup listings after a new pod", cg.lists, 2)
	check(t, "new pod's cpu", val(s.Pods[0].CPU.UsageCoreNanoSeconds), uint64(9e9))
}

// countingCgroups counts the pod cgroup listings.
type countingCgroups struct {
	*cgroupdriver.Manager
	lists int
}

func (c *countingCgroups) ListPods(ctx context.Context) (map[types.UID]cgroupdriver.Name, error) {
	c.lists++
	return c.Manager.ListPods(ctx)
}

// TestSandboxStatsUnimplemented asks a runtime without
// ListPodSandboxStats once, and then only for container stats.
func TestSandboxStatsUnimplemented(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{Unimplemented: []string{"ListPodSandboxStats"}})
	h.runPod("default", "web", "uid-1", "memory 10Mi", "a")
	p := h.provider(h.options())
	for range 2 {
		s, err := p.Summary(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		check(t, "pods", len(s.Pods), 1)
		h.clock.Step(time.Minute)
	}
	check(t, "ListPodSandboxStats calls", h.cri.Calls("ListPodSandboxStats"), 1)
	check(t, "ListContainerStats calls", h.cri.Calls("ListContainerStats"), 2)
}

// TestFallbackWithoutPodCgroups sums the containers when the pod cgroups
// are unknown.
func TestFallbackWithoutPodCgroups(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{Unimplemented: []string{"ListPodSandboxStats"}})
	h.runPod("default", "web", "uid-1", "memory 10Mi", "a", "b")
	s, err := h.provider(h.options()).Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	check(t, "pod.memory.workingSetBytes", val(s.Pods[0].Memory.WorkingSetBytes), uint64(20<<20))
	if len(s.Node.SystemContainers) != 0 {
		t.Errorf("system containers = %+v, want none without Options.Cgroups", s.Node.SystemContainers)
	}
}

// TestSandboxStatsErrorFallsBackOnce uses container stats for a round in
// which ListPodSandboxStats fails (containerd fails it while a sandbox is
// torn down) and asks again the next round.
func TestSandboxStatsErrorFallsBackOnce(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.runPod("default", "web", "uid-1", "memory 10Mi", "a")
	p := h.provider(h.options())
	if err := h.cri.SetError("ListPodSandboxStats", status.Error(codes.Unknown, "failed to decode sandbox container metrics")); err != nil {
		t.Fatal(err)
	}
	s, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	check(t, "pods", len(s.Pods), 1)
	check(t, "ListContainerStats calls", h.cri.Calls("ListContainerStats"), 1)
	if err := h.cri.SetError("ListPodSandboxStats", nil); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(time.Minute)
	if _, err := p.Summary(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(t, "ListPodSandboxStats calls", h.cri.Calls("ListPodSandboxStats"), 2)
	check(t, "ListContainerStats calls", h.cri.Calls("ListContainerStats"), 1)
}

// TestCPUAndMemory checks the cheaper variant skips the filesystems and is
// served by a fresh full summary.
func TestCPUAndMemory(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.runPod("default", "web", "uid-1", "memory 10Mi", "a")
	p := h.provider(h.options())
	ctx := context.Background()
	s, err := p.CPUAndMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "ImageFsInfo calls", h.cri.Calls("ImageFsInfo"), 0)
	if s.Node.Fs != nil || s.Node.Runtime != nil || s.Node.Network != nil || s.Pods[0].EphemeralStorage != nil || s.Pods[0].Containers[0].Rootfs != nil {
		t.Errorf("CPU and memory summary has filesystem or network stats: %+v", s)
	}
	check(t, "node workingSet", val(s.Node.Memory.WorkingSetBytes), uint64(2*gib))
	check(t, "container workingSet", val(s.Pods[0].Containers[0].Memory.WorkingSetBytes), uint64(10<<20))
	full, err := p.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.CPUAndMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again != full {
		t.Error("CPUAndMemory did not serve the fresh full summary")
	}
}

// TestConcurrentCallersShareOneRound checks concurrent callers wait for
// one computation.
func TestConcurrentCallersShareOneRound(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.runPod("default", "web", "uid-1", "", "a")
	p := h.provider(h.options())
	var wg sync.WaitGroup
	results := make([]*statsapi.Summary, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := p.Summary(context.Background())
			if err != nil {
				t.Error(err)
			}
			results[i] = s
		}()
	}
	wg.Wait()
	for _, s := range results[1:] {
		if s != results[0] {
			t.Fatal("concurrent callers got different summaries")
		}
	}
	check(t, "ListPodSandbox calls", h.cri.Calls("ListPodSandbox"), 1)
}

// TestSummaryErrors checks that what the summary cannot do without fails
// it, naming what failed, and that a failure is not cached.
func TestSummaryErrors(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	p := h.provider(h.options())
	ctx := context.Background()
	if _, err := p.Summary(ctx); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(time.Minute)
	if err := h.cri.SetError("ImageFsInfo", status.Error(codes.Unavailable, "disk gone")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Summary(ctx); err == nil || status.Code(errors.Unwrap(err)) != codes.Unavailable {
		t.Fatalf("summary with ImageFsInfo failing: %v, want the Unavailable error", err)
	}
	if err := h.cri.SetError("ImageFsInfo", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Summary(ctx); err != nil {
		t.Fatalf("summary after ImageFsInfo recovered: %v", err)
	}

	h.clock.Step(time.Minute)
	if err := os.Remove(filepath.Join(h.cgroup, "memory", "memory.stat")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CPUAndMemory(ctx); err == nil {
		t.Fatal("summary without the root cgroup's memory.stat succeeded")
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	h.setCgroup("/", cgroupValues{cpu: 1, usage: 1})
	if _, err := p.Summary(cancelled); err == nil {
		t.Fatal("summary with a cancelled context succeeded")
	}
}

// TestTerminatedSandboxesAndContainers checks a recreated pod is reported
// once, from its ready sandbox, and exited containers are left out.
func TestTerminatedSandboxesAndContainers(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	ctx := context.Background()
	rs := h.client.RuntimeService()
	old, oldIDs := h.runPod("default", "web", "uid-old", "", "a")
	if err := rs.StopContainer(ctx, oldIDs[0], 0); err != nil {
		t.Fatal(err)
	}
	if err := rs.StopPodSandbox(ctx, old); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(time.Second)
	_, ids := h.runPod("default", "web", "uid-new", "exit 0", "a", "b")
	_ = ids
	h.clock.Step(time.Second) // the exit script runs
	s, err := h.provider(h.options()).Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 || s.Pods[0].PodRef.UID != "uid-new" {
		t.Fatalf("pods = %+v, want only uid-new", s.Pods)
	}
	if len(s.Pods[0].Containers) != 0 {
		t.Errorf("containers = %+v, want none running", s.Pods[0].Containers)
	}
}

// TestNoPodsOneCall: on a node with no pod sandbox a round lists the
// sandboxes and asks the runtime nothing more about pods (with the pod
// cgroups or without), and still reports an empty, non-nil pod list
// ("pods": [] on /stats/summary); once a pod runs, its stats are there.
func TestNoPodsOneCall(t *testing.T) {
	for _, withCgroups := range []bool{false, true} {
		h := newHost(t, 1)
		h.startCRI(fakecri.Options{})
		o := h.options()
		o.MaxAge = -1
		if withCgroups {
			o.Cgroups = h.cgroups()
		}
		p := h.provider(o)
		ctx := context.Background()
		s, err := p.Summary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Pods == nil || len(s.Pods) != 0 {
			t.Errorf("cgroups %t: pods = %#v, want an empty list", withCgroups, s.Pods)
		}
		for method, want := range map[string]int{"ListPodSandbox": 1, "ListContainers": 0, "ListPodSandboxStats": 0, "ListContainerStats": 0} {
			if got := h.cri.Calls(method); got != want {
				t.Errorf("cgroups %t: %d %s calls for a node with no pod, want %d", withCgroups, got, method, want)
			}
		}
		h.runPod("default", "web", "uid-1", "", "app")
		if s, err = p.Summary(ctx); err != nil {
			t.Fatal(err)
		}
		if len(s.Pods) != 1 || len(s.Pods[0].Containers) != 1 {
			t.Errorf("cgroups %t: pods = %+v, want web with its container", withCgroups, s.Pods)
		}
	}
}

// TestHasPodsFalseNoCall: while Options.HasPods says the runtime holds no
// pod, a summary asks the runtime nothing about pods (ImageFsInfo only) and
// has none; once it says it may hold one, the pods are listed.
func TestHasPodsFalseNoCall(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.runPod("default", "web", "uid-1", "", "app")
	hasPods := false
	o := h.options()
	o.MaxAge = -1
	o.HasPods = func() bool { return hasPods }
	p := h.provider(o)
	ctx := context.Background()
	// The first call also connects (the image service's handshake asks
	// ImageFsInfo): count from the second.
	if _, err := p.Summary(ctx); err != nil {
		t.Fatal(err)
	}
	methods := []string{"ListPodSandbox", "ListContainers", "ListPodSandboxStats", "ImageFsInfo"}
	before := map[string]int{}
	for _, m := range methods {
		before[m] = h.cri.Calls(m)
	}
	s, err := p.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pods == nil || len(s.Pods) != 0 {
		t.Errorf("pods = %#v while HasPods says none, want an empty list", s.Pods)
	}
	for method, want := range map[string]int{"ListPodSandbox": 0, "ListContainers": 0, "ListPodSandboxStats": 0, "ImageFsInfo": 1} {
		if got := h.cri.Calls(method) - before[method]; got != want {
			t.Errorf("%d %s calls while HasPods says none, want %d", got, method, want)
		}
	}
	hasPods = true
	if s, err = p.Summary(ctx); err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 || s.Pods[0].PodRef.Name != "web" {
		t.Errorf("pods = %+v once HasPods says it may hold one, want web", s.Pods)
	}
}

func TestNewValidates(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	for name, mutate := range map[string]func(*stats.Options){
		"no runtime":         func(o *stats.Options) { o.Runtime = nil },
		"no images":          func(o *stats.Options) { o.Images = nil },
		"bad cgroup version": func(o *stats.Options) { o.CgroupVersion = 3 },
		"relative cgroup":    func(o *stats.Options) { o.SystemCgroups.Kubelet = "system.slice" },
	} {
		o := h.options()
		mutate(&o)
		if _, err := stats.New(o); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestSystemContainers checks the kubelet, runtime and misc containers and
// their start times.
func TestSystemContainers(t *testing.T) {
	h := newHost(t, 1)
	h.startCRI(fakecri.Options{})
	h.setCgroup("/system.slice/kubelet.service", cgroupValues{cpu: 1e9, usage: 100 << 20, rss: 50 << 20})
	h.setCgroup("/system.slice/containerd.service", cgroupValues{cpu: 2e9, usage: 200 << 20, rss: 100 << 20})
	o := h.options()
	o.SystemCgroups = stats.SystemCgroups{Kubelet: "/system.slice/kubelet.service", Runtime: "/system.slice/containerd.service", Misc: "/system.slice/missing"}
	s, err := h.provider(o).Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Node.SystemContainers) != 2 {
		t.Fatalf("system containers = %+v, want kubelet and runtime (misc's cgroup is missing)", s.Node.SystemContainers)
	}
	kubelet := findSystemContainer(t, s.Node, statsapi.SystemContainerKubelet)
	check(t, "kubelet.startTime", kubelet.StartTime, metav1.NewTime(epoch))
	check(t, "kubelet.memory.availableBytes", kubelet.Memory.AvailableBytes, (*uint64)(nil))
	runtimeC := findSystemContainer(t, s.Node, statsapi.SystemContainerRuntime)
	check(t, "runtime.cpu", val(runtimeC.CPU.UsageCoreNanoSeconds), uint64(2e9))
	if runtimeC.StartTime.IsZero() || runtimeC.Rootfs != nil || runtimeC.Logs != nil {
		t.Errorf("runtime container = %+v, want a start time and no filesystems", runtimeC)
	}
}
