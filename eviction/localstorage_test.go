package eviction

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

func emptyDirLimit(name, limit string, medium v1.StorageMedium) func(*v1.Pod) {
	q := resource.MustParse(limit)
	return withVolume(v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: medium, SizeLimit: &q}}})
}

func TestLocalStorageEviction(t *testing.T) {
	sidecar := func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{{
			Name:          "sidecar",
			RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways),
			Resources:     v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: mustQ("10Mi")}},
		}}
	}
	initC := func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{{
			Name:      "init",
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: mustQ("10Mi")}},
		}}
	}
	withSidecarStats := func(name string, rootfs int64) func(*statsapi.PodStats) {
		return func(ps *statsapi.PodStats) {
			ps.Containers = append(ps.Containers, statsapi.ContainerStats{Name: name, Rootfs: &statsapi.FsStats{UsedBytes: u64(rootfs)}, Logs: &statsapi.FsStats{UsedBytes: u64(0)}})
		}
	}
	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		use     podUse
		extra   func(*statsapi.PodStats)
		layout  DiskLayout
		want    string // message; empty: not evicted
		counter string
	}{{
		name:    "emptyDir over its sizeLimit",
		pod:     newPod("p", emptyDirLimit("cache", "100Mi", "")),
		use:     podUse{volumes: map[string]int64{"cache": 200 * Mi}},
		want:    `Usage of EmptyDir volume "cache" exceeds the limit "100Mi". `,
		counter: "emptydirfs.limit",
	}, {
		name:    "memory-backed emptyDir over its sizeLimit (checked while InPlacePodVerticalScalingMemoryBackedVolumes is off)",
		pod:     newPod("p", emptyDirLimit("shm", "64Mi", v1.StorageMediumMemory)),
		use:     podUse{volumes: map[string]int64{"shm": 65 * Mi}},
		want:    `Usage of EmptyDir volume "shm" exceeds the limit "64Mi". `,
		counter: "emptydirfs.limit",
	}, {
		name: "emptyDir at its sizeLimit",
		pod:  newPod("p", emptyDirLimit("cache", "100Mi", "")),
		use:  podUse{volumes: map[string]int64{"cache": 100 * Mi}},
	}, {
		name:    "pod over the sum of its containers' limits",
		pod:     newPod("p", withLimit(v1.ResourceEphemeralStorage, "1Gi")),
		use:     podUse{ephemeral: 2 * Gi},
		want:    "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ",
		counter: "ephemeralpodfs.limit",
	}, {
		name:    "container over its limit: writable layer plus logs",
		pod:     newPod("p", withLimit(v1.ResourceEphemeralStorage, "100Mi")),
		use:     podUse{rootfs: 95 * Mi, logs: 10 * Mi},
		want:    `Container p exceeded its local ephemeral storage limit "100Mi". `,
		counter: "ephemeralcontainerfs.limit",
	}, {
		name:   "container with a dedicated imagefs: only logs count",
		pod:    newPod("p", withLimit(v1.ResourceEphemeralStorage, "100Mi")),
		use:    podUse{rootfs: 95 * Mi, logs: 10 * Mi},
		layout: DiskLayout{DedicatedImageFs: true},
	}, {
		name:    "sidecar over its limit",
		pod:     newPod("p", sidecar),
		extra:   withSidecarStats("sidecar", 11*Mi),
		want:    `Container sidecar exceeded its local ephemeral storage limit "10Mi". `,
		counter: "ephemeralcontainerfs.limit",
	}, {
		name:  "init container limits are not enforced per container",
		pod:   newPod("p", initC),
		extra: withSidecarStats("init", 11*Mi),
	}, {
		name: "critical pod",
		pod:  newPod("p", emptyDirLimit("cache", "100Mi", ""), withPriority(2000001000)),
		use:  podUse{volumes: map[string]int64{"cache": 200 * Mi}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := hardOnly(map[string]string{}) // local storage limits apply without thresholds
			layout := tc.layout
			opts.DiskLayout = func(context.Context) (DiskLayout, error) { return layout, nil }
			h := newHarness(t, opts)
			ps := podStats(tc.pod, tc.use)
			if tc.extra != nil {
				tc.extra(&ps)
			}
			h.set(node{}.summary(h.clock.Now(), ps), tc.pod)
			evicted := h.sync()
			kills := h.kills()
			if tc.want == "" {
				if len(evicted) != 0 || len(kills) != 0 {
					t.Fatalf("evicted %s", names(evicted))
				}
				return
			}
			if names(evicted) != "p" || len(kills) != 1 {
				t.Fatalf("evicted %q with %d kills, want p once", names(evicted), len(kills))
			}
			k := kills[0]
			if k.grace != 1 || k.status.Phase != v1.PodFailed || k.status.Reason != "Evicted" || k.status.Message != tc.want {
				t.Errorf("kill grace %d status %s/%s/%q, want 1 Failed/Evicted/%q", k.grace, k.status.Phase, k.status.Reason, k.status.Message, tc.want)
			}
			if len(k.status.Conditions) != 0 {
				t.Errorf("conditions %+v: the kubelet sets no DisruptionTarget for local storage evictions", k.status.Conditions)
			}
			if ev := h.events(); len(ev) != 1 || ev[0] != "Warning Evicted "+tc.want {
				t.Errorf("events %q", ev)
			}
			if got := testutil.ToFloat64(h.m.metrics.evictions.WithLabelValues(tc.counter)); got != 1 {
				t.Errorf("kubelet_evictions{%s} = %v", tc.counter, got)
			}
		})
	}
}

func TestLocalStorageEvictsEveryOffenderAndSkipsPressure(t *testing.T) {
	h := newHarness(t, hardOnly(map[string]string{"memory.available": "100Mi"}))
	a := newPod("a", emptyDirLimit("cache", "1Mi", ""))
	b := newPod("b", withLimit(v1.ResourceEphemeralStorage, "1Mi"))
	c := newPod("c")
	h.set(node{memAvail: 50 * Mi, memWS: 1 * Gi}.summary(h.clock.Now(),
		podStats(a, podUse{volumes: map[string]int64{"cache": 2 * Mi}}),
		podStats(b, podUse{rootfs: 2 * Mi}),
		podStats(c, podUse{memWS: 1 * Gi})), a, b, c)
	got := h.sync()
	n := names(got)
	if n != "a,b" {
		t.Fatalf("evicted %q, want a,b (every local storage offender)", n)
	}
	// Memory pressure waits for the next pass.
	for _, k := range h.kills() {
		if k.pod == c {
			t.Error("c evicted for memory in the pass that enforced local storage limits")
		}
	}
	if !h.m.IsUnderMemoryPressure() {
		t.Error("MemoryPressure not reported")
	}
}

func TestNoLocalStorageCapacityIsolation(t *testing.T) {
	opts := hardOnly(map[string]string{"memory.available": "100Mi"})
	opts.NoLocalStorageCapacityIsolation = true
	h := newHarness(t, opts)
	a := newPod("a", emptyDirLimit("cache", "1Mi", ""))
	h.set(node{memAvail: 1 * Gi, memWS: 1 * Gi}.summary(h.clock.Now(), podStats(a, podUse{volumes: map[string]int64{"cache": 2 * Mi}})), a)
	if got := h.sync(); len(got) != 0 {
		t.Errorf("evicted %s with local storage isolation off", names(got))
	}
	if k := h.kills(); len(k) != 0 {
		t.Errorf("%d kills", len(k))
	}
}
