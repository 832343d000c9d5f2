package eviction

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

func hardOnly(hard map[string]string) Options {
	return Options{Thresholds: ThresholdConfig{Hard: hard}}
}

func TestHardMemoryEviction(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	x := newPod("x")
	y := newPod("y", withRequest(v1.ResourceMemory, "1Gi"))
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(),
		podStats(x, podUse{memWS: 120 * Mi}), podStats(y, podUse{memWS: 10 * Mi})), y, x)

	evicted := h.sync()
	if names(evicted) != "x" {
		t.Fatalf("evicted %q, want x", names(evicted))
	}
	kills := h.kills()
	if len(kills) != 1 {
		t.Fatalf("%d kills, want 1", len(kills))
	}
	k := kills[0]
	const msg = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container x was using 120Mi, request is 0, has larger consumption of memory. "
	if k.grace != 1 {
		t.Errorf("grace %d, want 1 for a hard threshold", k.grace)
	}
	if k.status.Phase != v1.PodFailed || k.status.Reason != "Evicted" || k.status.Message != msg {
		t.Errorf("status %s/%s/%q", k.status.Phase, k.status.Reason, k.status.Message)
	}
	wantCond := v1.PodCondition{
		Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet", Message: msg,
		ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(h.clock.Now()),
	}
	if len(k.status.Conditions) != 1 || !equalCondition(k.status.Conditions[0], wantCond) {
		t.Errorf("conditions %+v, want %+v", k.status.Conditions, wantCond)
	}
	wantEvents := []string{
		"Warning EvictionThresholdMet Attempting to reclaim memory",
		"Warning Evicted " + msg + " map[offending_containers:x offending_containers_usage:120Mi starved_resource:memory]",
	}
	if got := h.events(); strings.Join(got, "\n") != strings.Join(wantEvents, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantEvents, "\n"))
	}
	if !h.m.IsUnderMemoryPressure() || h.m.IsUnderDiskPressure() || h.m.IsUnderPIDPressure() {
		t.Errorf("pressure memory/disk/pid = %v/%v/%v, want true/false/false", h.m.IsUnderMemoryPressure(), h.m.IsUnderDiskPressure(), h.m.IsUnderPIDPressure())
	}
	if got := testutil.ToFloat64(h.m.metrics.evictions.WithLabelValues("memory.available")); got != 1 {
		t.Errorf("kubelet_evictions{memory.available} = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(h.m.metrics.statsAge); got != 1 {
		t.Errorf("kubelet_eviction_stats_age_seconds series %d, want 1", got)
	}
}

