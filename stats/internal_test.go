package stats

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCPURates(t *testing.T) {
	var c cpuRates
	t0 := time.Unix(1000, 0)
	if _, ok := c.update("a", t0, 1e9); ok {
		t.Fatal("rate from one sample")
	}
	if r, ok := c.update("a", t0.Add(10*time.Second), 6e9); !ok || r != 5e8 {
		t.Fatalf("rate = %d %v, want 5e8", r, ok)
	}
	// Too soon: the last rate, and the base is kept.
	if r, ok := c.update("a", t0.Add(10*time.Second+100*time.Millisecond), 6e9+1e9); !ok || r != 5e8 {
		t.Fatalf("rate 100ms later = %d %v, want the last rate 5e8", r, ok)
	}
	if r, ok := c.update("a", t0.Add(20*time.Second), 8e9); !ok || r != 2e8 {
		t.Fatalf("rate = %d %v, want 2e8 over the 10s since the last base", r, ok)
	}
	// A counter going backwards starts over.
	if _, ok := c.update("a", t0.Add(30*time.Second), 1); ok {
		t.Fatal("rate across a counter reset")
	}
	c.update("b", t0, 1)
	c.prune(t0.Add(rateRetention + 31*time.Second))
	if len(c.series) != 0 {
		t.Fatalf("series after prune = %v, want none", c.series)
	}
}

// TestRatesOfGoneContainersArePrunedAtOnce: a round that does not sample a
// pod's or container's series (the runtime no longer lists it) drops it;
// a cgroup's series stays until rateRetention.
func TestRatesOfGoneContainersArePrunedAtOnce(t *testing.T) {
	var c cpuRates
	t0 := time.Unix(1000, 0)
	c.begin()
	for _, k := range []string{"pod:a", "container:b", "container:c", cgroupSeries + "/kubepods"} {
		c.update(k, t0, 1e9)
	}
	c.prune(t0)
	c.begin()
	c.update("container:c", t0.Add(10*time.Second), 2e9)
	c.prune(t0.Add(10 * time.Second))
	var keys []string
	for k := range c.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{cgroupSeries + "/kubepods", "container:c"}; !slices.Equal(keys, want) {
		t.Fatalf("series after a round without pod:a and container:b = %v, want %v", keys, want)
	}
}

func TestReadNetDev(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "dev")
	writeFile(t, p, `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0
  ens3:123456789 2 3 4 0 0 0 0 987654321 5 6 7 0 0 0 0
docker0: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0
`)
	var r reader
	ns, err := r.readNetDev(p, false, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Interfaces) != 1 || ns.Interfaces[0].Name != "ens3" || *ns.Interfaces[0].RxBytes != 123456789 ||
		*ns.Interfaces[0].RxErrors != 3 || *ns.Interfaces[0].TxBytes != 987654321 || *ns.Interfaces[0].TxErrors != 6 {
		t.Fatalf("interfaces = %+v", ns.Interfaces)
	}
	if ns.Name != "" {
		t.Errorf("default interface %q, want none without eth0 (as the kubelet)", ns.Name)
	}
	writeFile(t, p, "h\nh\neth0: 1 2 3\n")
	if _, err := r.readNetDev(p, false, time.Unix(1, 0)); err == nil {
		t.Error("a truncated line parsed")
	}
}

func TestReadRlimitAndMemInfo(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sys/kernel/pid_max"), "32768\n")
	writeFile(t, filepath.Join(dir, "sys/kernel/threads-max"), "60000\n")
	writeFile(t, filepath.Join(dir, "loadavg"), "1.00 0.50 0.25 7/900 4242\n")
	var r reader
	maxPID, tasks := r.readRlimit(dir)
	if maxPID == nil || *maxPID != 32768 || tasks == nil || *tasks != 900 {
		t.Fatalf("rlimit = %v %v, want 32768 900", maxPID, tasks)
	}
	writeFile(t, filepath.Join(dir, "meminfo"), "MemFree: 1 kB\nSwapTotal: 0 kB\n")
	if _, err := r.readMemInfo(filepath.Join(dir, "meminfo")); err == nil {
		t.Error("meminfo without MemTotal parsed")
	}
}

// TestCgroupV1CombinedCPU reads a v1 tree whose cpu and cpuacct controllers
// share the hierarchy "cpu,cpuacct" (with the usual symlinks), and a v1
// cgroup without hierarchical totals.
func TestCgroupV1CombinedCPU(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "cpu,cpuacct", "kubepods", "cpuacct.usage"), "42\n")
	if err := os.Symlink("cpu,cpuacct", filepath.Join(root, "cpuacct")); err != nil {
		t.Fatal(err)
	}
	mem := filepath.Join(root, "memory", "kubepods")
	writeFile(t, filepath.Join(mem, "memory.usage_in_bytes"), "1000\n")
	writeFile(t, filepath.Join(mem, "memory.limit_in_bytes"), "4000\n")
	writeFile(t, filepath.Join(mem, "memory.stat"), "rss 300\ncache 700\ninactive_file 1500\npgfault 5\n")
	c := &cgroupFS{root: root}
	var r reader
	s, err := c.read(&r, "/kubepods", memInfo{total: 1 << 30}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if s.cpu != 42 || s.usage != 1000 || s.workingSet != 0 || s.rss != 300 || s.cache != 700 || s.limit != 4000 || s.pgfault != 5 {
		t.Fatalf("sample = %+v", s)
	}
	if dir, _ := c.procsDir("/kubepods"); dir != filepath.Join(root, "cpu,cpuacct", "kubepods") {
		t.Errorf("procs dir = %s, want the cpu hierarchy", dir)
	}
	if _, err := c.read(&r, "/missing", memInfo{}, time.Unix(1, 0)); !isNotExist(err) {
		t.Errorf("missing cgroup: %v, want a not-exist error", err)
	}
	if _, err := c.read(&r, "/kubepods/../x", memInfo{}, time.Unix(1, 0)); err == nil {
		t.Error("an unclean cgroup path was read")
	}
}

