package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/mount-utils"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/volume"
)

// TestRestartKillsNoRunningPod: an agent restarted many times over 110
// running pods stops none of them and deletes none of their emptyDir data.
// On every restart an admit handler holds the loop halfway through the API
// server's first update: the sources must not be ready there (the loop's
// own readiness: every source's first update handled, not only received),
// and it waits until the PLEG's first relist has made the runtime's running
// pods known; housekeeping (every millisecond, waiting for the loop's lock
// meanwhile) then runs between the remaining admissions, and only that
// readiness keeps it from taking the pods not admitted yet for orphans. The
// test waits for conditions only; its one bound is the whole test's.
func TestRestartKillsNoRunningPod(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts an agent over 110 pods several times")
	}
	const nPods, restarts = 110, 3
	srv, endpoint := agenttest.StartFakeCRI(t, fakecri.Options{PullAny: true})
	client := fake.NewClientset()
	cfg := agenttest.Config(t, "node-a", endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := &agenttest.Node{T: t, Name: "node-a", Client: client, Config: cfg}

	var all []*v1.Pod
	app, ctrl, rt := startRestartable(ctx, t, cfg, client, 0)
	n.WaitReady(ctx)
	for i := range nPods {
		p := agenttest.Pod(fmt.Sprintf("p%03d", i), "busybox")
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		all = append(all, n.CreatePod(ctx, p))
	}
	for _, p := range all {
		n.WaitForPod(ctx, p, agenttest.PodRunningAndReady)
	}
	// Every pod's emptyDir holds a file that must survive the restarts.
	dataFile := func(uid types.UID) string {
		return filepath.Join(cfg.RootDir, "pods", string(uid), "volumes", "kubernetes.io~empty-dir", "data", "keep")
	}
	for _, p := range all {
		if err := os.WriteFile(dataFile(p.UID), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitAdmitted(ctx, t, ctrl, rt, nPods)
	app.RequireStop()
	stops := srv.Calls("StopPodSandbox") + srv.Calls("StopContainer")

	for i := range restarts {
		app, ctrl, rt = startRestartable(ctx, t, cfg, client, nPods/2)
		waitAdmitted(ctx, t, ctrl, rt, nPods)
		app.RequireStop()
		if kills, got := rt.kills.Load(), srv.Calls("StopPodSandbox")+srv.Calls("StopContainer"); kills != 0 || got != stops {
			t.Fatalf("restart %d: %d pods killed, %d sandbox or container stops; want none: housekeeping took pods not admitted yet for orphans", i+1, kills, got-stops)
		}
	}
	for _, p := range all {
		if _, err := os.Stat(dataFile(p.UID)); err != nil {
			t.Errorf("pod %s: emptyDir data lost: %v", p.Name, err)
		}
	}
}

// startRestartable starts an agent on cfg and client with housekeeping
// every millisecond and returns it with its pod lifecycle loop and its
// runtime, counted. With holdAt > 0, the holdAt-th pod's admission checks
// that the sources are not ready yet and waits (until ctx ends) for the
// PLEG's first complete relist, which makes the runtime's running pods
// known.
func startRestartable(ctx context.Context, t *testing.T, cfg *agent.Config, client *fake.Clientset, holdAt int) (*fxtest.App, *pods.Controller, *countingRuntime) {
	t.Helper()
	var (
		ctrl *pods.Controller
		pleg *runtime.PLEG
	)
	rt := &countingRuntime{}
	var admitted atomic.Int64
	hold := pods.AdmitFunc(func(pods.AdmitAttributes) pods.AdmitResult {
		if admitted.Add(1) != int64(holdAt) {
			return pods.AdmitResult{Admit: true}
		}
		// What housekeeping, garbage collection and the volume manager
		// read: halfway through the first update, the sources are not
		// ready, whatever the timing.
		if ctrl.SourcesReady() {
			t.Errorf("the sources are ready while the loop is halfway through the API server's first update (%d of its pods admitted)", holdAt-1)
		}
		// No status is newer than the zero time until the PLEG's first
		// relist is complete (PodCache.UpdateTime), and none of a pod the
		// runtime does not hold arrives any other way.
		if _, err := pleg.Cache().GetNewerThan(ctx, "not-a-pod", time.Time{}); err != nil {
			t.Errorf("the PLEG's first relist after a restart did not complete: %v", err)
			return pods.AdmitResult{Admit: true}
		}
		if running, _ := rt.Backend.RuntimePods(ctx); len(running) < holdAt*2 {
			t.Errorf("after the PLEG's first relist the runtime runs %d pods, want %d", len(running), holdAt*2)
		}
		return pods.AdmitResult{Admit: true}
	})
	app := fxtest.New(t, fx.Supply(cfg), agent.Core, agent.CRI,
		pods.AsAdmitHandler("HoldHalfway", pods.OrderGeneralPredicates+1, hold),
		fx.Replace(&agent.Clients{Client: client, Heartbeat: client}),
		fx.Decorate(func(o volume.Options) volume.Options {
			o.Mounter = mount.NewFakeMounter(nil)
			o.CleanupPeriod = time.Millisecond
			return o
		}),
		fx.Decorate(func(o pods.Options) pods.Options {
			o.HousekeepingPeriod = time.Millisecond
			return o
		}),
		fx.Decorate(func(b *runtime.Backend) pods.Runtime {
			rt.Backend = b
			return rt
		}),
		fx.Populate(&ctrl, &pleg))
	app.RequireStart()
	return app, ctrl, rt
}

// countingRuntime counts the loop's KillPod and RuntimePods calls (the
// latter are housekeeping rounds).
type countingRuntime struct {
	*runtime.Backend
	kills, lists atomic.Int64
}

func (r *countingRuntime) KillPod(ctx context.Context, pod *v1.Pod, grace *int64) error {
	r.kills.Add(1)
	return r.Backend.KillPod(ctx, pod, grace)
}

func (r *countingRuntime) RuntimePods(ctx context.Context) ([]*v1.Pod, error) {
	r.lists.Add(1)
	return r.Backend.RuntimePods(ctx)
}

// waitAdmitted waits until the loop runs want pods and housekeeping has
// looked for orphans several times since.
func waitAdmitted(ctx context.Context, t *testing.T, ctrl *pods.Controller, rt *countingRuntime, want int) {
	t.Helper()
	if err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(ctrl.ActivePods()) == want, nil
	}); err != nil {
		t.Fatalf("%d of %d pods admitted: %v", len(ctrl.ActivePods()), want, err)
	}
	lists := rt.lists.Load()
	if err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		return rt.lists.Load() >= lists+5, nil
	}); err != nil {
		t.Fatalf("housekeeping did not run: %v", err)
	}
}