func equalCondition(a, b v1.PodCondition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.ObservedGeneration == b.ObservedGeneration && a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

func TestMetricsExposition(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	x := newPod("x")
	statsTime := h.clock.Now()
	h.clock.Step(3 * time.Second) // the stats are 3 s old when acted on
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(statsTime, podStats(x, podUse{memWS: 120 * Mi})), x)
	h.sync()
	const want = `
# HELP kubelet_eviction_stats_age_seconds Time between when stats are collected, and when pod is evicted based on those stats by eviction signal
# TYPE kubelet_eviction_stats_age_seconds histogram
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="0.005"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="0.01"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="0.025"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="0.05"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="0.1"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="0.25"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="0.5"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="1"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="2.5"} 0
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="5"} 1
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="10"} 1
kubelet_eviction_stats_age_seconds_bucket{eviction_signal="memory.available",le="+Inf"} 1
kubelet_eviction_stats_age_seconds_sum{eviction_signal="memory.available"} 3
kubelet_eviction_stats_age_seconds_count{eviction_signal="memory.available"} 1
# HELP kubelet_evictions Cumulative number of pod evictions by eviction signal
# TYPE kubelet_evictions counter
kubelet_evictions{eviction_signal="memory.available"} 1
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), "kubelet_evictions", "kubelet_eviction_stats_age_seconds"); err != nil {
		t.Error(err)
	}
}

func TestOnePodPerPass(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	a, b := newPod("a"), newPod("b")
	for i := 0; i < 3; i++ {
		h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(),
			podStats(a, podUse{memWS: 200 * Mi}), podStats(b, podUse{memWS: 100 * Mi})), a, b)
		if got := names(h.sync()); got != "a" {
			t.Fatalf("pass %d evicted %q, want a (the larger consumer) alone", i, got)
		}
		h.clock.Step(10 * time.Second)
	}
	if n := len(h.kills()); n != 3 {
		t.Errorf("%d kills over 3 passes, want 3", n)
	}
}

func TestStaleStatsDoNotEvict(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	x := newPod("x")
	s := node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), podStats(x, podUse{memWS: 120 * Mi}))
	h.set(s, x)
	if got := names(h.sync()); got != "x" {
		t.Fatalf("evicted %q, want x", got)
	}
	h.clock.Step(10 * time.Second)
	// The stats provider returns the same (old) stats: the pressure is still
	// reported but nobody else is evicted on it.
	if got := h.sync(); len(got) != 0 {
		t.Errorf("evicted %q on stale stats", names(got))
	}
	if !h.m.IsUnderMemoryPressure() {
		t.Error("pressure dropped on stale stats")
	}
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), podStats(x, podUse{memWS: 120 * Mi})), x)
	if got := names(h.sync()); got != "x" {
		t.Errorf("evicted %q on fresh stats, want x", got)
	}
}

func TestSoftThresholdGracePeriod(t *testing.T) {
	opts := Options{
		Thresholds: ThresholdConfig{
			Hard:            map[string]string{},
			Soft:            map[string]string{"memory.available": "500Mi"},
			SoftGracePeriod: map[string]string{"memory.available": "1m"},
		},
		MaxPodGracePeriodSeconds: 20,
	}
	low := func(h *harness, pods ...*v1.Pod) {
		var stats []statsapi.PodStats
		for _, p := range pods {
			stats = append(stats, podStats(p, podUse{memWS: 100 * Mi}))
		}
		h.set(node{memAvail: 400 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), stats...), pods...)
	}
	t.Run("evicts once the grace period passed", func(t *testing.T) {
		h := newHarness(t, opts)
		p := newPod("p") // terminationGracePeriodSeconds 30
		low(h, p)
		if got := h.sync(); len(got) != 0 {
			t.Fatalf("evicted %s at once on a soft threshold", names(got))
		}
		if !h.m.IsUnderMemoryPressure() {
			t.Error("no MemoryPressure while the soft threshold is met")
		}
		h.clock.Step(59 * time.Second)
		low(h, p)
		if got := h.sync(); len(got) != 0 {
			t.Fatalf("evicted %s before the grace period", names(got))
		}
		h.clock.Step(time.Second)
		low(h, p)
		if got := names(h.sync()); got != "p" {
			t.Fatalf("evicted %q after the grace period, want p", got)
		}
		if g := h.kills()[0].grace; g != 20 {
			t.Errorf("grace %d, want min(evictionMaxPodGracePeriod 20, pod 30) = 20", g)
		}
	})
	t.Run("pod grace period below the maximum", func(t *testing.T) {
		h := newHarness(t, opts)
		p := newPod("p", func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5) })
		low(h, p)
		h.sync()
		h.clock.Step(time.Minute)
		low(h, p)
		h.sync()
		if k := h.kills(); len(k) != 1 || k[0].grace != 5 {
			t.Fatalf("kills %+v, want one with grace 5", k)
		}
	})
	t.Run("a threshold that clears starts over", func(t *testing.T) {
		h := newHarness(t, opts)
		p := newPod("p")
		low(h, p)
		h.sync()
		h.clock.Step(30 * time.Second)
		h.set(node{memAvail: 2 * Gi, memWS: 1 * Gi}.summary(h.clock.Now()), p)
		h.sync()
		h.clock.Step(31 * time.Second)
		low(h, p)
		if got := h.sync(); len(got) != 0 {
			t.Fatalf("evicted %s: the grace period counted from before the threshold cleared", names(got))
		}
	})
}

func TestPressureTransitionPeriod(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now()))
	h.sync()
	if !h.m.IsUnderMemoryPressure() {
		t.Fatal("no MemoryPressure")
	}
	be := newPod("best-effort")
	for _, step := range []struct {
		after time.Duration
		want  bool
	}{{10 * time.Second, true}, {4*time.Minute + 49*time.Second, true}, {time.Second, false}} {
		h.clock.Step(step.after)
		h.set(node{memAvail: 2 * Gi, memWS: 1 * Gi}.summary(h.clock.Now()))
		h.sync()
		if got := h.m.IsUnderMemoryPressure(); got != step.want {
			t.Fatalf("%v after the signal cleared: MemoryPressure %v, want %v", h.clock.Since(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), got, step.want)
		}
		if admit, _, _ := h.m.Admit(be); admit == step.want {
			t.Errorf("BestEffort admitted %v while MemoryPressure %v", admit, step.want)
		}
	}
}

func TestCustomTransitionPeriod(t *testing.T) {
	opts := hardOnly(map[string]string{"pid.available": "100"})
	opts.PressureTransitionPeriod = 30 * time.Second
	h := newHarness(t, opts)
	h.set(node{maxPID: 1000, procs: 950}.summary(h.clock.Now()))
	h.sync()
	if !h.m.IsUnderPIDPressure() {
		t.Fatal("no PIDPressure")
	}
	h.clock.Step(30 * time.Second)
	h.set(node{maxPID: 1000, procs: 10}.summary(h.clock.Now()))
	h.sync()
	if h.m.IsUnderPIDPressure() {
		t.Error("PIDPressure outlived a 30s transition period")
	}
}

func TestMinimumReclaim(t *testing.T) {
	opts := Options{Thresholds: ThresholdConfig{
		Hard:           map[string]string{"memory.available": "100Mi"},
		MinimumReclaim: map[string]string{"memory.available": "200Mi"},
	}}
	h := newHarness(t, opts)
	a, b, c := newPod("a"), newPod("b"), newPod("c")
	pass := func(avail int64) []*v1.Pod {
		h.clock.Step(10 * time.Second)
		h.set(node{memAvail: avail, memWS: 1 * Gi}.summary(h.clock.Now(),
			podStats(a, podUse{memWS: 300 * Mi}), podStats(b, podUse{memWS: 200 * Mi}), podStats(c, podUse{memWS: 100 * Mi})), a, b, c)
		return h.sync()
	}
	if got := names(pass(50 * Mi)); got != "a" {
		t.Fatalf("evicted %q below the threshold, want a", got)
	}
	// Above the threshold but below threshold + minimum reclaim: keep going.
	if got := names(pass(250 * Mi)); got != "a" {
		t.Fatalf("evicted %q below threshold + minimum reclaim, want a", got)
	}
	// Reclaimed enough: stop.
	if got := pass(301 * Mi); len(got) != 0 {
		t.Fatalf("evicted %q after the minimum reclaim", names(got))
	}
	// A fresh crossing of threshold + reclaim alone does not start eviction.
	if got := pass(250 * Mi); len(got) != 0 {
		t.Fatalf("evicted %q above the threshold", names(got))
	}
}

func TestCriticalAndStaticPodsAreNotEvicted(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	static := newPod("static", withAnnotation("kubernetes.io/config.source", "file"))
	mirror := newPod("mirror", withAnnotation(v1.MirrorPodAnnotationKey, "hash"))
	clusterCritical := newPod("cluster-critical", withPriority(2000000000))
	nodeCritical := newPod("node-critical", withPriority(2000001000))
	api := newPod("api", withAnnotation("kubernetes.io/config.source", "api"))
	normal := newPod("normal", withPriority(1999999999))
	all := []*v1.Pod{static, mirror, clusterCritical, nodeCritical, api, normal}
	var stats []statsapi.PodStats
	for i, p := range all {
		stats = append(stats, podStats(p, podUse{memWS: int64(len(all)-i) * 100 * Mi}))
	}
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), stats...), all...)
	if got := names(h.sync()); got != "api" {
		t.Fatalf("evicted %q, want api (the first non-critical pod in rank order)", got)
	}
	h.clock.Step(10 * time.Second)
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), stats[:4]...), all[:4]...)
	if got := h.sync(); len(got) != 0 {
		t.Fatalf("evicted %q among critical pods only", names(got))
	}
	if n := len(h.kills()); n != 1 {
		t.Errorf("%d kills, want 1", n)
	}
}

func TestKillErrorStillCountsAsEviction(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	h.m.opts.KillPod = func(context.Context, *v1.Pod, *int64, func(*v1.PodStatus)) error {
		return context.DeadlineExceeded
	}
	a, b := newPod("a"), newPod("b")
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(),
		podStats(a, podUse{memWS: 200 * Mi}), podStats(b, podUse{memWS: 100 * Mi})), a, b)
	if got := names(h.sync()); got != "a" {
		t.Errorf("evicted %q, want a: a failed kill is not retried on the next pod, as the kubelet", got)
	}
}

func TestReclaimBeforeEviction(t *testing.T) {
	opts := Options{Thresholds: ThresholdConfig{
		Hard:           map[string]string{"nodefs.available": "10%"},
		MinimumReclaim: map[string]string{"nodefs.available": "5%"},
	}}
	big := newPod("big")
	low := func(now time.Time, avail int64) *statsapi.Summary {
		return node{nodefsAvail: avail, nodefsCap: 100 * Gi}.summary(now, podStats(big, podUse{rootfs: 2 * Gi, logs: 1 * Gi}))
	}
	t.Run("reclaim suffices", func(t *testing.T) {
		h := newHarness(t, opts)
		h.set(low(h.clock.Now(), 5*Gi), big)
		h.afterReclaim = low(h.clock.Now(), 20*Gi)
		if got := h.sync(); len(got) != 0 {
			t.Fatalf("evicted %s though reclaim freed enough", names(got))
		}
		if got := strings.Join(h.reclaims, ","); got != "containers,images" {
			t.Errorf("reclaim ran %q, want containers,images", got)
		}
		if ev := h.events(); len(ev) != 1 || ev[0] != "Warning EvictionThresholdMet Attempting to reclaim ephemeral-storage" {
			t.Errorf("events %q", ev)
		}
		if !h.m.IsUnderDiskPressure() {
			t.Error("no DiskPressure")
		}
	})
	t.Run("reclaim short of the minimum reclaim", func(t *testing.T) {
		h := newHarness(t, opts)
		h.set(low(h.clock.Now(), 5*Gi), big)
		h.afterReclaim = low(h.clock.Now(), 12*Gi) // above 10%, below 10% + 5%
		if got := names(h.sync()); got != "big" {
			t.Fatalf("evicted %q, want big", got)
		}
		// 10% is a float32, as the kubelet's: 0.1 × 100Gi rounds to
		// 10737418400, not 10Gi.
		const msg = "The node was low on resource: ephemeral-storage. Threshold quantity: 10737418400, available: 5Gi. Container big was using 3Gi, request is 0, has larger consumption of ephemeral-storage. "
		if m := h.kills()[0].status.Message; m != msg {
			t.Errorf("message %q\nwant    %q", m, msg)
		}
	})
	t.Run("nodefs on a dedicated imagefs layout reclaims nothing", func(t *testing.T) {
		o := opts
		o.DiskLayout = func(context.Context) (DiskLayout, error) { return DiskLayout{DedicatedImageFs: true}, nil }
		h := newHarness(t, o)
		h.set(low(h.clock.Now(), 5*Gi), big)
		h.afterReclaim = low(h.clock.Now(), 50*Gi)
		if got := names(h.sync()); got != "big" {
			t.Fatalf("evicted %q, want big", got)
		}
		if len(h.reclaims) != 0 {
			t.Errorf("reclaim ran %q for nodefs with a dedicated imagefs", h.reclaims)
		}
	})
}

func TestImageFsReclaimAndContainerFs(t *testing.T) {
	// Dedicated imagefs (inferred from the summary): imagefs pressure
	// reclaims containers and images, and containerfs follows imagefs.
	h := newHarness(t, hardOnly(map[string]string{"imagefs.available": "15%"}))
	p := newPod("p")
	h.set(node{nodefsAvail: 50 * Gi, nodefsCap: 100 * Gi, imgAvail: 10 * Gi, imgCap: 200 * Gi, cfsAvail: 10 * Gi, cfsCap: 200 * Gi}.summary(h.clock.Now(),
		podStats(p, podUse{rootfs: 1 * Gi})), p)
	if got := names(h.sync()); got != "p" {
		t.Fatalf("evicted %q, want p", got)
	}
	if !h.m.layout.DedicatedImageFs || h.m.layout.SplitContainerFs {
		t.Errorf("layout %+v, want a dedicated imagefs", h.m.layout)
	}
	if got := strings.Join(h.reclaims, ","); got != "containers,images" {
		t.Errorf("reclaim ran %q", got)
	}
	var derived []string
	for _, th := range h.m.thresholds {
		derived = append(derived, th.Threshold.String())
	}
	if got, want := strings.Join(derived, "; "), "imagefs.available<15%; containerfs.available<15%"; got != want {
		t.Errorf("thresholds %s, want %s", got, want)
	}
}

func TestDiskLayoutError(t *testing.T) {
	opts := hardOnly(map[string]string{"nodefs.available": "10%"})
	fail := true
	opts.DiskLayout = func(context.Context) (DiskLayout, error) {
		if fail {
			return DiskLayout{}, context.DeadlineExceeded
		}
		return DiskLayout{}, nil
	}
	h := newHarness(t, opts)
	h.set(node{nodefsAvail: 1 * Gi, nodefsCap: 100 * Gi}.summary(h.clock.Now()))
	if _, err := h.m.synchronize(testContext(t)); err == nil {
		t.Fatal("no error when the disk layout is unknown")
	}
	fail = false
	h.sync()
	if !h.m.IsUnderDiskPressure() {
		t.Error("no DiskPressure once the layout is known")
	}
}

func TestMemoryIsReclaimedFirst(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"nodefs.available": "10%", "memory.available": "100Mi"}))
	p := newPod("p")
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi, nodefsAvail: 1 * Gi, nodefsCap: 100 * Gi}.summary(h.clock.Now(),
		podStats(p, podUse{memWS: 1 * Gi})), p)
	h.sync()
	if ev := h.events(); len(ev) == 0 || ev[0] != "Warning EvictionThresholdMet Attempting to reclaim memory" {
		t.Errorf("events %q, want memory reclaimed first", ev)
	}
	if len(h.reclaims) != 0 {
		t.Errorf("disk reclaim ran %q for memory pressure", h.reclaims)
	}
	if got := h.m.Conditions(); len(got) != 2 || got[0] != v1.NodeMemoryPressure || got[1] != v1.NodeDiskPressure {
		t.Errorf("conditions %v", got)
	}
}

func TestPIDPressure(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"pid.available": "1000"}))
	low, high := newPod("low", withPriority(-10)), newPod("high", withPriority(100))
	h.set(node{maxPID: 10_000, procs: 9_500}.summary(h.clock.Now(),
		podStats(low, podUse{procs: 1}), podStats(high, podUse{procs: 5_000})), high, low)
	if got := names(h.sync()); got != "low" {
		t.Fatalf("evicted %q, want low (lower priority)", got)
	}
	if !h.m.IsUnderPIDPressure() || h.m.IsUnderMemoryPressure() {
		t.Error("want PIDPressure only")
	}
	const msg = "The node was low on resource: pids. Threshold quantity: 1k, available: 500. "
	if m := h.kills()[0].status.Message; m != msg {
		t.Errorf("message %q, want %q", m, msg)
	}
}

func TestAllocatableMemoryThreshold(t *testing.T) {
	opts := hardOnly(map[string]string{"memory.available": "100Mi"})
	opts.Thresholds.EnforceNodeAllocatable = []string{"pods"}
	h := newHarness(t, opts)
	p := newPod("p")
	h.set(node{memAvail: 10 * Gi, memWS: 1 * Gi, podsAvail: 50 * Mi, podsWS: 2 * Gi}.summary(h.clock.Now(),
		podStats(p, podUse{memWS: 2 * Gi})), p)
	if got := names(h.sync()); got != "p" {
		t.Fatalf("evicted %q, want p", got)
	}
	if got := testutil.ToFloat64(h.m.metrics.evictions.WithLabelValues("allocatableMemory.available")); got != 1 {
		t.Errorf("kubelet_evictions{allocatableMemory.available} = %v", got)
	}
	if !strings.HasPrefix(h.kills()[0].status.Message, "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ") {
		t.Errorf("message %q", h.kills()[0].status.Message)
	}
}

func TestPodLevelMemoryMessage(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	p := newPod("p", func(p *v1.Pod) {
		p.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: mustQ("64Mi")}}
	})
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), podStats(p, podUse{memWS: 128 * Mi})), p)
	h.sync()
	const msg = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Pod p was using 128Mi, request is 64Mi, has larger consumption of memory. Container p was using 128Mi, request is 0, has larger consumption of memory. "
	if m := h.kills()[0].status.Message; m != msg {
		t.Errorf("message %q\nwant    %q", m, msg)
	}
}

func TestNoActivePodsOrNoStats(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now()))
	if got := h.sync(); len(got) != 0 {
		t.Fatalf("evicted %s with no pods", names(got))
	}
	// A pod without stats ranks first and its message has no container part.
	h.clock.Step(10 * time.Second)
	p := newPod("p")
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now()), p)
	h.sync()
	if m := h.kills()[0].status.Message; m != "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " {
		t.Errorf("message %q", m)
	}
}

func TestNoThresholdsNoLocalStorageDoesNothing(t *testing.T) {
	opts := hardOnly(map[string]string{})
	opts.NoLocalStorageCapacityIsolation = true
	h := newHarness(t, opts)
	calls := 0
	h.m.opts.Summary = func(context.Context) (*statsapi.Summary, error) { calls++; return &statsapi.Summary{}, nil }
	h.sync()
	if calls != 0 {
		t.Errorf("stats read %d times with nothing to watch", calls)
	}
}

// eventually polls cond (a test's view of another goroutine's progress).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRunWaitsForCleanupThenContinues(t *testing.T) {
	opts := hardOnly(map[string]string{"memory.available": "100Mi"})
	cleaned := map[types.UID]bool{}
	var polls int
	h := newHarness(t, opts)
	h.m.opts.PodCleanedUp = func(uid types.UID) bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		polls++
		return cleaned[uid]
	}
	x := newPod("x")
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), podStats(x, podUse{memWS: 1 * Gi})), x)
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error)
	go func() { done <- h.m.Run(ctx) }()

	eventually(t, "the first eviction", func() bool { return len(h.kills()) == 1 })
	// Waiting for cleanup: a 30 s timeout and a 1 s poll.
	eventually(t, "the cleanup timers", func() bool { return h.clock.Waiters() == 2 })
	h.clock.Step(time.Second)
	eventually(t, "the next poll timer", func() bool { return h.clock.Waiters() == 2 })
	h.mu.Lock()
	if polls != 1 {
		t.Errorf("%d polls after 1s, want 1", polls)
	}
	cleaned[x.UID] = true
	h.mu.Unlock()
	h.clock.Step(time.Second)
	// Cleaned up: the next pass runs at once, sees the same (stale) stats,
	// evicts nothing and waits the interval.
	eventually(t, "the next pass and its interval timer", func() bool {
		return h.summaryCalls() == 2 && h.clock.Waiters() == 1
	})
	if n := len(h.kills()); n != 1 {
		t.Fatalf("%d kills, want 1", n)
	}
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now().Add(time.Second), podStats(x, podUse{memWS: 1 * Gi})), x)
	h.clock.Step(10 * time.Second)
	eventually(t, "the second eviction", func() bool { return len(h.kills()) == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}

func TestRunCleanupTimeout(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	h.m.opts.PodCleanedUp = func(types.UID) bool { return false }
	x := newPod("x")
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), podStats(x, podUse{memWS: 1 * Gi})), x)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	done := make(chan error)
	go func() { done <- h.m.Run(ctx) }()
	eventually(t, "the first eviction", func() bool { return len(h.kills()) == 1 })
	for i := 0; i < 30; i++ {
		eventually(t, "the cleanup timers", func() bool { return h.clock.Waiters() == 2 })
		if n := len(h.kills()); n != 1 {
			t.Fatalf("%d kills while waiting for cleanup", n)
		}
		if i == 29 {
			// The 30 s timeout fires with the last poll; then a pass
			// runs on fresh stats and evicts again.
			h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now().Add(time.Minute), podStats(x, podUse{memWS: 1 * Gi})), x)
		}
		h.clock.Step(time.Second)
	}
	eventually(t, "the eviction after the cleanup timeout", func() bool { return len(h.kills()) == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}

func TestRunWithoutPodCleanedUpWaitsAnInterval(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	x := newPod("x")
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(), podStats(x, podUse{memWS: 1 * Gi})), x)
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error)
	go func() { done <- h.m.Run(ctx) }()
	eventually(t, "the first eviction", func() bool { return len(h.kills()) == 1 })
	eventually(t, "the wait", func() bool { return h.clock.Waiters() == 1 })
	if n := h.summaryCalls(); n != 1 {
		t.Errorf("%d passes before the interval passed", n)
	}
	h.clock.Step(10 * time.Second)
	eventually(t, "the next pass", func() bool { return h.summaryCalls() == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}

func TestSummaryErrorSkipsThePass(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now()))
	h.sync()
	h.m.opts.Summary = func(context.Context) (*statsapi.Summary, error) { return nil, context.DeadlineExceeded }
	h.clock.Step(10 * time.Minute)
	if got := h.sync(); len(got) != 0 {
		t.Errorf("evicted %s without stats", names(got))
	}
	if !h.m.IsUnderMemoryPressure() {
		t.Error("a failed stats read cleared the condition")
	}
	h.m.opts.Summary = func(context.Context) (*statsapi.Summary, error) { return nil, nil }
	if got := h.sync(); len(got) != 0 {
		t.Errorf("evicted %s on a nil summary", names(got))
	}
}

func TestInferredLayoutSettlesOnceStatsArrive(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"imagefs.available": "15%"}))
	// No runtime stats yet: one filesystem is assumed, not fixed.
	h.set(node{nodefsAvail: 50 * Gi, nodefsCap: 100 * Gi}.summary(h.clock.Now()))
	h.sync()
	if h.m.layoutFixed || h.m.layout.DedicatedImageFs {
		t.Fatalf("layout %+v fixed %v without runtime stats", h.m.layout, h.m.layoutFixed)
	}
	h.clock.Step(10 * time.Second)
	h.set(node{nodefsAvail: 50 * Gi, nodefsCap: 100 * Gi, imgAvail: 50 * Gi, imgCap: 500 * Gi}.summary(h.clock.Now()))
	h.sync()
	if !h.m.layoutFixed || !h.m.layout.DedicatedImageFs {
		t.Fatalf("layout %+v fixed %v with runtime stats", h.m.layout, h.m.layoutFixed)
	}
	// Later summaries do not change it.
	h.clock.Step(10 * time.Second)
	h.set(node{nodefsAvail: 50 * Gi, nodefsCap: 100 * Gi, imgAvail: 50 * Gi, imgCap: 100 * Gi}.summary(h.clock.Now()))
	h.sync()
	if !h.m.layout.DedicatedImageFs {
		t.Error("layout changed after it was known")
	}
}
