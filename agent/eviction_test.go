package agent_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/eviction"
	"github.com/nodekit/nodekit/pods"
)

const mi = 1 << 20

// fakeMemoryStats is a stats summary whose node memory the test sets, with
// every active pod's working set: 100Mi for BestEffort pods, 10Mi for the
// others.
type fakeMemoryStats struct {
	available atomic.Int64
	store     *pods.Store
}

func (f *fakeMemoryStats) summary(context.Context) (*statsapi.Summary, error) {
	now := metav1.Now()
	u := func(v int64) *uint64 { x := uint64(v); return &x }
	avail := f.available.Load()
	s := &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "node-a", Memory: &statsapi.MemoryStats{
		Time: now, AvailableBytes: u(avail), WorkingSetBytes: u(2048*mi - avail), UsageBytes: u(2048*mi - avail),
	}}}
	for _, p := range f.store.Active() {
		ws := int64(10 * mi)
		if p.Spec.Containers[0].Resources.Requests == nil {
			ws = 100 * mi
		}
		mem := &statsapi.MemoryStats{Time: now, WorkingSetBytes: u(ws), UsageBytes: u(ws)}
		s.Pods = append(s.Pods, statsapi.PodStats{
			PodRef:     statsapi.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)},
			Memory:     mem,
			Containers: []statsapi.ContainerStats{{Name: p.Spec.Containers[0].Name, Memory: mem}},
		})
	}
	return s, nil
}

// TestAgentEvictsUnderMemoryPressure runs the whole agent on fakecri with a
// fake stats summary: memory.available below the hard threshold (100Mi, the
// kubelet's default) turns MemoryPressure True with the kubelet's reason, a new
// BestEffort pod is rejected with reason Evicted, the running BestEffort pod
// is evicted (Failed, Evicted, DisruptionTarget) before the Guaranteed one,
// kubelet_evictions counts both, and the condition clears once memory is
// back and the transition period has passed.
func TestAgentEvictsUnderMemoryPressure(t *testing.T) {
	stats := &fakeMemoryStats{}
	stats.available.Store(1024 * mi)
	var (
		mu      sync.Mutex
		evicted []string
		gather  prometheus.Gatherer
	)
	n := agenttest.Start(t, agenttest.Options{
		// The kubelet's default memory threshold, given: a configuration from
		// flags alone has no default thresholds.
		Args: []string{"--node-status-update-frequency=100ms", "--eviction-hard=memory.available<100Mi"},
		Extra: []fx.Option{
			fx.Decorate(func(o eviction.Options) eviction.Options {
				o.MonitoringInterval = 50 * time.Millisecond
				o.PressureTransitionPeriod = time.Second
				return o
			}),
			fx.Decorate(func(_ eviction.SummaryFunc, s *pods.Store) eviction.SummaryFunc {
				stats.store = s
				return stats.summary
			}),
			// Record the order of evictions; the agent's kill does the work.
			fx.Decorate(func(kill eviction.KillPodFunc) eviction.KillPodFunc {
				return func(ctx context.Context, pod *v1.Pod, grace *int64, statusFn func(*v1.PodStatus)) error {
					mu.Lock()
					evicted = append(evicted, pod.Name)
					mu.Unlock()
					return kill(ctx, pod, grace, statusFn)
				}
			}),
			fx.Populate(&gather),
		},
	})
	ctx := agenttest.Context(t)
	node := n.WaitReady(ctx)
	if c := agenttest.NodeCondition(node, v1.NodeMemoryPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasSufficientMemory" {
		t.Fatalf("MemoryPressure before pressure = %s/%s, want False/KubeletHasSufficientMemory", c.Status, c.Reason)
	}

	bestEffort := n.CreatePod(ctx, agenttest.Pod("besteffort", "busybox"))
	guaranteedPod := agenttest.Pod("guaranteed", "busybox")
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("100Mi")}
	guaranteedPod.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: limits, Limits: limits}
	guaranteed := n.CreatePod(ctx, guaranteedPod)
	n.WaitForPod(ctx, bestEffort, agenttest.PodRunningAndReady)
	n.WaitForPod(ctx, guaranteed, agenttest.PodRunningAndReady)

	stats.available.Store(50 * mi)
	node = n.WaitForNode(ctx, func(n *v1.Node) bool {
		return agenttest.NodeCondition(n, v1.NodeMemoryPressure).Status == v1.ConditionTrue
	})
	if c := agenttest.NodeCondition(node, v1.NodeMemoryPressure); c.Reason != "KubeletHasInsufficientMemory" || c.Message != "kubelet has insufficient memory available" {
		t.Errorf("MemoryPressure = %s: %q, want KubeletHasInsufficientMemory: kubelet has insufficient memory available", c.Reason, c.Message)
	}

	late := n.CreatePod(ctx, agenttest.Pod("late", "busybox"))
	got := n.WaitForPod(ctx, late, agenttest.PodPhase(v1.PodFailed))
	if got.Status.Reason != eviction.Reason || got.Status.Message != "Pod was rejected: The node had condition: [MemoryPressure]. " {
		t.Errorf("rejected pod's reason/message = %q/%q, want Evicted/Pod was rejected: The node had condition: [MemoryPressure]. ", got.Status.Reason, got.Status.Message)
	}

	for _, p := range []*v1.Pod{bestEffort, guaranteed} {
		got := n.WaitForPod(ctx, p, agenttest.PodPhase(v1.PodFailed))
		c := agenttest.PodCondition(got, v1.DisruptionTarget)
		if got.Status.Reason != eviction.Reason || !strings.HasPrefix(got.Status.Message, "The node was low on resource: memory. ") ||
			c.Status != v1.ConditionTrue || c.Reason != v1.PodReasonTerminationByKubelet {
			t.Errorf("pod %s: reason %q, message %q, DisruptionTarget %s/%s; want Evicted, the kubelet's message, True/TerminationByKubelet",
				p.Name, got.Status.Reason, got.Status.Message, c.Status, c.Reason)
		}
	}
	mu.Lock()
	order := strings.Join(evicted, ",")
	mu.Unlock()
	if order != "besteffort,guaranteed" {
		t.Errorf("evicted in order %q, want besteffort,guaranteed", order)
	}
	// The manager counts an eviction once KillPod returned, which can be
	// after the pod's Failed status reached the API server: wait for the
	// second count.
	var evictions float64
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		evictions = counterValue(t, gather, "kubelet_evictions", "memory.available")
		return evictions >= 2, nil
	}); err != nil || evictions != 2 {
		t.Errorf("kubelet_evictions{eviction_signal=memory.available} = %v, want 2 (%v)", evictions, err)
	}

	// An Evicted event on the evicted pod.
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		events, err := n.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if e.Reason == eviction.Reason && e.InvolvedObject.Name == "besteffort" && e.Type == v1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no Evicted event for default/besteffort: %v", err)
	}

	stats.available.Store(1024 * mi)
	node = n.WaitForNode(ctx, func(n *v1.Node) bool {
		return agenttest.NodeCondition(n, v1.NodeMemoryPressure).Status == v1.ConditionFalse
	})
	if c := agenttest.NodeCondition(node, v1.NodeMemoryPressure); c.Reason != "KubeletHasSufficientMemory" {
		t.Errorf("MemoryPressure after recovery = %s, want KubeletHasSufficientMemory", c.Reason)
	}
}

