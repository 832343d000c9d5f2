package eviction

import (
	"strings"
	"testing"
	"time"
)

// describe prints thresholds compactly for comparison.
func describe(ts []Threshold) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.String())
	}
	return strings.Join(s, "; ")
}

func TestParseThresholds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   ThresholdConfig
		extra []string
		want  string
	}{{
		name: "defaults when evictionHard is unset",
		cfg:  ThresholdConfig{},
		want: "imagefs.available<15%; imagefs.inodesFree<5%; memory.available<100Mi; nodefs.available<10%; nodefs.inodesFree<5%",
	}, {
		name: "explicit evictionHard replaces the defaults",
		cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": "1Gi"}},
		want: "memory.available<1Gi",
	}, {
		name: "an empty evictionHard means no hard thresholds",
		cfg:  ThresholdConfig{Hard: map[string]string{}},
		want: "",
	}, {
		name: "mergeDefaultEvictionSettings fills the unset signals",
		cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": "1Gi", "pid.available": "10%"}, MergeDefaultHard: true},
		want: "imagefs.available<15%; imagefs.inodesFree<5%; memory.available<1Gi; nodefs.available<10%; nodefs.inodesFree<5%; pid.available<10%",
	}, {
		name: "soft thresholds take their grace periods, minimum reclaim applies to hard and soft",
		cfg: ThresholdConfig{
			Hard:            map[string]string{"memory.available": "100Mi", "nodefs.available": "5%"},
			Soft:            map[string]string{"memory.available": "300Mi", "nodefs.inodesFree": "1.5%"},
			SoftGracePeriod: map[string]string{"memory.available": "1m30s", "nodefs.inodesFree": "2m", "imagefs.available": "1m"},
			MinimumReclaim:  map[string]string{"memory.available": "50Mi", "nodefs.available": "1%"},
		},
		want: "memory.available<100Mi reclaim 50Mi; nodefs.available<5% reclaim 1%; memory.available<300Mi for 1m30s reclaim 50Mi; nodefs.inodesFree<1.5% for 2m0s",
	}, {
		name: "0% and 100% are ignored",
		cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": "0%", "nodefs.available": "100%", "pid.available": "1000"}},
		want: "pid.available<1k",
	}, {
		name: "enforceNodeAllocatable pods adds allocatableMemory.available for the hard memory threshold",
		cfg: ThresholdConfig{
			Hard:                   map[string]string{"memory.available": "200Mi"},
			Soft:                   map[string]string{"memory.available": "1Gi"},
			SoftGracePeriod:        map[string]string{"memory.available": "1m"},
			MinimumReclaim:         map[string]string{"memory.available": "10Mi"},
			EnforceNodeAllocatable: []string{"pods", "system-reserved"},
		},
		want: "memory.available<200Mi reclaim 10Mi; memory.available<1Gi for 1m0s reclaim 10Mi; allocatableMemory.available<200Mi reclaim 10Mi",
	}, {
		name:  "an embedder's signal",
		cfg:   ThresholdConfig{Hard: map[string]string{"gpu.memory.available": "1Gi"}},
		extra: []string{"gpu.memory.available"},
		want:  "gpu.memory.available<1Gi",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseThresholds(tc.cfg, tc.extra...)
			if err != nil {
				t.Fatal(err)
			}
			if d := describe(got); d != tc.want {
				t.Errorf("got  %s\nwant %s", d, tc.want)
			}
		})
	}
}

