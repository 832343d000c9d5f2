package eviction

import (
	"context"
	"strings"
	"testing"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestBuiltinSignalObservations(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	full := node{
		memAvail: 1 * Gi, memWS: 3 * Gi,
		podsAvail: 512 * Mi, podsWS: 1536 * Mi,
		nodefsAvail: 20 * Gi, nodefsCap: 100 * Gi, nodefsIFree: 9_000, nodefsI: 10_000,
		imgAvail: 30 * Gi, imgCap: 200 * Gi, imgIFree: 40_000, imgI: 50_000,
		cfsAvail: 5 * Gi, cfsCap: 50 * Gi,
		maxPID: 4_194_304, procs: 1_000,
	}.summary(now)
	sigs := builtinSignals(DiskLayout{}, nil, nil, nil)
	byName := map[string]Signal{}
	for _, s := range sigs {
		byName[s.Name] = s
	}
	for _, tc := range []struct {
		signal          string
		avail, capacity int64
	}{
		{SignalMemoryAvailable, 1 * Gi, 4 * Gi},
		{SignalAllocatableMemoryAvailable, 512 * Mi, 2 * Gi},
		{SignalNodeFsAvailable, 20 * Gi, 100 * Gi},
		{SignalNodeFsInodesFree, 9_000, 10_000},
		{SignalImageFsAvailable, 30 * Gi, 200 * Gi},
		{SignalImageFsInodesFree, 40_000, 50_000},
		{SignalContainerFsAvailable, 5 * Gi, 50 * Gi},
		{SignalPIDAvailable, 4_194_304 - 1_000, 4_194_304},
	} {
		t.Run(tc.signal, func(t *testing.T) {
			s, ok := byName[tc.signal]
			if !ok {
				t.Fatalf("no built-in signal %s", tc.signal)
			}
			obs, ok := s.Observe(full)
			if !ok {
				t.Fatal("no observation from a full summary")
			}
			if obs.Available != tc.avail || obs.Capacity != tc.capacity || !obs.Time.Time.Equal(now) {
				t.Errorf("got %d of %d at %v, want %d of %d at %v", obs.Available, obs.Capacity, obs.Time, tc.avail, tc.capacity, now)
			}
			if _, ok := s.Observe(&statsapi.Summary{}); ok {
				t.Error("observation from an empty summary")
			}
		})
	}
	if _, ok := byName[SignalContainerFsInodesFree].Observe(full); ok {
		t.Error("containerfs.inodesFree observed without inode stats")
	}
}

func TestAllocatableMemoryFallback(t *testing.T) {
	now := time.Now()
	// The stats provider gives the pods container no AvailableBytes.
	s := node{podsAvail: -1, podsWS: 1 * Gi}.summary(now)
	if _, ok := ObserveAllocatableMemoryAvailable(nil)(s); ok {
		t.Error("observed without AvailableBytes or a limit")
	}
	limit := func() (int64, bool) { return 3 * Gi, true }
	obs, ok := ObserveAllocatableMemoryAvailable(limit)(s)
	if !ok || obs.Available != 2*Gi || obs.Capacity != 3*Gi {
		t.Errorf("got %+v %v, want 2Gi of 3Gi", obs, ok)
	}
	// AvailableBytes wins over the limit, as the kubelet reads it.
	s = node{podsAvail: 100 * Mi, podsWS: 1 * Gi}.summary(now)
	if obs, _ := ObserveAllocatableMemoryAvailable(limit)(s); obs.Available != 100*Mi {
		t.Errorf("available %d, want 100Mi from the stats", obs.Available)
	}
}

func TestInferDiskLayout(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		n      node
		want   DiskLayout
		wantOK bool
	}{
		{"no runtime stats", node{nodefsAvail: 1, nodefsCap: 10}, DiskLayout{}, false},
		{"one filesystem", node{nodefsAvail: 1, nodefsCap: 10, nodefsIFree: 5, nodefsI: 9, imgAvail: 1, imgCap: 10, imgIFree: 5, imgI: 9, cfsAvail: 1, cfsCap: 10}, DiskLayout{}, true},
		{"dedicated imagefs", node{nodefsAvail: 1, nodefsCap: 10, imgAvail: 1, imgCap: 20, cfsAvail: 1, cfsCap: 20}, DiskLayout{DedicatedImageFs: true}, true},
		{"same size, different inode counts", node{nodefsAvail: 1, nodefsCap: 10, nodefsI: 9, nodefsIFree: 1, imgAvail: 1, imgCap: 10, imgI: 8, imgIFree: 1}, DiskLayout{DedicatedImageFs: true}, true},
		{"split writable layers", node{nodefsAvail: 1, nodefsCap: 10, imgAvail: 1, imgCap: 20, cfsAvail: 1, cfsCap: 10}, DiskLayout{DedicatedImageFs: true, SplitContainerFs: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := InferDiskLayout(tc.n.summary(now))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("got %+v %v, want %+v %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestReclaimByLayout checks which node-level reclaim each disk signal gets,
// as the kubelet's buildSignalToNodeReclaimFuncs.
func TestReclaimByLayout(t *testing.T) {
	var calls []string
	rec := func(name string) ReclaimFunc {
		return func(context.Context) error { calls = append(calls, name); return nil }
	}
	for _, tc := range []struct {
		name   string
		layout DiskLayout
		want   map[string]string
	}{
		{"one filesystem", DiskLayout{}, map[string]string{
			SignalNodeFsAvailable: "containers,images", SignalImageFsAvailable: "containers,images", SignalContainerFsAvailable: "containers,images",
			SignalNodeFsInodesFree: "containers,images", SignalMemoryAvailable: "", SignalPIDAvailable: ""}},
		{"dedicated imagefs", DiskLayout{DedicatedImageFs: true}, map[string]string{
			SignalNodeFsAvailable: "", SignalImageFsAvailable: "containers,images", SignalContainerFsInodesFree: "containers,images", SignalImageFsInodesFree: "containers,images"}},
		{"split writable layers", DiskLayout{DedicatedImageFs: true, SplitContainerFs: true}, map[string]string{
			SignalNodeFsAvailable: "containers", SignalContainerFsAvailable: "containers", SignalImageFsAvailable: "images", SignalImageFsInodesFree: "images"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range builtinSignals(tc.layout, nil, rec("containers"), rec("images")) {
				want, checked := tc.want[s.Name]
				if !checked {
					continue
				}
				calls = nil
				for _, r := range s.Reclaim {
					_ = r(context.Background())
				}
				if got := strings.Join(calls, ","); got != want {
					t.Errorf("%s reclaims %q, want %q", s.Name, got, want)
				}
			}
		})
	}
}