// counterValue returns the value of counter name whose eviction_signal is
// signal in g, 0 while it has no such sample.
func counterValue(t *testing.T, g prometheus.Gatherer, name, signal string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "eviction_signal" && l.GetValue() == signal {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestEvictionOptionsFromConfig: the eviction manager's options follow the
// KubeletConfiguration, evictionHard as given (the thresholds the node
// status subtracts from allocatable).
func TestEvictionOptionsFromConfig(t *testing.T) {
	cfg := agenttest.Config(t, "node-a", "unix:///nonexistent.sock",
		"--eviction-hard=memory.available<1Gi", "--eviction-soft=nodefs.available<20%")
	cfg.Kubelet.EvictionSoftGracePeriod = map[string]string{"nodefs.available": "1m"}
	cfg.Kubelet.EvictionMaxPodGracePeriod = 30
	o := cfg.EvictionOptions()
	if o.NodeName != "node-a" || o.PressureTransitionPeriod != 5*time.Minute || o.MaxPodGracePeriodSeconds != 30 || o.NoLocalStorageCapacityIsolation {
		t.Errorf("options = %+v", o)
	}
	m, err := eviction.New(withLoop(o))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, th := range m.Thresholds() {
		got = append(got, th.String())
	}
	want := "memory.available<1Gi,nodefs.available<20% for 1m0s,allocatableMemory.available<1Gi"
	if strings.Join(got, ",") != want {
		t.Errorf("thresholds = %v, want %s", got, want)
	}

	// Without evictionHard (a configuration from flags alone, as the
	// kubelet's) there are no hard thresholds, not the defaults.
	cfg.Kubelet.EvictionHard, cfg.Kubelet.EvictionSoft = nil, nil
	if m, err = eviction.New(withLoop(cfg.EvictionOptions())); err != nil {
		t.Fatal(err)
	}
	if th := m.Thresholds(); len(th) != 0 {
		t.Errorf("thresholds without evictionHard = %v, want none", th)
	}

	// An invalid threshold fails the agent's build with the kubelet's error.
	cfg.Kubelet.EvictionHard = map[string]string{"memory.available": "-1Gi"}
	if _, err := eviction.New(withLoop(cfg.EvictionOptions())); err == nil {
		t.Error("a negative threshold was accepted")
	}
	client := fake.NewClientset()
	app := fx.New(fx.Supply(cfg), agent.Module, fx.Replace(&agent.Clients{Client: client, Heartbeat: client}), fx.NopLogger)
	// Whichever piece reads the thresholds first (the node status's
	// allocatable or the eviction manager) refuses them in the kubelet's
	// words.
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "eviction threshold memory.available must be positive: -1Gi") {
		t.Errorf("agent build with evictionHard memory.available<-1Gi: err = %v, want the kubelet's error", err)
	}
}

func withLoop(o eviction.Options) eviction.Options {
	o.Summary = func(context.Context) (*statsapi.Summary, error) { return &statsapi.Summary{}, nil }
	o.ActivePods = func() []*v1.Pod { return nil }
	o.KillPod = func(context.Context, *v1.Pod, *int64, func(*v1.PodStatus)) error { return nil }
	return o
}

// TestAgentDoesNotEvictStaticPods: under memory pressure past a soft
// threshold the eviction manager evicts the API server's BestEffort pod
// but never the static pod (critical, as the kubelet's IsCriticalPod: its
// config.source is "file"), although it ranks first (BestEffort, more
// memory); the static pod keeps running while the manager goes on
// sampling under pressure.
func TestAgentDoesNotEvictStaticPods(t *testing.T) {
	dir := agenttest.TempDir(t)
	writeFile(t, dir+"/web.yaml", manifest("1"))
	stats := &fakeMemoryStats{}
	stats.available.Store(1024 * mi)
	var (
		mu      sync.Mutex
		evicted []string
		samples atomic.Int64
	)
	n := agenttest.Start(t, agenttest.Options{
		Args: []string{"--pod-manifest-path=" + dir, "--node-status-update-frequency=100ms",
			"--eviction-soft=memory.available<100Mi", "--eviction-soft-grace-period=memory.available=0s"},
		Extra: []fx.Option{
			fx.Decorate(func(o eviction.Options) eviction.Options {
				o.MonitoringInterval = 50 * time.Millisecond
				return o
			}),
			fx.Decorate(func(_ eviction.SummaryFunc, s *pods.Store) eviction.SummaryFunc {
				stats.store = s
				return func(ctx context.Context) (*statsapi.Summary, error) {
					samples.Add(1)
					return stats.summary(ctx)
				}
			}),
			fx.Decorate(func(kill eviction.KillPodFunc) eviction.KillPodFunc {
				return func(ctx context.Context, pod *v1.Pod, grace *int64, statusFn func(*v1.PodStatus)) error {
					mu.Lock()
					evicted = append(evicted, pod.Name)
					mu.Unlock()
					return kill(ctx, pod, grace, statusFn)
				}
			}),
		},
	})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	bestEffort := n.CreatePod(ctx, agenttest.Pod("besteffort", "busybox"))
	n.WaitForPod(ctx, bestEffort, agenttest.PodRunningAndReady)
	var static *v1.Pod
	waitFor(ctx, t, "the static pod to run", func() bool {
		for _, p := range stats.store.Active() {
			if p.Name == "web-node-a" {
				static = p
				return true
			}
		}
		return false
	})

	stats.available.Store(50 * mi)
	n.WaitForPod(ctx, bestEffort, agenttest.PodPhase(v1.PodFailed))
	// The manager goes on under pressure with the static pod as its only
	// candidate for a while: it must never kill it.
	from := samples.Load()
	waitFor(ctx, t, "twenty more eviction rounds", func() bool { return samples.Load() >= from+20 })
	mu.Lock()
	order := strings.Join(evicted, ",")
	mu.Unlock()
	if order != "besteffort" {
		t.Errorf("evicted %q, want besteffort only (never the static pod)", order)
	}
	active := false
	for _, p := range stats.store.Active() {
		active = active || p.UID == static.UID
	}
	if !active {
		t.Error("the static pod is no longer active under memory pressure")
	}
	t.Logf("under pressure: evicted %q over %d eviction rounds; static pod %s kept", order, samples.Load(), static.Name)
}
