//go:build linux

package stats

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testclock "k8s.io/utils/clock/testing"
)

func volumePod(uid string, volumes ...v1.Volume) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID("uid-" + uid)}, Spec: v1.PodSpec{Volumes: volumes}}
}

func volumeNames(vs []statsapi.VolumeStats) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func writeVolumeFile(t *testing.T, root string, pod *v1.Pod, plugin, volume, name string, size int) string {
	t.Helper()
	dir := filepath.Join(root, "pods", string(pod.UID), "volumes", plugin, volume)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVolumeUsageMeasuresPodVolumes: emptyDir (on disk) and configMap
// volumes are a pod's ephemeral volumes and secrets are listed with the
// others, each with du's usage (hard links once) and its filesystem's
// capacity; volumes not set up are left out; a pod no longer active is
// forgotten at the next measurement.
func TestVolumeUsageMeasuresPodVolumes(t *testing.T) {
	root := t.TempDir()
	pod := volumePod("web",
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		v1.Volume{Name: "token", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}},
		v1.Volume{Name: "notyet", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/"}}},
	)
	big := writeVolumeFile(t, root, pod, "kubernetes.io~empty-dir", "scratch", "data", 1<<20)
	if err := os.Link(big, big+".link"); err != nil {
		t.Fatal(err)
	}
	writeVolumeFile(t, root, pod, "kubernetes.io~configmap", "cfg", "key", 10)
	writeVolumeFile(t, root, pod, "kubernetes.io~secret", "token", "token", 10)

	var active atomic.Pointer[[]*v1.Pod]
	active.Store(&[]*v1.Pod{pod})
	u, err := NewVolumeUsage(VolumeUsageOptions{RootDir: root, Pods: func() []*v1.Pod { return *active.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.PodVolumeStats(pod.UID); ok {
		t.Fatal("stats before the first measurement")
	}
	u.Measure(context.Background())
	s, ok := u.PodVolumeStats(pod.UID)
	if !ok {
		t.Fatal("no stats after a measurement")
	}
	names := volumeNames
	if got := names(s.Ephemeral); len(got) != 2 || got[0] != "scratch" || got[1] != "cfg" {
		t.Errorf("ephemeral volumes = %v, want [scratch cfg]", got)
	}
	if got := names(s.Persistent); len(got) != 1 || got[0] != "token" {
		t.Errorf("other volumes = %v, want [token]", got)
	}
	scratch := s.Ephemeral[0]
	if used := *scratch.UsedBytes; used < 1<<20 || used >= 2<<20 {
		t.Errorf("scratch used = %d, want the 1 MiB file once (hard link counted once) plus the directory", used)
	}
	if *scratch.InodesUsed != 2 {
		t.Errorf("scratch inodes used = %d, want 2 (the directory and the file)", *scratch.InodesUsed)
	}
	if *scratch.CapacityBytes == 0 || *scratch.Inodes == 0 || scratch.Time.IsZero() {
		t.Errorf("scratch capacity/inodes/time = %d/%d/%v, want the filesystem's", *scratch.CapacityBytes, *scratch.Inodes, scratch.Time)
	}

	active.Store(&[]*v1.Pod{})
	u.Measure(context.Background())
	if _, ok := u.PodVolumeStats(pod.UID); ok {
		t.Error("stats kept for a pod no longer active")
	}
}

// TestVolumeUsageRunsEveryPeriod: Run measures at once, then every Period.
func TestVolumeUsageRunsEveryPeriod(t *testing.T) {
	root := t.TempDir()
	pod := volumePod("web", v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	writeVolumeFile(t, root, pod, "kubernetes.io~empty-dir", "scratch", "a", 10)
	clk := testclock.NewFakeClock(time.Now())
	u, err := NewVolumeUsage(VolumeUsageOptions{RootDir: root, Pods: func() []*v1.Pod { return []*v1.Pod{pod} }, Period: 10 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- u.Run(ctx) }()
	used := func() uint64 {
		s, ok := u.PodVolumeStats(pod.UID)
		if !ok {
			return 0
		}
		return *s.Ephemeral[0].UsedBytes
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll("first measurement", func() bool { return used() > 0 })
	first := used()
	writeVolumeFile(t, root, pod, "kubernetes.io~empty-dir", "scratch", "b", 1<<20)
	poll("timer armed", clk.HasWaiters)
	if used() != first {
		t.Fatal("measured again before the period passed")
	}
	clk.Step(10 * time.Second)
	poll("second measurement", func() bool { return used() > first })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestVolumeUsageMeasuresClaims: a pod's claim-backed volumes are listed
// with their PVCRef, measured by their driver or with statfs of their
// mount; a driver reporting nothing or failing leaves its volume out.
func TestVolumeUsageMeasuresClaims(t *testing.T) {
	pod := volumePod("db")
	mount := t.TempDir()
	used, total := uint64(3), uint64(10)
	claims := []ClaimVolume{
		{Name: "local", PVC: statsapi.PVCReference{Name: "data-local", Namespace: "default"}, Path: mount},
		{Name: "csi", PVC: statsapi.PVCReference{Name: "data-csi", Namespace: "default"}, Path: "/nonexistent",
			Measure: func(context.Context) (statsapi.FsStats, bool, error) {
				return statsapi.FsStats{UsedBytes: &used, CapacityBytes: &total}, true, nil
			}},
		{Name: "nostats", PVC: statsapi.PVCReference{Name: "x", Namespace: "default"},
			Measure: func(context.Context) (statsapi.FsStats, bool, error) { return statsapi.FsStats{}, false, nil }},
		{Name: "failing", PVC: statsapi.PVCReference{Name: "y", Namespace: "default"},
			Measure: func(context.Context) (statsapi.FsStats, bool, error) {
				return statsapi.FsStats{}, false, context.DeadlineExceeded
			}},
	}
	u, err := NewVolumeUsage(VolumeUsageOptions{RootDir: t.TempDir(), Pods: func() []*v1.Pod { return []*v1.Pod{pod} },
		Claims: func(uid types.UID) []ClaimVolume {
			if uid != pod.UID {
				t.Errorf("claims asked for pod %s", uid)
			}
			return claims
		}})
	if err != nil {
		t.Fatal(err)
	}
	u.Measure(context.Background())
	s, ok := u.PodVolumeStats(pod.UID)
	if !ok {
		t.Fatal("no stats for a pod with claims")
	}
	if got := volumeNames(s.Persistent); len(got) != 2 || got[0] != "local" || got[1] != "csi" {
		t.Fatalf("claim volumes %v, want [local csi]", got)
	}
	local, csi := s.Persistent[0], s.Persistent[1]
	if local.PVCRef == nil || local.PVCRef.Name != "data-local" || local.CapacityBytes == nil || *local.CapacityBytes == 0 ||
		local.AvailableBytes == nil || local.Inodes == nil || local.Time.IsZero() {
		t.Errorf("local volume stats %+v, want the filesystem's with its claim", local)
	}
	if csi.PVCRef == nil || csi.PVCRef.Name != "data-csi" || *csi.UsedBytes != 3 || *csi.CapacityBytes != 10 || csi.Time.IsZero() {
		t.Errorf("csi volume stats %+v, want the driver's figures with its claim", csi)
	}
	if len(s.Ephemeral) != 0 {
		t.Errorf("claims counted as ephemeral: %v", volumeNames(s.Ephemeral))
	}
}
