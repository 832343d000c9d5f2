package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// TestStaticPodMovedOutAndBackRunsAgain moves a static pod's manifest out
// of the manifest directory and back while the pod's container still takes
// its grace period to stop (it ignores SIGTERM): the manifest is the same,
// so the pod comes back with the same UID while its old copy terminates.
// The agent must start it again once the old copy stopped, as the kubelet
// does (its pod workers' restartRequested), rather than drop it for good.
func TestStaticPodMovedOutAndBackRunsAgain(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	const name = "ctr-static-back"
	ctx := t.Context()
	cgroupRoot := newCgroupRoot(t, name)
	c := startNodeContainerd(t, name)
	cri := dialCRI(t, c)
	ns := newNamespace(t, name)

	manifests, aside := t.TempDir(), t.TempDir()
	manifestPath := filepath.Join(manifests, "keeper.yaml")
	// sleep is the container's PID 1, which SIGTERM does not stop: the
	// stop takes the whole grace period (20 s).
	writeManifest(t, manifestPath, `apiVersion: v1
kind: Pod
metadata:
  name: keeper
  namespace: `+ns+`
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: main
    image: `+cluster.BusyboxImage+`
    command: ["sleep", "3600"]
`)
	agent, err := env.cp.NewAgent(cluster.AgentOptions{
		Binary:          env.agent,
		NodeName:        name,
		RuntimeEndpoint: c.Endpoint,
		CgroupDriver:    "cgroupfs",
		ExtraArgs:       []string{"--cgroup-root=" + cgroupRoot, "--pod-manifest-path=" + manifests},
	})
	if err != nil {
		t.Fatal(err)
	}
	startAgentNode(t, agent)
	waitForNode(t, name, "Ready", readyTimeout, isReady)
	keeper := "keeper-" + name
	mirror := waitForAPIPod(t, ns, keeper, "the mirror pod, Running", func(p *v1.Pod) bool {
		return p != nil && p.Status.Phase == v1.PodRunning
	})
	first := runningStatuses(listContainers(t, cri.Runtime, ns, keeper))
	if len(first) != 1 {
		t.Fatalf("%d running containers of the static pod, want 1", len(first))
	}

	// Out: the agent starts stopping the pod (20 s); nothing but its log
	// shows that until the grace period is over.
	asidePath := filepath.Join(aside, "keeper.yaml")
	if err := os.Rename(manifestPath, asidePath); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		log, err := os.ReadFile(agent.LogPath)
		return err == nil && bytes.Contains(log, []byte(`"Killing container with a grace period"`)) && bytes.Contains(log, []byte(keeper)), nil
	})
	if err != nil {
		t.Fatalf("the agent did not start stopping the moved-out pod: %v", err)
	}
	// Back, while the old copy still runs out its grace period.
	if err := os.Rename(asidePath, manifestPath); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if r := runningStatuses(listContainers(t, cri.Runtime, ns, keeper)); len(r) != 1 || r[0].Id != first[0].Id {
		t.Fatalf("the old copy stopped %v after the move, before the manifest was back: the test did not move it back within the grace period", time.Since(moved).Round(time.Millisecond))
	}
	t.Logf("manifest moved back %v after it was moved out, the old container still stopping", back.Sub(moved).Round(time.Millisecond))

	again := waitForContainers(t, cri.Runtime, ns, keeper, "a new container of the static pod", func(cs []*runtimeapi.ContainerStatus) bool {
		r := runningStatuses(cs)
		return len(r) == 1 && r[0].Id != first[0].Id
	})
	newest := runningStatuses(again)[0]
	for _, old := range again {
		if old.Id == first[0].Id && (old.State != runtimeapi.ContainerState_CONTAINER_EXITED || old.FinishedAt > newest.CreatedAt) {
			t.Errorf("the old copy (state %v, finished at %d) still ran when the new one was created (%d)", old.State, old.FinishedAt, newest.CreatedAt)
		}
	}
	m := waitForAPIPod(t, ns, keeper, "the mirror pod back, Running", func(p *v1.Pod) bool {
		return p != nil && p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil
	})
	if m.Annotations[configMirrorAnnotation] != mirror.Annotations[configMirrorAnnotation] {
		t.Errorf("the mirror pod's config hash changed from %s to %s; the manifest did not", mirror.Annotations[configMirrorAnnotation], m.Annotations[configMirrorAnnotation])
	}
	t.Logf("static pod running again %v after its manifest came back", time.Since(back).Round(time.Millisecond))
}
