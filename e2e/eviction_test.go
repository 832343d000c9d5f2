package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/bench"
)

// Eviction e2e settings: a short transition period so the test sees the
// condition clear, node status written every 2 s so it sees changes soon,
// volume usage measured every 10 s so an emptyDir over its limit is found
// soon. The monitoring interval is the kubelet's fixed 10 s.
const (
	evictionTransitionPeriod = 30 * time.Second
	evictionMonitoringPeriod = 10 * time.Second
)

// TestEvictionOnContainerd runs issue 12's end-to-end checks on a
// containerd node. The host's memory is what it is, so the test sets
// evictionHard memory.available relative to it: half a fill below what is
// available now (as the agent computes it: capacity less the root cgroup's
// working set), then fills a tmpfs with that fill, which puts the host's
// available memory the other half below the threshold. Under that pressure
// the node turns MemoryPressure=True with the kubelet's reason, a new
// BestEffort pod is rejected with reason Evicted, and the running
// BestEffort pod is evicted (Failed, Evicted, DisruptionTarget) before the
// Guaranteed one. Emptying the tmpfs lifts the pressure: the condition
// clears once the transition period has passed. Last, a pod whose emptyDir
// outgrows its sizeLimit is evicted.
func TestEvictionOnContainerd(t *testing.T) {
	requireContainerd(t)
	avail0, err := hostMemoryAvailable()
	if err != nil {
		t.Fatal(err)
	}
	memAvailable, _ := meminfoField("MemAvailable")
	// The fill moves memory.available by 4 GiB (less on a small host); the
	// threshold sits in the middle, so noise of up to 2 GiB from the rest of
	// the machine does not flip the outcome.
	fill := min(int64(4<<30), avail0/3)
	if fill < 1<<30 {
		t.Fatalf("the host has %s of memory available (MemAvailable %s): too little to put it under memory pressure safely",
			bench.FormatMiB(uint64(avail0)), bench.FormatMiB(uint64(memAvailable)))
	}
	threshold := avail0 - fill/2
	t.Logf("host memory: available %s as the agent computes it (MemAvailable %s); evictionHard memory.available<%s, fill %s",
		bench.FormatMiB(uint64(avail0)), bench.FormatMiB(uint64(memAvailable)), bench.FormatMiB(uint64(threshold)), bench.FormatMiB(uint64(fill)))

	n := newContainerdPodNodeWith(t, "ctr-evict", nodeOptions{
		updateFrequency: 2 * time.Second,
		kubeletConfig: map[string]any{
			"evictionHard":                     map[string]string{"memory.available": strconv.FormatInt(threshold, 10)},
			"evictionPressureTransitionPeriod": evictionTransitionPeriod.String(),
			"kernelMemcgNotification":          true,
			"volumeStatsAggPeriod":             "10s",
		},
	})
	client := env.cp.Client().CoreV1()
	node := waitForNode(t, n.name, "MemoryPressure=False", readyTimeout, func(node *v1.Node) bool {
		c, _ := nodeCondition(node, v1.NodeMemoryPressure)
		return c.Status == v1.ConditionFalse
	})
	if c, _ := nodeCondition(node, v1.NodeMemoryPressure); c.Reason != "KubeletHasSufficientMemory" {
		t.Errorf("MemoryPressure=False reason %q, want KubeletHasSufficientMemory", c.Reason)
	}

	// A BestEffort and a Guaranteed pod run before the pressure.
	bestEffort := n.createPod(t, n.pod("besteffort", "sleep", "3600"))
	gp := n.pod("guaranteed", "sleep", "3600")
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}
	gp.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: res, Limits: res}
	guaranteed := n.createPod(t, gp)
	for _, p := range []*v1.Pod{bestEffort, guaranteed} {
		waitForPod(t, p.Namespace, p.Name, "Running and Ready", isPodReady)
	}

	// Watch the pods from now on, to see in which order they fail.
	list, err := client.Pods(n.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	order := watchFailedOrder(t, n.ns, list.ResourceVersion)

	release := fillTmpfs(t, fill)
	pressureAt := time.Now()
	node = waitForNode(t, n.name, "MemoryPressure=True", podTimeout, func(node *v1.Node) bool {
		c, _ := nodeCondition(node, v1.NodeMemoryPressure)
		return c.Status == v1.ConditionTrue
	})
	t.Logf("MemoryPressure=True %s after the fill", time.Since(pressureAt).Round(100*time.Millisecond))
	if c, _ := nodeCondition(node, v1.NodeMemoryPressure); c.Reason != "KubeletHasInsufficientMemory" || c.Message != "kubelet has insufficient memory available" {
		t.Errorf("MemoryPressure=True: reason %q message %q, want KubeletHasInsufficientMemory, kubelet has insufficient memory available", c.Reason, c.Message)
	}

	// A new BestEffort pod, bound to the node (the scheduler would keep it
	// off the node once the memory-pressure taint is there), is rejected.
	late := n.pod("late", "sleep", "3600")
	late.Spec.NodeSelector, late.Spec.NodeName = nil, n.name
	late = n.createPod(t, late)
	got := waitForPod(t, late.Namespace, late.Name, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if want := "Pod was rejected: The node had condition: [MemoryPressure]. "; got.Status.Reason != "Evicted" || got.Status.Message != want {
		t.Errorf("late pod: reason %q message %q, want Evicted, %q", got.Status.Reason, got.Status.Message, want)
	}
	t.Logf("new BestEffort pod rejected: %s: %s", got.Status.Reason, got.Status.Message)

	// Both running pods are evicted, the BestEffort one first.
	for _, p := range []*v1.Pod{bestEffort, guaranteed} {
		got := waitForPod(t, p.Namespace, p.Name, "evicted", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		var dt v1.PodCondition
		for _, c := range got.Status.Conditions {
			if c.Type == v1.DisruptionTarget {
				dt = c
			}
		}
		if got.Status.Reason != "Evicted" || !strings.HasPrefix(got.Status.Message, "The node was low on resource: memory. ") ||
			dt.Status != v1.ConditionTrue || dt.Reason != v1.PodReasonTerminationByKubelet {
			t.Errorf("pod %s: reason %q message %q DisruptionTarget %s/%s, want Evicted, the kubelet's message, True/TerminationByKubelet\n%s",
				p.Name, got.Status.Reason, got.Status.Message, dt.Status, dt.Reason, describePod(t, got))
		}
		ev := waitForPodEvent(t, p.Namespace, p.Name, "Evicted")
		t.Logf("pod %s evicted: %s", p.Name, ev.Message)
	}
	if got := order(); strings.Join(got, ",") != "besteffort,guaranteed" {
		t.Errorf("pods failed in the order %v, want besteffort then guaranteed", got)
	}
	m, err := n.agent.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	evictions := m.Sum("kubelet_evictions", map[string]string{"eviction_signal": "memory.available"}) +
		m.Sum("kubelet_evictions", map[string]string{"eviction_signal": "allocatableMemory.available"})
	if evictions < 2 {
		t.Errorf("kubelet_evictions for memory = %v, want at least 2", evictions)
	}
	t.Logf("kubelet_evictions{memory} = %v, kubelet_eviction_stats_age_seconds observations = %v", evictions,
		histogramCount(m, "kubelet_eviction_stats_age_seconds"))
	waitForNode(t, n.name, "memory-pressure taint", podTimeout, func(node *v1.Node) bool {
		return hasTaint(node, v1.TaintNodeMemoryPressure, v1.TaintEffectNoSchedule)
	})

	// The pressure lifts: the condition stays True for the transition
	// period after the last pass that saw it (at most one interval before
	// the lift), then clears.
	release()
	liftedAt := time.Now()
	node = waitForNode(t, n.name, "MemoryPressure=False after the pressure lifted", podTimeout, func(node *v1.Node) bool {
		c, _ := nodeCondition(node, v1.NodeMemoryPressure)
		return c.Status == v1.ConditionFalse
	})
	cleared := time.Since(liftedAt)
	t.Logf("MemoryPressure=False %s after the pressure lifted (transition period %s, monitoring interval %s)",
		cleared.Round(100*time.Millisecond), evictionTransitionPeriod, evictionMonitoringPeriod)
	if min := evictionTransitionPeriod - evictionMonitoringPeriod; cleared < min {
		t.Errorf("MemoryPressure cleared %s after the pressure lifted, before the transition period allows (%s)", cleared, min)
	}
	if c, _ := nodeCondition(node, v1.NodeMemoryPressure); c.Reason != "KubeletHasSufficientMemory" {
		t.Errorf("MemoryPressure=False reason %q, want KubeletHasSufficientMemory", c.Reason)
	}

	// An emptyDir over its sizeLimit gets its pod evicted.
	sp := n.pod("scratch", "sh", "-c", "dd if=/dev/zero of=/scratch/fill bs=1M count=8 && sleep 3600")
	sp.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("2Mi"))}}}}
	sp.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	sp = n.createPod(t, sp)
	runningAt := time.Now()
	got = waitForPod(t, sp.Namespace, sp.Name, "evicted for its emptyDir", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if want := `Usage of EmptyDir volume "scratch" exceeds the limit "2Mi". `; got.Status.Reason != "Evicted" || got.Status.Message != want {
		t.Errorf("scratch pod: reason %q message %q, want Evicted, %q\n%s", got.Status.Reason, got.Status.Message, want, describePod(t, got))
	}
	t.Logf("emptyDir pod evicted %s after it was created: %s", time.Since(runningAt).Round(time.Second), got.Status.Message)
	m, err = n.agent.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("kubelet_evictions", map[string]string{"eviction_signal": "emptydirfs.limit"}); got != 1 {
		t.Errorf("kubelet_evictions{eviction_signal=emptydirfs.limit} = %v, want 1", got)
	}
}

