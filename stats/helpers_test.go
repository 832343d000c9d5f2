package stats_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/stats"
)

// epoch is the fake clock's start; bootTime is the fake host's btime.
var (
	epoch    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	bootTime = time.Unix(1772300000, 0)
)

// host is a fake node: procfs, sysfs and a cgroup tree in a temporary
// directory, a fakecri runtime on the same fake clock, and the agent's
// directories.
type host struct {
	t        testing.TB
	dir      string
	proc     string
	sys      string
	cgroup   string
	rootDir  string
	logsDir  string
	version  int
	clock    *clocktesting.FakeClock
	cri      *fakecri.Server
	endpoint string
	client   *runtime.Client
}

func newHost(t testing.TB, version int) *host {
	t.Helper()
	dir := t.TempDir()
	h := &host{
		t: t, dir: dir, version: version,
		proc:    filepath.Join(dir, "proc"),
		sys:     filepath.Join(dir, "sys"),
		cgroup:  filepath.Join(dir, "cgroup"),
		rootDir: filepath.Join(dir, "root"),
		logsDir: filepath.Join(dir, "logs"),
		clock:   clocktesting.NewFakeClock(epoch),
	}
	h.write(h.proc, "meminfo", "MemTotal:        8000000 kB\nMemFree:         1000 kB\nSwapTotal:       2000 kB\nSwapFree:        500 kB\n")
	h.write(h.proc, "stat", fmt.Sprintf("cpu  1 2 3 4\nbtime %d\nprocesses 5\n", bootTime.Unix()))
	h.write(h.proc, "loadavg", "0.10 0.20 0.30 3/412 12345\n")
	h.write(h.proc, "sys/kernel/pid_max", "4194304\n")
	h.write(h.proc, "sys/kernel/threads-max", "126000\n")
	h.write(h.proc, "sys/kernel/random/boot_id", "b00t-1d\n")
	h.write(h.proc, "1/net/dev", netDev(map[string][4]uint64{"lo": {1, 0, 1, 0}, "eth0": {1000, 1, 2000, 2}, "veth12": {5, 0, 5, 0}, "cni0": {300, 0, 400, 0}}))
	h.write(h.sys, "devices/system/cpu/online", "0-3\n")
	if err := os.MkdirAll(h.rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	h.write(h.proc, "self/mountinfo", fmt.Sprintf("22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n30 22 8:17 / %s rw - ext4 /dev/sdb1 rw\n", h.dir))
	switch version {
	case 1:
		for _, d := range []string{"cpu", "cpuacct", "memory", "pids"} {
			if err := os.MkdirAll(filepath.Join(h.cgroup, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	case 2:
		h.write(h.cgroup, "cgroup.controllers", "cpu memory pids\n")
	}
	h.setCgroup("/", cgroupValues{cpu: 50e9, usage: 3 << 30, inactive: 1 << 30, rss: 1 << 29, pgfault: 10, pgmajfault: 1})
	return h
}

// write writes content to dir/name, creating directories.
func (h *host) write(dir, name, content string) {
	h.t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// netDev formats a /proc/<pid>/net/dev with the interfaces' rx bytes, rx
// errors, tx bytes and tx errors.
func netDev(ifaces map[string][4]uint64) string {
	var b strings.Builder
	b.WriteString("Inter-|   Receive                                                |  Transmit\n")
	b.WriteString(" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n")
	for _, name := range []string{"lo", "eth0", "veth12", "cni0", "eth1"} {
		v, ok := ifaces[name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "%6s: %d 10 %d 0 0 0 0 0 %d 20 %d 0 0 0 0 0\n", name, v[0], v[1], v[2], v[3])
	}
	return b.String()
}

// cgroupValues are what setCgroup writes; limit 0 means unlimited.
type cgroupValues struct {
	cpu                  uint64 // ns
	usage, inactive, rss uint64
	limit                uint64
	pgfault, pgmajfault  uint64
	procs                []int
}

// setCgroup writes a cgroup's statistics files in the fake tree, in the
// layout of the host's cgroup version.
func (h *host) setCgroup(literal string, v cgroupValues) {
	h.t.Helper()
	procs := ""
	for _, p := range v.procs {
		procs += fmt.Sprintf("%d\n", p)
	}
	if h.version == 2 {
		dir := filepath.Join(h.cgroup, literal)
		h.write(dir, "cpu.stat", fmt.Sprintf("usage_usec %d\nuser_usec 1\nsystem_usec 1\n", v.cpu/1000))
		h.write(dir, "memory.stat", fmt.Sprintf("anon %d\nfile %d\ninactive_file %d\npgfault %d\npgmajfault %d\n", v.rss, v.usage-v.rss, v.inactive, v.pgfault, v.pgmajfault))
		h.write(dir, "cgroup.procs", procs)
		if literal != "/" {
			h.write(dir, "memory.current", fmt.Sprint(v.usage))
			limit := "max"
			if v.limit != 0 {
				limit = fmt.Sprint(v.limit)
			}
			h.write(dir, "memory.max", limit)
		}
		return
	}
	h.write(filepath.Join(h.cgroup, "cpuacct", literal), "cpuacct.usage", fmt.Sprint(v.cpu))
	h.write(filepath.Join(h.cgroup, "cpu", literal), "cgroup.procs", procs)
	mem := filepath.Join(h.cgroup, "memory", literal)
	h.write(mem, "memory.usage_in_bytes", fmt.Sprint(v.usage))
	limit := uint64(9223372036854771712)
	if v.limit != 0 {
		limit = v.limit
	}
	h.write(mem, "memory.limit_in_bytes", fmt.Sprint(limit))
	h.write(mem, "memory.stat", fmt.Sprintf("cache 1\nrss 2\nrss_huge 0\npgfault %d\npgmajfault %d\ninactive_file 3\ntotal_cache %d\ntotal_rss %d\ntotal_inactive_file %d\n",
		v.pgfault, v.pgmajfault, v.usage-v.rss, v.rss, v.inactive))
}

// startCRI starts fakecri on the host's clock, with its image filesystem
// in the host's directory, and connects a runtime client to it.
func (h *host) startCRI(opts fakecri.Options) {
	h.t.Helper()
	opts.Clock = h.clock
	if opts.ImageFsMountpoint == "" {
		opts.ImageFsMountpoint = filepath.Join(h.dir, "images")
		if err := os.MkdirAll(opts.ImageFsMountpoint, 0o755); err != nil {
			h.t.Fatal(err)
		}
	}
	img, err := fakecri.NewImage("registry.k8s.io/app:1.0", 10<<20)
	if err != nil {
		h.t.Fatal(err)
	}
	opts.Images = append(opts.Images, img)
	h.cri = fakecri.New(opts)
	endpoint, stop, err := h.cri.Start(filepath.Join(shortTempDir(h.t), "cri.sock"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(stop)
	h.endpoint = endpoint
	h.client, err = runtime.New(runtime.Options{Endpoint: endpoint})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = h.client.Close() })
}

// shortTempDir returns a temporary directory with a path short enough for
// a unix socket.
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "stats")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// runPod runs a pod with the named containers on fakecri and returns its
// sandbox ID and its containers' IDs. behavior scripts every container.
func (h *host) runPod(namespace, name, uid, behavior string, containers ...string) (string, []string) {
	h.t.Helper()
	ctx := context.Background()
	rs := h.client.RuntimeService()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		LogDirectory: filepath.Join(h.logsDir, namespace+"_"+name+"_"+uid),
		Annotations:  map[string]string{fakecri.BehaviorAnnotation: behavior},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	sb, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, c := range containers {
		if err := os.MkdirAll(filepath.Join(cfg.LogDirectory, c), 0o755); err != nil {
			h.t.Fatal(err)
		}
		id, err := rs.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: c},
			Image:    &runtimeapi.ImageSpec{Image: "registry.k8s.io/app:1.0"},
			LogPath:  c + "/0.log",
		}, cfg)
		if err != nil {
			h.t.Fatal(err)
		}
		if err := rs.StartContainer(ctx, id); err != nil {
			h.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return sb, ids
}

// options returns provider options for the host.
func (h *host) options() stats.Options {
	return stats.Options{
		NodeName:      "node-1",
		RootDir:       h.rootDir,
		PodLogsDir:    h.logsDir,
		ProcRoot:      h.proc,
		SysRoot:       h.sys,
		CgroupRoot:    h.cgroup,
		CgroupVersion: h.version,
		Runtime:       h.client.RuntimeService(),
		Images:        h.client.ImageService(),
		Clock:         h.clock,
	}
}

func (h *host) provider(o stats.Options) *stats.Provider {
	h.t.Helper()
	p, err := stats.New(o)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func val(p *uint64) any {
	if p == nil {
		return nil
	}
	return *p
}

func ival(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestMain keeps the runtime client's klog lines out of the test and
// benchmark output.
func TestMain(m *testing.M) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}