func TestLatestSandboxes(t *testing.T) {
	sb := func(id, name string, created int64, ready bool) *runtimeapi.PodSandbox {
		state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if ready {
			state = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		return &runtimeapi.PodSandbox{Id: id, CreatedAt: created, State: state, Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "ns", Name: name}}
	}
	got := latestSandboxes([]*runtimeapi.PodSandbox{
		sb("a1", "a", 1, false), sb("a2", "a", 2, true), // the ready one
		sb("b1", "b", 1, false), sb("b2", "b", 3, false), // the newest
		sb("c1", "c", 1, false), // the only one, even not ready
	})
	want := []string{"a2", "b2", "c1"}
	if len(got) != len(want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	for _, id := range want {
		if got[id] == nil {
			t.Errorf("%s dropped", id)
		}
	}
}

func TestMountTable(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "self", "mountinfo"),
		"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 8:2 / /var/lib rw - xfs /dev/sdb1 rw\n3 2 0:5 / /var/lib/with\\040space rw shared:1 - tmpfs tmpfs rw\n")
	p := &Provider{opts: Options{ProcRoot: dir}}
	m := p.mountDevices()
	for path, want := range map[string]string{
		"/var/lib/kubelet":      "/dev/sdb1",
		"/var/library":          "/dev/sda1",
		"/var/lib/with space/x": "tmpfs",
		"/":                     "/dev/sda1",
	} {
		if got := m.deviceOf(path); got != want {
			t.Errorf("device of %s = %s, want %s", path, got, want)
		}
	}
}

// TestFileUsage counts the regular files (and symlinks) directly in a
// directory, not its subdirectories, across several directory reads.
func TestFileUsage(t *testing.T) {
	dir := t.TempDir()
	var want uint64
	for i := range 300 { // more entries than one 4 KiB read returns
		p := filepath.Join(dir, fmt.Sprintf("log-with-a-longish-name-%03d.log", i))
		writeFile(t, p, "line\n")
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		want += uint64(st.Blocks) * 512
	}
	writeFile(t, filepath.Join(dir, "sub", "nested.log"), "not counted\n")
	if err := os.Symlink("log-with-a-longish-name-000.log", filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	used, inodes, err := fileUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if used != want || inodes != 301 {
		t.Errorf("usage = %d bytes %d inodes, want %d bytes 301 inodes", used, inodes, want)
	}
	if _, _, err := fileUsage(filepath.Join(dir, "missing")); !isNotExist(err) {
		t.Errorf("missing dir: %v, want a not-exist error", err)
	}
}

// TestCRINetwork converts containerd 1.6's pod network: the default
// interface alone, without a timestamp.
func TestCRINetwork(t *testing.T) {
	now := time.Unix(100, 0)
	ns := criNetwork(&runtimeapi.NetworkUsage{DefaultInterface: &runtimeapi.NetworkInterfaceUsage{
		Name: "eth0", RxBytes: &runtimeapi.UInt64Value{Value: 10}, TxBytes: &runtimeapi.UInt64Value{Value: 20},
	}}, now)
	if !ns.Time.Time.Equal(now) || ns.Name != "eth0" || len(ns.Interfaces) != 1 || *ns.Interfaces[0].TxBytes != 20 || ns.Interfaces[0].RxErrors != nil {
		t.Errorf("network = %+v", ns)
	}
	ns = criNetwork(&runtimeapi.NetworkUsage{Timestamp: 5e9}, now)
	if !ns.Time.Time.Equal(time.Unix(5, 0)) || ns.Name != "" || len(ns.Interfaces) != 0 {
		t.Errorf("network without interfaces = %+v", ns)
	}
}

// TestAppendFields: appendFields splits a procfs line as bytes.Fields
// does, and without allocating into an array of the caller's.
func TestAppendFields(t *testing.T) {
	for _, line := range []string{"", "   ", "a", "  8000000 kB", "eth0:\t1 2  3\t\t4 ", "0.10 0.20 0.30 3/412 12345"} {
		got := appendFields(nil, []byte(line))
		want := bytes.Fields([]byte(line))
		if len(got) != len(want) {
			t.Errorf("%q: %q, want %q", line, got, want)
			continue
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%q: %q, want %q", line, got, want)
				break
			}
		}
	}
	line := []byte(" lo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16")
	if n := testing.AllocsPerRun(100, func() {
		var buf [17][]byte
		if len(appendFields(buf[:0], line)) != 17 {
			t.Fatal("fields lost")
		}
	}); n != 0 {
		t.Errorf("%v allocations into an array of enough capacity, want 0", n)
	}
}

// TestReaderReleasesItsBuffer: a released reader holds no buffer, and its
// next read takes one again and reads the whole file.
func TestReaderReleasesItsBuffer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	content := bytes.Repeat([]byte("0123456789abcdef"), 1<<10) // 16 KiB: the pool's 8 KiB buffers grow
	writeFile(t, path, string(content))
	var r reader
	for i := range 3 {
		b, err := r.read(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, content) {
			t.Fatalf("read %d: %d bytes, want the file's %d", i, len(b), len(content))
		}
		r.release()
		if r.buf != nil {
			t.Fatalf("read %d: the reader holds its buffer after release", i)
		}
	}
}