// watchFailedOrder watches the pods of ns from resourceVersion and returns
// a func that reports the names of the pods in the order they turned
// Failed.
func watchFailedOrder(t *testing.T, ns, resourceVersion string) func() []string {
	t.Helper()
	w, err := env.cp.Client().CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{ResourceVersion: resourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	var order []string
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok || ev.Type == watch.Deleted || p.Status.Phase != v1.PodFailed {
				continue
			}
			mu.Lock()
			if !contains(order, p.Name) {
				order = append(order, p.Name)
			}
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, name := range order {
			if name != "late" {
				out = append(out, name)
			}
		}
		return out
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// fillTmpfs mounts a tmpfs of its own and writes size bytes to it: shared
// memory the host cannot reclaim, counted in the root cgroup's working set,
// so memory.available drops by size. The returned func (also run at
// cleanup) unmounts it, giving the memory back.
func fillTmpfs(t *testing.T, size int64) (release func()) {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size+(64<<20))); err != nil {
		t.Fatalf("mount a tmpfs to fill: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := syscall.Unmount(dir, 0); err != nil {
				t.Errorf("unmount the filled tmpfs %s: %v", dir, err)
			}
		})
	}
	t.Cleanup(release)
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xa5}, 4<<20)
	for written := int64(0); written < size; written += int64(len(chunk)) {
		if _, err := f.Write(chunk); err != nil {
			t.Fatalf("fill the tmpfs: %v", err)
		}
	}
	return release
}

