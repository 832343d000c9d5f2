package agent_test

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"go.uber.org/fx"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
)

// syncBuffer is a bytes.Buffer safe for klog's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// captureKlog sends klog's output (what Run logs) to the returned buffer
// for the rest of the test.
func captureKlog(t *testing.T) *syncBuffer {
	t.Helper()
	buf := &syncBuffer{}
	klog.LogToStderr(false)
	// Every line goes to the INFO output; the others would repeat them.
	klog.SetOutputBySeverity("INFO", buf)
	for _, sev := range []string{"WARNING", "ERROR", "FATAL"} {
		klog.SetOutputBySeverity(sev, io.Discard)
	}
	t.Cleanup(func() {
		klog.Flush()
		klog.LogToStderr(true)
	})
	return buf
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestRunBadConfigFileIsOneLine(t *testing.T) {
	buf := captureKlog(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := agent.Run([]string{"--config=" + bad, "--hostname-override=n"}); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	klog.Flush()
	out := strings.TrimSpace(buf.String())
	if strings.Count(out, "\n") != 0 || !strings.Contains(out, "Invalid configuration") || !strings.Contains(out, bad) {
		t.Errorf("a bad config file must be reported in one line naming it; got:\n%s", out)
	}
	if strings.Contains(out, "Flags:") || strings.Contains(out, "--kubeconfig") {
		t.Errorf("a bad config file printed the flags' usage:\n%s", out)
	}
}

func TestRunUsageErrorExitsTwo(t *testing.T) {
	captureKlog(t)
	if code := agent.Run([]string{"--no-such-flag"}); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	if code := agent.Run([]string{"--max-pods=many", "--hostname-override=n"}); code != 1 {
		t.Errorf("a malformed value: exit code %d, want 1", code)
	}
}

// TestRunSaysWhichComponentFailed: an agent that stops because a component
// failed ends with a line naming it and its error, and exits 1. The
// healthz server fails here: its port is taken.
func TestRunSaysWhichComponentFailed(t *testing.T) {
	_, endpoint := agenttest.StartFakeCRI(t, fakecri.Options{PullAny: true})
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	buf := captureKlog(t)
	client := fake.NewClientset()
	code := agent.Run([]string{
		"--hostname-override=node-a",
		"--node-ip=127.0.0.1",
		"--container-runtime-endpoint=" + endpoint,
		"--healthz-port=" + port,
		"--root-dir=" + filepath.Join(t.TempDir(), "state"),
		"--cgroups-per-qos=false",
		"--fail-swap-on=false",
	},
		fx.Replace(&agent.Clients{Client: client, Heartbeat: client}),
		fx.Decorate(func(cfg *agent.Config) *agent.Config {
			cfg.Kubelet.PodLogsDir = filepath.Join(t.TempDir(), "logs")
			cfg.ContainerLogsDir = filepath.Join(t.TempDir(), "container-logs")
			return cfg
		}),
	)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	klog.Flush()
	last := lastLine(buf.String())
	for _, want := range []string{"Agent stopped because a component failed", `component="healthz"`, "address already in use"} {
		if !strings.Contains(last, want) {
			t.Errorf("last log line %q lacks %q", last, want)
		}
	}
}
