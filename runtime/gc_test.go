package runtime_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// crashTimes makes container app of pod exit and restart n times, ten
// minutes apart, leaving n dead instances and a running one.
func (h *harness) crashTimes(pod *v1.Pod, n int) {
	h.t.Helper()
	h.sync(pod, nil)
	for range n {
		h.exitNow(pod, "app", 1)
		h.clk.Step(10 * time.Minute)
		h.sync(pod, nil)
	}
}

// dead returns the restart counts of the pod's dead instances of app,
// newest first.
func (h *harness) dead(pod *v1.Pod) []int {
	h.t.Helper()
	var out []int
	for _, c := range h.status(pod).Containers {
		if c.Name == "app" && c.State == podstate.ContainerStateExited {
			out = append(out, c.RestartCount)
		}
	}
	return out
}

func keepAll(types.UID) bool { return false }

func gcPolicy(p runtime.ContainerGCPolicy) func(*runtime.PodManagerOptions) {
	return func(o *runtime.PodManagerOptions) { o.ContainerGC = &p }
}

// TestContainerGCPolicy: the kubelet's policy on fakecri — dead instances
// per container, dead containers on the node (an equal share per
// container, then the oldest), and the minimum age.
func TestContainerGCPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy runtime.ContainerGCPolicy
		wantA  []int
		wantB  []int
	}{
		{name: "default keeps one per container", policy: runtime.DefaultContainerGCPolicy(),
			wantA: []int{2}, wantB: []int{1}},
		{name: "two per container", policy: runtime.ContainerGCPolicy{MaxPerPodContainer: 2, MaxContainers: -1},
			wantA: []int{2, 1}, wantB: []int{1, 0}},
		{name: "no limit per container", policy: runtime.ContainerGCPolicy{MaxPerPodContainer: -1, MaxContainers: -1},
			wantA: []int{2, 1, 0}, wantB: []int{1, 0}},
		{name: "node limit shares evenly", policy: runtime.ContainerGCPolicy{MaxPerPodContainer: -1, MaxContainers: 3},
			wantA: []int{2}, wantB: []int{1}},
		{name: "node limit below one each removes the oldest", policy: runtime.ContainerGCPolicy{MaxPerPodContainer: -1, MaxContainers: 1},
			// b crashed last, so its newest dead instance is the newest.
			wantA: nil, wantB: []int{1}},
		{name: "young containers are kept", policy: runtime.ContainerGCPolicy{MinAge: 35 * time.Minute, MaxPerPodContainer: 0, MaxContainers: -1},
			// The dead instances of a were created 50m, 40m and 30m
			// before GC, those of b 20m and 10m: only a's first two are
			// old enough to go.
			wantA: []int{2}, wantB: []int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakecri.Options{}, gcPolicy(tc.policy))
			a, b := newPod("a", ctr("app")), newPod("b", ctr("app"))
			h.crashTimes(a, 3)
			h.crashTimes(b, 2)
			if err := h.pm.GarbageCollect(h.ctx, keepAll); err != nil {
				t.Fatal(err)
			}
			if got := h.dead(a); !slices.Equal(got, tc.wantA) {
				t.Errorf("dead instances of a: %v, want %v", got, tc.wantA)
			}
			if got := h.dead(b); !slices.Equal(got, tc.wantB) {
				t.Errorf("dead instances of b: %v, want %v", got, tc.wantB)
			}
			for _, p := range []*v1.Pod{a, b} {
				if c := h.container(p, "app"); c.State != podstate.ContainerStateRunning {
					t.Errorf("pod %s: the running instance was touched: %+v", p.Name, c)
				}
			}
		})
	}
}

