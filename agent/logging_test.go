package agent_test

import (
	goflag "flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// containerd16 is a runtime as containerd 1.6 answers: no RuntimeConfig and
// no container event stream, both optional in the CRI.
var containerd16 = fakecri.Options{
	CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, PullAny: true,
	Unimplemented: []string{"RuntimeConfig", "GetContainerEvents"},
}

// resetVerbosity puts klog's -v back to 0 when the test ends: the agent's
// flags set it process-wide.
func resetVerbosity(t *testing.T) {
	t.Cleanup(func() {
		fs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
		klog.InitFlags(fs)
		if err := fs.Set("v", "0"); err != nil {
			t.Error(err)
		}
	})
}

// processWide are the only lines allowed without the node: libraries'
// lines logged through klog's global logger, with no context that could
// carry the node's, once per process rather than per agent (by their
// source file, as klog's header names it).
var processWide = map[string]string{
	// mount-utils' detection of umount's behaviour, at V(4), when the
	// volume manager builds its mounter.
	"mount_linux.go": "mount-utils",
	// client-go's feature gates read from the environment, at V(1), on
	// first use.
	"envvar.go": "client-go features",
	// client-go's fake clientset's watchers (tests only).
	"watch.go": "fake watcher",
}

// checkLines fails the test for every line of klog's output out that does
// not name node (node="<node>"), but those of processWide, or that is an
// Error line (a klog header starting with E): a healthy start and a clean
// stop log no error.
func checkLines(t *testing.T, out, node string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 50 {
		t.Fatalf("only %d lines at --v=4; is the output captured?\n%s", len(lines), out)
	}
	for _, line := range lines {
		if strings.HasPrefix(line, "E") {
			t.Errorf("an Error line on a healthy start or clean stop: %s", line)
		}
		if strings.Contains(line, `node="`+node+`"`) {
			continue
		}
		header, _, _ := strings.Cut(line, "]")
		fields := strings.Fields(header)
		file, _, _ := strings.Cut(fields[len(fields)-1], ":")
		_, allowed := processWide[file]
		if !allowed {
			t.Errorf("a line without its node: %s", line)
		}
	}
}

// TestEveryLogLineNamesItsNode: at --v=4 every line of an agent names its
// node, and neither a healthy start nor a clean stop logs an error, on a
// runtime without the CRI's optional RPCs (containerd 1.6): with an API
// server (events sent to it, pods from it) and standalone (events only
// logged, a static pod, the process entry point agent.Run with its fx
// lines).
func TestEveryLogLineNamesItsNode(t *testing.T) {
	t.Run("api server", func(t *testing.T) {
		resetVerbosity(t)
		buf := captureKlog(t)
		cri := containerd16
		n := agenttest.Start(t, agenttest.Options{Name: "node-logs", CRI: &cri, Args: []string{"--v=4"}})
		ctx := agenttest.Context(t)
		n.WaitReady(ctx)
		n.WaitForPod(ctx, n.CreatePod(ctx, agenttest.Pod("web", "busybox")), agenttest.PodRunningAndReady)
		n.App.RequireStop()
		klog.Flush()
		out := buf.String()
		if !strings.Contains(out, `"Event occurred"`) {
			t.Fatalf("no event was logged:\n%s", out)
		}
		checkLines(t, out, "node-logs")
	})

	t.Run("standalone", func(t *testing.T) {
		resetVerbosity(t)
		_, endpoint := agenttest.StartFakeCRI(t, containerd16)
		dir := agenttest.TempDir(t)
		if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: web, image: busybox}]
`), 0o600); err != nil {
			t.Fatal(err)
		}
		buf := captureKlog(t)
		shutdowners := make(chan fx.Shutdowner, 1)
		done := make(chan int, 1)
		go func() {
			done <- agent.Run([]string{
				"--v=4",
				"--hostname-override=node-solo",
				"--node-ip=127.0.0.1",
				"--container-runtime-endpoint=" + endpoint,
				"--healthz-port=0", "--port=0", "--read-only-port=0",
				"--root-dir=" + filepath.Join(agenttest.TempDir(t), "state"),
				"--pod-manifest-path=" + dir,
				"--cgroups-per-qos=false",
				"--fail-swap-on=false",
			},
				fx.Decorate(func(cfg *agent.Config) *agent.Config {
					cfg.Kubelet.PodLogsDir = filepath.Join(agenttest.TempDir(t), "logs")
					cfg.ContainerLogsDir = filepath.Join(agenttest.TempDir(t), "container-logs")
					return cfg
				}),
				fx.Invoke(func(sd fx.Shutdowner) { shutdowners <- sd }),
			)
		}()
		var sd fx.Shutdowner
		select {
		case sd = <-shutdowners:
		case code := <-done:
			t.Fatalf("the agent exited with %d before it was built:\n%s", code, buf.String())
		}
		// The static pod's container started: its event is logged.
		deadline := time.Now().Add(agenttest.DefaultTimeout)
		for !strings.Contains(buf.String(), `reason="Started"`) {
			if time.Now().After(deadline) {
				t.Fatalf("the static pod did not start:\n%s", buf.String())
			}
			select {
			case code := <-done:
				t.Fatalf("the agent exited with %d:\n%s", code, buf.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		if err := sd.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if code := <-done; code != 0 {
			t.Errorf("exit code %d after a clean stop", code)
		}
		klog.Flush()
		out := buf.String()
		if !strings.Contains(out, `logger="fx"`) {
			t.Errorf("no fx line at --v=4:\n%s", out)
		}
		checkLines(t, out, "node-solo")
	})
}