func TestParseThresholdsValues(t *testing.T) {
	got, err := ParseThresholds(ThresholdConfig{
		Hard:            map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
		Soft:            map[string]string{"pid.available": "2.5%"},
		SoftGracePeriod: map[string]string{"pid.available": "30s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	mem, nodefs, pid := got[0], got[1], got[2]
	if !mem.Hard() || mem.Value.Amount(0) != 100*Mi {
		t.Errorf("memory: hard %v amount %d", mem.Hard(), mem.Value.Amount(0))
	}
	if nodefs.Value.Quantity != nil || nodefs.Value.Amount(1000) != 100 {
		t.Errorf("nodefs 10%% of 1000 = %d", nodefs.Value.Amount(1000))
	}
	if pid.Hard() || pid.GracePeriod != 30*time.Second || pid.Value.Amount(4_000_000) != 100_000 {
		t.Errorf("pid: grace %v amount %d", pid.GracePeriod, pid.Value.Amount(4_000_000))
	}
}

func TestParseThresholdsErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ThresholdConfig
		want string
	}{
		{"unknown hard signal", ThresholdConfig{Hard: map[string]string{"mem.available": "1Gi"}}, "unsupported eviction signal mem.available"},
		{"unknown soft signal", ThresholdConfig{Hard: map[string]string{}, Soft: map[string]string{"foo": "1Gi"}}, "unsupported eviction signal foo"},
		{"unknown grace signal", ThresholdConfig{Hard: map[string]string{}, SoftGracePeriod: map[string]string{"foo": "1m"}}, "unsupported eviction signal foo"},
		{"unknown reclaim signal", ThresholdConfig{Hard: map[string]string{}, MinimumReclaim: map[string]string{"foo": "1Gi"}}, "unsupported eviction signal foo"},
		{"soft without grace period", ThresholdConfig{Hard: map[string]string{}, Soft: map[string]string{"memory.available": "1Gi"}}, "grace period must be specified for the soft eviction threshold memory.available"},
		{"negative percentage", ThresholdConfig{Hard: map[string]string{"nodefs.available": "-5%"}}, "eviction percentage threshold nodefs.available must be >= 0%: -5%"},
		{"percentage above 100", ThresholdConfig{Hard: map[string]string{"nodefs.available": "150%"}}, "eviction percentage threshold nodefs.available must be <= 100%: 150%"},
		{"bad percentage", ThresholdConfig{Hard: map[string]string{"nodefs.available": "ten%"}}, `strconv.ParseFloat: parsing "ten": invalid syntax`},
		{"negative quantity", ThresholdConfig{Hard: map[string]string{"memory.available": "-1Gi"}}, "eviction threshold memory.available must be positive: -1Gi"},
		{"zero quantity", ThresholdConfig{Hard: map[string]string{"memory.available": "0"}}, "eviction threshold memory.available must be positive: 0"},
		{"bad quantity", ThresholdConfig{Hard: map[string]string{"memory.available": "lots"}}, "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"},
		{"negative grace period", ThresholdConfig{Hard: map[string]string{}, Soft: map[string]string{"memory.available": "1Gi"}, SoftGracePeriod: map[string]string{"memory.available": "-1m"}}, "invalid eviction grace period specified: -1m, must be a positive value"},
		{"bad grace period", ThresholdConfig{Hard: map[string]string{}, SoftGracePeriod: map[string]string{"memory.available": "soon"}}, `time: invalid duration "soon"`},
		{"zero percentage reclaim", ThresholdConfig{Hard: map[string]string{}, MinimumReclaim: map[string]string{"nodefs.available": "0%"}}, "eviction percentage minimum reclaim nodefs.available must be positive: 0%"},
		{"negative reclaim", ThresholdConfig{Hard: map[string]string{}, MinimumReclaim: map[string]string{"memory.available": "-1Mi"}}, "negative eviction minimum reclaim specified for memory.available"},
		{"bad reclaim", ThresholdConfig{Hard: map[string]string{}, MinimumReclaim: map[string]string{"memory.available": "x"}}, "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"},
		{"merged defaults are validated with the rest", ThresholdConfig{Hard: map[string]string{"bogus": "1"}, MergeDefaultHard: true}, "unsupported eviction signal bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseThresholds(tc.cfg)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestNewRejectsBadThresholds(t *testing.T) {
	opts := minimalOptions()
	opts.Thresholds = ThresholdConfig{Hard: map[string]string{"gpu.memory.available": "1Gi"}}
	_, err := New(opts)
	if err == nil || !strings.Contains(err.Error(), "unsupported eviction signal gpu.memory.available") {
		t.Errorf("New: %v", err)
	}
}

func TestWithContainerFs(t *testing.T) {
	base, err := ParseThresholds(ThresholdConfig{
		Hard:            map[string]string{"nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%", "containerfs.available": "1%"},
		Soft:            map[string]string{"imagefs.inodesFree": "10%"},
		SoftGracePeriod: map[string]string{"imagefs.inodesFree": "1m"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		layout DiskLayout
		want   string
	}{
		{"one filesystem: containerfs follows nodefs", DiskLayout{},
			"imagefs.available<15%; nodefs.available<10%; nodefs.inodesFree<5%; imagefs.inodesFree<10% for 1m0s; containerfs.available<10%; containerfs.inodesFree<5%"},
		{"dedicated imagefs: containerfs follows imagefs", DiskLayout{DedicatedImageFs: true},
			"imagefs.available<15%; nodefs.available<10%; nodefs.inodesFree<5%; imagefs.inodesFree<10% for 1m0s; containerfs.available<15%; containerfs.inodesFree<10% for 1m0s"},
		{"split writable layers: containerfs follows nodefs", DiskLayout{DedicatedImageFs: true, SplitContainerFs: true},
			"imagefs.available<15%; nodefs.available<10%; nodefs.inodesFree<5%; imagefs.inodesFree<10% for 1m0s; containerfs.available<10%; containerfs.inodesFree<5%"},
		{"split without a dedicated imagefs keeps the configuration", DiskLayout{SplitContainerFs: true},
			"containerfs.available<1%; imagefs.available<15%; nodefs.available<10%; nodefs.inodesFree<5%; imagefs.inodesFree<10% for 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := withContainerFs(base, tc.layout)
			if d := describe(got); d != tc.want {
				t.Errorf("got  %s\nwant %s", d, tc.want)
			}
		})
	}
}
