package agent

import (
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/memtrim"
)

func TestReleaseStartupMemory(t *testing.T) {
	never := make(chan struct{})
	noUsage := func() (uint64, time.Duration, error) { return 0, 0, errors.New("no /proc") }
	for _, tc := range []struct {
		name, env   string
		settle      time.Duration
		stopped     bool
		wantRelease bool
	}{
		{name: "by default, once settled", settle: time.Millisecond, wantRelease: true},
		{name: "explicitly on", env: "true", settle: time.Millisecond, wantRelease: true},
		{name: "an invalid value keeps the default", env: "maybe", settle: time.Millisecond, wantRelease: true},
		{name: "turned off", env: "false", settle: time.Millisecond},
		{name: "agent stopped before it settled", settle: time.Hour, stopped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(releaseStartupMemoryEnv, tc.env)
			}
			done := never
			if tc.stopped {
				done = make(chan struct{})
				close(done)
			}
			released := false
			// Without usage figures, only the startup release happens
			// and releaseMemory returns.
			releaseMemory(klog.Background(), done, trimSchedule{settle: tc.settle, check: time.Millisecond}, noUsage, func() (memtrim.Result, error) {
				released = true
				return memtrim.Result{Mappings: 2}, nil
			})
			if released != tc.wantRelease {
				t.Errorf("released = %v, want %v", released, tc.wantRelease)
			}
		})
	}
}

// TestReleaseAfterBurst: after the startup release, memory is released
// again only once the RSS grew by the schedule's growth and the process
// was quiet over the last check; the next release counts from the RSS
// after it.
func TestReleaseAfterBurst(t *testing.T) {
	type sample struct {
		rss uint64
		cpu time.Duration
	}
	const MiB = 1 << 20
	// What usage answers, in turn: after the startup release, then at
	// each check; the release after a sample is what the test expects.
	samples := []struct {
		sample
		wantRelease bool
	}{
		{sample: sample{30 * MiB, 100 * time.Millisecond}},                    // after the startup release: the base
		{sample: sample{34 * MiB, 110 * time.Millisecond}},                    // grew 4 MiB: not enough
		{sample: sample{50 * MiB, 900 * time.Millisecond}},                    // grew 20 MiB, but busy (790 ms)
		{sample: sample{52 * MiB, 920 * time.Millisecond}, wantRelease: true}, // quiet now (20 ms)
		{sample: sample{36 * MiB, 930 * time.Millisecond}},                    // after that release: the new base
		{sample: sample{40 * MiB, 940 * time.Millisecond}},                    // grew 4 MiB from it: not enough
		{sample: sample{45 * MiB, 950 * time.Millisecond}, wantRelease: true}, // grew 9 MiB, quiet
		{sample: sample{37 * MiB, 960 * time.Millisecond}},
	}
	var mu sync.Mutex
	next, releases := 0, 0
	var wantReleases []int // releases expected after each sample
	want := 1              // the startup release
	for _, s := range samples {
		if s.wantRelease {
			want++
		}
		wantReleases = append(wantReleases, want)
	}
	done := make(chan struct{})
	usage := func() (uint64, time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(samples) {
			close(done)
			return 0, 0, errors.New("no more samples")
		}
		s := samples[next]
		if next > 0 && releases != wantReleases[next-1] {
			t.Errorf("after sample %d: %d releases, want %d", next-1, releases, wantReleases[next-1])
		}
		next++
		return s.rss, s.cpu, nil
	}
	release := func() (memtrim.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		releases++
		return memtrim.Result{}, nil
	}
	releaseMemory(klog.Background(), make(chan struct{}), trimSchedule{settle: time.Millisecond, check: time.Millisecond, growth: 8 * MiB, quiet: 50 * time.Millisecond}, usage, release)
	<-done
	if releases != want {
		t.Errorf("%d releases in all, want %d", releases, want)
	}
}
