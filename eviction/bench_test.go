//go:build unix

package eviction

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

// benchNode builds a 30-pod summary as a stats provider would return it:
// every node signal, pods with two containers, an emptyDir and a
// configMap volume each, a third of them with ephemeral-storage limits.
func benchNode(memAvail int64, statsTime time.Time) (*statsapi.Summary, []*v1.Pod) {
	var pods []*v1.Pod
	var stats []statsapi.PodStats
	for i := 0; i < 30; i++ {
		opts := []func(*v1.Pod){
			withRequest(v1.ResourceMemory, "64Mi"),
			withVolume(v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}),
			withVolume(v1.Volume{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}}),
			withPriority(int32(i % 3)),
		}
		if i%3 == 0 {
			opts = append(opts, withLimit(v1.ResourceEphemeralStorage, "1Gi"))
		}
		p := newPod(fmt.Sprintf("pod-%02d", i), opts...)
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "sidecar"})
		pods = append(pods, p)
		ps := podStats(p, podUse{memWS: int64(i+1) * 10 * Mi, rootfs: 10 * Mi, logs: 1 * Mi, volumes: map[string]int64{"scratch": 5 * Mi, "config": 4 * Ki}, ephemeral: 20 * Mi, procs: 5})
		ps.Containers = append(ps.Containers, ps.Containers[0])
		ps.Containers[1].Name = "sidecar"
		stats = append(stats, ps)
	}
	s := node{
		memAvail: memAvail, memWS: 6 * Gi, podsAvail: 4 * Gi, podsWS: 3 * Gi,
		nodefsAvail: 50 * Gi, nodefsCap: 100 * Gi, nodefsIFree: 5_000_000, nodefsI: 6_000_000,
		imgAvail: 50 * Gi, imgCap: 100 * Gi, imgIFree: 5_000_000, imgI: 6_000_000, cfsAvail: 50 * Gi, cfsCap: 100 * Gi,
		maxPID: 4_194_304, procs: 900,
	}.summary(statsTime, stats...)
	return s, pods
}

func benchManager(b *testing.B, summary *statsapi.Summary, pods []*v1.Pod) *Manager {
	m, err := New(Options{
		Thresholds: ThresholdConfig{EnforceNodeAllocatable: []string{"pods"}}, // the kubelet's defaults
		Summary:    func(context.Context) (*statsapi.Summary, error) { return summary, nil },
		ActivePods: func() []*v1.Pod { return pods },
		KillPod:    func(context.Context, *v1.Pod, *int64, func(*v1.PodStatus)) error { return nil },
		Clock:      testingclock.NewFakeClock(time.Now()),
		Recorder:   &record.FakeRecorder{},
	})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkSynchronize is one pass over a 30-pod node: every signal
// observed, every threshold checked, every pod's local storage limits
// checked. With no pressure this is the manager's whole steady-state cost,
// once per MonitoringInterval.
func BenchmarkSynchronize(b *testing.B) {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	b.Run("idle", func(b *testing.B) {
		s, pods := benchNode(10*Gi, time.Now())
		m := benchManager(b, s, pods)
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			if _, err := m.synchronize(ctx); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu)
	})
	b.Run("evicting", func(b *testing.B) {
		// Memory below the threshold with always-fresh stats: every pass
		// ranks the 30 pods, builds the message and evicts one.
		s, pods := benchNode(50*Mi, time.Time{})
		s.Node.Memory.Time = metav1.Time{}
		m := benchManager(b, s, pods)
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			if got, err := m.synchronize(ctx); err != nil || len(got) != 1 {
				b.Fatalf("evicted %d: %v", len(got), err)
			}
		}
		reportCPU(b, cpu)
	})
}

// processCPU is the process's user+system CPU time so far. On a shared
// machine ns/op is wall time inflated by other processes; cpu-ns/op is what
// a pass costs (GC included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	if start == 0 {
		return
	}
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}
