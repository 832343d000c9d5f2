package agent_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/agent/agenttest"
)

// TestHealthyStartLogsNoError: an agent started on a healthy runtime and
// API server logs no Error-level line on its way to Ready, running a pod
// and stopping. The runtime's first status answer comes in the background:
// until then the node status setters that read it (images, runtime
// handlers, features) have nothing to report, which is not a failure (it
// was three "Failed to set some node status fields" error lines at every
// start), and the lease waits for the Node's registration without an
// error line.
func TestHealthyStartLogsNoError(t *testing.T) {
	errs := &errorLines{}
	// Registered before Start, so it runs after the agent's stop.
	t.Cleanup(func() {
		if lines := errs.lines(); len(lines) > 0 {
			t.Errorf("a healthy start and stop logged %d error lines:\n%s", len(lines), strings.Join(lines, "\n"))
		}
	})
	node := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{
		fx.Decorate(func(l logr.Logger) logr.Logger { return logr.New(errs.wrap(l.GetSink())) }),
	}})
	ctx := agenttest.Context(t)
	node.WaitReady(ctx)
	pod := node.CreatePod(ctx, agenttest.Pod("web", "busybox"))
	node.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)
}

// errorLines records the Error-level lines of every logger made from the
// sinks it wraps, which still log as before.
type errorLines struct {
	mu  sync.Mutex
	got []string
}

func (e *errorLines) wrap(s logr.LogSink) logr.LogSink {
	if s == nil {
		s = klog.Background().GetSink()
	}
	return &errorSink{LogSink: s, rec: e}
}

func (e *errorLines) lines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

type errorSink struct {
	logr.LogSink
	rec    *errorLines
	name   string
	values []any
}

func (s *errorSink) Error(err error, msg string, kv ...any) {
	s.rec.mu.Lock()
	s.rec.got = append(s.rec.got, fmt.Sprintf("%s: %q err=%v %v %v", s.name, msg, err, s.values, kv))
	s.rec.mu.Unlock()
	s.LogSink.Error(err, msg, kv...)
}

func (s *errorSink) WithValues(kv ...any) logr.LogSink {
	return &errorSink{LogSink: s.LogSink.WithValues(kv...), rec: s.rec, name: s.name, values: append(append([]any(nil), s.values...), kv...)}
}

func (s *errorSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &errorSink{LogSink: s.LogSink.WithName(name), rec: s.rec, name: name, values: s.values}
}