// hostMemoryAvailable is memory.available as the agent's stats compute it:
// MemTotal less the root cgroup's working set (usage less inactive file
// pages; on cgroup v2 the root's usage is anon + file).
func hostMemoryAvailable() (int64, error) {
	total, err := meminfoField("MemTotal")
	if err != nil {
		return 0, err
	}
	var usage, inactive int64
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		stat, err := readKeyValues("/sys/fs/cgroup/memory.stat")
		if err != nil {
			return 0, err
		}
		usage, inactive = stat["anon"]+stat["file"], stat["inactive_file"]
	} else {
		b, err := os.ReadFile("/sys/fs/cgroup/memory/memory.usage_in_bytes")
		if err != nil {
			return 0, err
		}
		if usage, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return 0, err
		}
		stat, err := readKeyValues("/sys/fs/cgroup/memory/memory.stat")
		if err != nil {
			return 0, err
		}
		inactive = stat["total_inactive_file"]
	}
	return total - max(usage-inactive, 0), nil
}

// meminfoField returns a /proc/meminfo field in bytes.
func meminfoField(name string) (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		key, rest, ok := strings.Cut(s.Text(), ":")
		if !ok || key != name {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return kb << 10, err
	}
	return 0, fmt.Errorf("no %s in /proc/meminfo", name)
}

func readKeyValues(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}
