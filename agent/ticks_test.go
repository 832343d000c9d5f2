package agent_test

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/ticks"
)

// alignedLoops are the periodic loops of an agent on the CRI runtime that
// wait on the node's shared ticks, by the function that asks ticks.Align.
var alignedLoops = []string{
	"pods.(*Controller).runHousekeeping",
	"pods.(*Controller).runGC",
	"userns.(*Manager).Run",
	"runtime.(*StatusPoller).every",
	"runtime.(*LogRotator).Run",
	"runtime.(*ImageGC).Run",
	"eviction.(*Manager).Run",
	"podstatus.(*Manager).Run",
	"status.(*Reporter).loop",
	"lease.(*Controller).renewWait",
	"volume.(*Manager).Run",
	"stats.(*VolumeUsage).Run",
	"dra.(*Manager).Run",
	"runtime.(*PLEG).Run",
}

// TestLoopsWaitOnTheNodesTicks checks that every periodic loop of an agent
// asks the graph's ticks.Align for its waits: the agent wires the node's
// ticks into each module, so that the loops wake together.
func TestLoopsWaitOnTheNodesTicks(t *testing.T) {
	var mu sync.Mutex
	callers := map[string]bool{}
	record := fx.Decorate(func(a ticks.Align) ticks.Align {
		return func(d time.Duration) time.Duration {
			pcs := make([]uintptr, 8)
			frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
			for {
				f, more := frames.Next()
				if !strings.Contains(f.Function, "/ticks.") {
					mu.Lock()
					callers[f.Function[strings.LastIndex(f.Function, "/")+1:]] = true
					mu.Unlock()
					break
				}
				if !more {
					break
				}
			}
			return a(d)
		}
	})
	n := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{record}})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	var missing []string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		missing = slices.DeleteFunc(slices.Clone(alignedLoops), func(l string) bool { return callers[l] })
		return len(missing) == 0, nil
	})
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("loops that did not wait on the node's ticks: %q (the ones that did: %q)", missing, slices.Sorted(maps.Keys(callers)))
	}
}
