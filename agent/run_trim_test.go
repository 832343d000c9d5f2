package agent

import (
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/memtrim"
)

func TestReleaseStartupMemory(t *testing.T) {
	never := make(chan struct{})
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
			releaseStartupMemory(klog.Background(), done, tc.settle, func() (memtrim.Result, error) {
				released = true
				return memtrim.Result{Mappings: 2}, nil
			})
			if released != tc.wantRelease {
				t.Errorf("released = %v, want %v", released, tc.wantRelease)
			}
		})
	}
}
