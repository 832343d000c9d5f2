package eviction_test

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/eviction"
)

// An embedder adds a GPU-memory signal: observed from its own source, with
// its own node condition, ranking pods by the accelerator memory their
// containers use. Thresholds name it like a built-in signal.
func Example_customSignal() {
	gpuMemory := eviction.Signal{
		Name:      "gpu.memory.available",
		Resource:  "example.com/gpu-memory",
		Format:    resource.BinarySI,
		Condition: "GPUMemoryPressure",
		Observe: func(*statsapi.Summary) (eviction.Observation, bool) {
			// Read from the GPU driver in a real agent; a zero Time means
			// the reading is always fresh.
			return eviction.Observation{Available: 512 << 20, Capacity: 16 << 30}, true
		},
		Rank: eviction.RankByUsage(func(_ *v1.Pod, s *statsapi.PodStats) (used, requested int64) {
			for _, c := range s.Containers {
				for _, a := range c.Accelerators {
					used += int64(a.MemoryUsed)
				}
			}
			return used, 0
		}),
	}

	pod := func(name string, gpuBytes uint64) (*v1.Pod, statsapi.PodStats) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name)}}
		p.Spec.Containers = []v1.Container{{Name: name}}
		s := statsapi.PodStats{
			PodRef:     statsapi.PodReference{Name: name, Namespace: "ml", UID: "uid-" + name},
			Containers: []statsapi.ContainerStats{{Name: name, Accelerators: []statsapi.AcceleratorStats{{MemoryUsed: gpuBytes}}}},
		}
		return p, s
	}
	small, smallStats := pod("notebook", 1<<30)
	trainer, trainerStats := pod("trainer", 10<<30)
	summary := &statsapi.Summary{Pods: []statsapi.PodStats{smallStats, trainerStats}}

	ctx, stop := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	m, err := eviction.New(eviction.Options{
		Thresholds: eviction.ThresholdConfig{Hard: map[string]string{"gpu.memory.available": "1Gi"}},
		Signals:    []eviction.Signal{gpuMemory},
		Summary:    func(context.Context) (*statsapi.Summary, error) { return summary, nil },
		ActivePods: func() []*v1.Pod { return []*v1.Pod{small, trainer} },
		KillPod: func(_ context.Context, pod *v1.Pod, grace *int64, statusFn func(*v1.PodStatus)) error {
			var status v1.PodStatus
			statusFn(&status)
			fmt.Printf("evict %s, grace %ds: %s %q\n", pod.Name, *grace, status.Reason, status.Message)
			stop() // one pass is enough here
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = m.Run(ctx)

	fmt.Println("GPUMemoryPressure:", m.UnderPressure("GPUMemoryPressure"))
	admit, reason, message := m.Admit(&v1.Pod{})
	fmt.Printf("admit a new pod: %v %s %q\n", admit, reason, message)
	// Output:
	// evict trainer, grace 1s: Evicted "The node was low on resource: example.com/gpu-memory. Threshold quantity: 1Gi, available: 512Mi. "
	// GPUMemoryPressure: true
	// admit a new pod: false Evicted "The node had condition: [GPUMemoryPressure]. "
}

// The kubelet's defaults apply when evictionHard is unset; once it is set,
// the signals it leaves out have no hard threshold unless
// mergeDefaultEvictionSettings.
func ExampleParseThresholds() {
	for _, cfg := range []eviction.ThresholdConfig{
		{},
		{Hard: map[string]string{"memory.available": "500Mi"}},
		{Hard: map[string]string{"memory.available": "500Mi"}, MergeDefaultHard: true},
	} {
		thresholds, err := eviction.ParseThresholds(cfg)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(thresholds)
	}
	_, err := eviction.ParseThresholds(eviction.ThresholdConfig{Soft: map[string]string{"memory.available": "1Gi"}})
	fmt.Println(err)
	// Output:
	// [imagefs.available<15% imagefs.inodesFree<5% memory.available<100Mi nodefs.available<10% nodefs.inodesFree<5%]
	// [memory.available<500Mi]
	// [imagefs.available<15% imagefs.inodesFree<5% memory.available<500Mi nodefs.available<10% nodefs.inodesFree<5%]
	// grace period must be specified for the soft eviction threshold memory.available
}
