package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodekit/nodekit/internal/testenv"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// env is the cluster every test shares, set up once by TestMain.
var env struct {
	dir        string
	cp         *cluster.ControlPlane
	agent      string // the agent binary
	bins       cluster.Binaries
	containerd *cluster.Containerd
	// sentinel is a node on the fake runtime that stays Ready for the
	// whole run, so the node lifecycle controller never sees every node
	// unhealthy (disruption mode, in which it adds no NoExecute taints).
	sentinel *testNode

	// unavailable says why the cluster cannot run on this machine (skip
	// outside CI); broken says why setting it up failed (always fail).
	unavailable, broken error
	// containerdUnavailable and containerdBroken do the same for the
	// containerd runtime.
	containerdUnavailable, containerdBroken error
}

// progress writes the harness's progress to stderr, where go test shows it.
var progress io.Writer = prefixWriter{os.Stderr, "e2e: "}

// defaultParallel replaces go test's default -parallel (GOMAXPROCS, 2 on
// the CI machine): the tests spend their time waiting on the cluster, not
// on the CPU, and the pod tests run many short waits side by side. 16 left
// the 2-core CI machine so loaded (a dozen containerds and agents beside
// the control plane) that containers starved for seconds and a run met one
// or two load-made timing failures; 8 keeps the suite's wall time near the
// longest test's.
const defaultParallel = "8"

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", defaultParallel); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if env.dir, err = os.MkdirTemp("", "nodekit-e2e-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		teardown()
		keep, _ := strconv.ParseBool(os.Getenv("NODEKIT_E2E_KEEP"))
		if code != 0 || keep {
			fmt.Fprintf(os.Stderr, "e2e: kept %s (logs of every component are in it)\n", env.dir)
			if env.cp != nil {
				for name, path := range env.cp.LogFiles() {
					fmt.Fprintf(os.Stderr, "e2e:   %s log: %s\n", name, path)
				}
			}
			return
		}
		os.RemoveAll(env.dir)
	}()
	hostBefore, err := snapshotHostPaths()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: %v\n", err)
		return 1
	}
	setup(ctx)
	code = m.Run()
	if err := checkHostPaths(hostBefore); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: %v\n", err)
		code = 1
	}
	// Whatever ran, the node identities kept to their privilege.
	switch {
	case env.cp != nil && env.broken == nil && env.sentinel != nil:
		if err := checkLeastPrivilege(ctx, progress); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: FAIL: least privilege: %v\n", err)
			code = 1
		}
	case testenv.InCI():
		fmt.Fprintf(os.Stderr, "e2e: FAIL: least privilege not checked (required under CI): no cluster (%v)\n", errors.Join(env.broken, env.unavailable))
		code = 1
	default:
		fmt.Fprintf(os.Stderr, "e2e: least privilege not checked: no cluster (%v)\n", errors.Join(env.broken, env.unavailable))
	}
	return code
}

func setup(ctx context.Context) {
	src, err := cluster.LocateSource()
	if err != nil {
		env.broken = err
		return
	}
	start := time.Now()
	bins, err := cluster.BuildControlPlane(ctx, cluster.BuildOptions{Source: src, Log: progress})
	if err != nil {
		env.unavailable = fmt.Errorf("build the control plane: %w", err)
		return
	}
	fmt.Fprintf(progress, "control plane binaries ready (%s)\n", time.Since(start).Round(time.Second))
	binDir := filepath.Join(env.dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		env.broken = err
		return
	}
	if env.agent, err = cluster.BuildAgent(ctx, src, binDir, nil); err != nil {
		env.broken = err
		return
	}
	env.bins = bins
	env.cp, err = cluster.StartControlPlane(ctx, cluster.ControlPlaneOptions{
		Binaries: bins,
		Dir:      filepath.Join(env.dir, "controlplane"),
		Log:      progress,
	})
	if err != nil {
		env.broken = err
		return
	}
	if env.sentinel, err = startFakeNode(ctx, "sentinel", nodeOptions{}); err != nil {
		env.broken = fmt.Errorf("start the sentinel node: %w", err)
		return
	}
	if err := waitReadyOutsideTest(ctx, env.sentinel); err != nil {
		env.broken = err
		return
	}

	if err := cluster.CheckContainerd(); err != nil {
		env.containerdUnavailable = err
		return
	}
	env.containerd, err = cluster.StartContainerd(ctx, cluster.ContainerdOptions{
		Source: src, Dir: filepath.Join(env.dir, "containerd"), Log: progress,
	})
	if err != nil {
		env.containerdBroken = err
	}
}

func teardown() {
	var errs []error
	if env.sentinel != nil {
		errs = append(errs, env.sentinel.stop())
	}
	if env.containerd != nil {
		errs = append(errs, env.containerd.Close(context.Background()))
	}
	if env.cp != nil {
		errs = append(errs, env.cp.Stop())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: teardown: %v\n", err)
	}
}

// requireCluster stops the test unless the control plane is up: it fails
// when setting it up broke, or when it cannot run here under CI, and skips
// otherwise.
func requireCluster(t *testing.T) {
	t.Helper()
	switch {
	case env.broken != nil:
		t.Fatalf("cluster setup failed: %v", env.broken)
	case env.unavailable != nil && testenv.InCI():
		t.Fatalf("cluster unavailable (required under CI): %v", env.unavailable)
	case env.unavailable != nil:
		t.Skipf("cluster unavailable: %v", env.unavailable)
	}
}

// requireContainerd is requireCluster for the containerd runtime.
func requireContainerd(t *testing.T) {
	t.Helper()
	requireCluster(t)
	switch {
	case env.containerdBroken != nil:
		t.Fatalf("containerd setup failed: %v", env.containerdBroken)
	case env.containerdUnavailable != nil && testenv.InCI():
		t.Fatalf("containerd unavailable (required under CI): %v", env.containerdUnavailable)
	case env.containerdUnavailable != nil:
		t.Skipf("containerd unavailable: %v", env.containerdUnavailable)
	}
}

// prefixWriter prefixes every line written to it.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	var out strings.Builder
	for _, l := range lines {
		if l != "" {
			out.WriteString(p.prefix + l)
		}
	}
	if _, err := io.WriteString(p.w, out.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}
