package memtrim

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestAfterStart(t *testing.T) {
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
		{name: "agents stopped before they settled", settle: time.Hour, stopped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(Env, tc.env)
			}
			done := never
			if tc.stopped {
				done = make(chan struct{})
				close(done)
			}
			released := false
			afterStart(logr.Discard(), done, tc.settle, func() (Result, error) {
				released = true
				return Result{Mappings: 2}, nil
			})
			if released != tc.wantRelease {
				t.Errorf("released = %v, want %v", released, tc.wantRelease)
			}
		})
	}
}