// TestContainerGCSandboxesAndLogs: GC removes the dead sandboxes of a live
// pod but its newest, everything of a removed pod that runs nothing, and
// the log directories of removed pods the runtime no longer has.
func TestContainerGCSandboxesAndLogs(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("sb", ctr("app"))
	h.sync(pod, nil)
	// The sandbox dies: the next sync kills the pod and makes a new one.
	if err := h.cri.StopSandbox(h.status(pod).Sandboxes[0].ID); err != nil {
		t.Fatal(err)
	}
	h.inBackground(time.Second, func() { h.sync(pod, nil) })
	if n := len(h.status(pod).Sandboxes); n != 2 {
		t.Fatalf("%d sandboxes, want 2 after the sandbox died", n)
	}
	// A log directory of a pod long gone from the runtime.
	stale := filepath.Join(h.logsDir, "default_gone_uid-gone")
	must(t, os.MkdirAll(filepath.Join(stale, "app"), 0o755))

	removed := func(uid types.UID) bool { return uid == "uid-gone" }
	// The old sandbox still holds the dead container: the default policy
	// keeps one dead instance, so the sandbox stays.
	if err := h.pm.GarbageCollect(h.ctx, removed); err != nil {
		t.Fatal(err)
	}
	if n := len(h.status(pod).Sandboxes); n != 2 {
		t.Fatalf("%d sandboxes, want 2: the old one holds the kept dead container", n)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("log directory of a removed pod still there: %v", err)
	}
	h2 := newHarness(t, fakecri.Options{}, gcPolicy(runtime.ContainerGCPolicy{MaxPerPodContainer: 0, MaxContainers: -1}))
	pod2 := newPod("sb", ctr("app"))
	h2.sync(pod2, nil)
	must(t, h2.cri.StopSandbox(h2.status(pod2).Sandboxes[0].ID))
	h2.inBackground(time.Second, func() { h2.sync(pod2, nil) })
	if err := h2.pm.GarbageCollect(h2.ctx, keepAll); err != nil {
		t.Fatal(err)
	}
	st := h2.status(pod2)
	if len(st.Sandboxes) != 1 || !st.Sandboxes[0].Ready || len(st.Containers) != 1 {
		t.Fatalf("after GC without dead instances kept: sandboxes %+v containers %+v, want only the live ones", st.Sandboxes, st.Containers)
	}
}

// TestDeleteAllUnusedContainers: for the eviction manager, every dead
// container of a pod that is no longer active goes, whatever the policy;
// an active pod keeps its policy's share.
func TestDeleteAllUnusedContainers(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	active, done := newPod("active", ctr("app")), newPod("done", ctr("app"))
	h.crashTimes(active, 2)
	done.Spec.RestartPolicy = v1.RestartPolicyNever
	h.sync(done, nil)
	h.exitNow(done, "app", 0)
	h.clk.Step(time.Minute)
	h.sync(done, nil) // nothing left to run: the sandbox is stopped
	isActive := func(uid types.UID) bool { return uid == active.UID }
	if err := h.pm.DeleteAllUnusedContainers(h.ctx, keepAll, isActive); err != nil {
		t.Fatal(err)
	}
	if got := h.dead(active); !slices.Equal(got, []int{1}) {
		t.Errorf("active pod's dead instances %v, want the newest only", got)
	}
	st := h.status(done)
	if len(st.Containers) != 0 || len(st.Sandboxes) != 0 {
		t.Errorf("terminated pod keeps containers %+v sandboxes %+v", st.Containers, st.Sandboxes)
	}
}

// TestRemovePodStaysInLogsDir: a sandbox whose metadata names a namespace
// with a path in it (a runtime's odd reply; FuzzCRIReplies found it) must
// not make RemovePod delete a directory outside the pod logs directory.
func TestRemovePodStaysInLogsDir(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	pod := newPod("logs", ctr("app"))
	h.sync(pod, nil)
	must(t, h.pm.KillPod(h.ctx, pod, h.status(pod).RunningPod(), nil))
	outside := filepath.Join(filepath.Dir(h.logsDir), "outside_logs_"+string(pod.UID))
	must(t, os.MkdirAll(outside, 0o755))
	h.cri.SetReplyRewriter(func(_ string, _ any, reply proto.Message) (proto.Message, error) {
		if r, ok := reply.(*runtimeapi.ListPodSandboxResponse); ok {
			for _, sb := range r.Items {
				sb.Metadata.Namespace = "../outside"
			}
		}
		return reply, nil
	})
	must(t, h.pm.RemovePod(h.ctx, pod.UID))
	if _, err := os.Stat(outside); err != nil {
		t.Fatalf("RemovePod removed %s, outside the pod logs directory %s: %v", outside, h.logsDir, err)
	}
	if _, err := os.Stat(runtime.PodLogsDirectory(h.logsDir, pod.Namespace, pod.Name, pod.UID)); !os.IsNotExist(err) {
		t.Errorf("the pod's own log directory is still there: %v", err)
	}
}
