package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// claimTests are README claims that unit tests alone held: each runs in
// seconds, in parallel, on one containerd node.
var claimTests = []podTest{
	{name: "native sidecar starts before the main container and keeps running", run: testNativeSidecar},
	{name: "hostPath directory is the host's, DirectoryOrCreate creates it", run: testHostPath},
	{name: "tcpSocket readiness probe follows the listener", run: testTCPSocketReadiness},
	{name: "imagePullSecrets pull from a registry that wants credentials", run: testPullSecret},
	{name: "container GC keeps one dead instance per container, never the running one", run: testContainerGC},
}

// TestReadmeClaimsOnContainerd runs claimTests on a node agent of its own
// on a containerd of its own.
func TestReadmeClaimsOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	n := newContainerdPodNode(t, "ctr-claims")
	for _, tc := range claimTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, n)
		})
	}
}

// testNativeSidecar: an init container with restartPolicy Always (a
// sidecar) must be started — and its startup probe passed — before the
// main container starts, and must still run beside it once the pod is
// Ready; the pod's phase is Running.
func testNativeSidecar(t *testing.T, n *podNode) {
	pod := n.pod("sidecar", "sleep", "3600")
	pod.Spec.InitContainers = []v1.Container{{
		Name:            "side",
		Image:           pod.Spec.Containers[0].Image,
		ImagePullPolicy: v1.PullIfNotPresent,
		Command:         []string{"sh", "-c", "sleep 3; touch /tmp/up; sleep 3600"},
		RestartPolicy:   ptr.To(v1.ContainerRestartPolicyAlways),
		StartupProbe: &v1.Probe{
			ProbeHandler:  execAction("cat", "/tmp/up"),
			PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 60,
		},
	}}
	pod = n.createPod(t, pod)
	ready := waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	if ready.Status.Phase != v1.PodRunning {
		t.Errorf("pod phase %s, want Running", ready.Status.Phase)
	}
	if len(ready.Status.InitContainerStatuses) != 1 {
		t.Fatalf("init container statuses %+v, want the sidecar's", ready.Status.InitContainerStatuses)
	}
	side := ready.Status.InitContainerStatuses[0]
	main, _ := mainStatus(ready)
	if side.State.Running == nil || !ptr.Deref(side.Started, false) || side.RestartCount != 0 {
		t.Fatalf("sidecar status %+v, want running, started, never restarted", side)
	}
	if main.State.Running == nil {
		t.Fatalf("main container state %s, want running", stateString(main.State))
	}
	// The main container starts once the sidecar's startup probe passed
	// (its marker 3 s after it started; StartedAt has whole seconds).
	gap := main.State.Running.StartedAt.Sub(side.State.Running.StartedAt.Time)
	if gap < 2*time.Second {
		t.Errorf("main container started %s after the sidecar, want after the sidecar's startup probe passed (≥ 3 s)", gap)
	}
	t.Logf("sidecar started, main container %s later, pod Ready", gap)
}

// testHostPath: a hostPath directory is the host's own (a file the test
// writes is read in the container, one the container writes lands on the
// host), and type DirectoryOrCreate creates a missing directory.
func testHostPath(t *testing.T, n *podNode) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "from-host"), []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	created := filepath.Join(dir, "made", "by", "the-agent")
	pod := n.pod("hostpath", "sh", "-c", "cat /host/from-host; echo pod-wrote > /host/from-pod; ls -d /made && echo made-exists; sleep 3600")
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "host", MountPath: "/host"}, {Name: "made", MountPath: "/made"}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr.To(v1.HostPathDirectory)}}},
		{Name: "made", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: created, Type: ptr.To(v1.HostPathDirectoryOrCreate)}}},
	}
	pod = n.createPod(t, pod)
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	n.waitForLogLine(t, pod, "main", "with the host's file", func(l string) bool { return l == "hello from the host" })
	n.waitForLogLine(t, pod, "main", "with the created directory", func(l string) bool { return l == "made-exists" })
	data, err := os.ReadFile(filepath.Join(dir, "from-pod"))
	if err != nil || strings.TrimSpace(string(data)) != "pod-wrote" {
		t.Errorf("file the pod wrote on the host: %q, %v; want pod-wrote", data, err)
	}
	if fi, err := os.Stat(created); err != nil || !fi.IsDir() {
		t.Errorf("DirectoryOrCreate path %s on the host: %v, want a directory", created, err)
	}
}

// testTCPSocketReadiness: a tcpSocket readiness probe on the pod's IP keeps
// the pod not Ready until the container listens (3 s after it started),
// then Ready.
func testTCPSocketReadiness(t *testing.T, n *podNode) {
	pod := n.pod("tcp-ready", "sh", "-c", "sleep 3; exec nc -ll -p 8080 -e true")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 3,
	}
	pod = n.createPod(t, pod)
	ready := waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	cs, _ := mainStatus(ready)
	c := findPodCondition(ready, v1.ContainersReady)
	if cs.State.Running == nil || c == nil || c.Status != v1.ConditionTrue {
		t.Fatalf("container %s, ContainersReady %+v: want running and ready", stateString(cs.State), c)
	}
	// Whole seconds on both sides: the listener at 3 s is 2 s at least.
	if after := c.LastTransitionTime.Sub(cs.State.Running.StartedAt.Time); after < 2*time.Second {
		t.Errorf("ready %s after the container started, before it listened (3 s)", after)
	}
}

// containerGCTimeout bounds the wait for a container garbage collection
// pass: they run every minute (the kubelet's ContainerGCPeriod), so two
// periods and a margin.
const containerGCTimeout = 2*time.Minute + 15*time.Second

// testContainerGC: a container that fails twice, then runs (its runs are
// counted in an emptyDir, which outlives them), leaves two dead instances
// in the runtime; the periodic garbage collection removes the older one —
// the kubelet keeps --maximum-dead-containers-per-container (1) — and never
// the running one. Dead containers are counted in the CRI, as `crictl ps
// -a` shows them.
func testContainerGC(t *testing.T, n *podNode) {
	pod := n.pod("gc", "sh", "-c", `n=$(ls /runs | wc -l); touch /runs/$n; [ "$n" -ge 2 ] && exec sleep 3600; exit 1`)
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "runs", MountPath: "/runs"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "runs", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod = n.createPod(t, pod)
	// From the first run on: the dead instances seen, by attempt; the
	// running one's ID once it runs.
	dead := map[uint32]bool{}
	var running string
	deadNow := func() []uint32 {
		var attempts []uint32
		for _, c := range n.criContainers(t, pod.UID, false) {
			switch c.State {
			case runtimeapi.ContainerState_CONTAINER_RUNNING:
				if running != "" && c.Id != running {
					t.Fatalf("container %s runs, want %s (the third run, which never exits)", c.Id, running)
				}
				if c.Metadata.Attempt == 2 {
					running = c.Id
				}
			case runtimeapi.ContainerState_CONTAINER_EXITED:
				dead[c.Metadata.Attempt] = true
				attempts = append(attempts, c.Metadata.Attempt)
			}
		}
		return attempts
	}
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		deadNow()
		return running != "" && dead[0] && dead[1], nil
	})
	if err != nil {
		t.Fatalf("no third run with two dead instances before it within %s: dead %v, running %q", podTimeout, dead, running)
	}
	start := time.Now()
	var left []uint32
	err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, containerGCTimeout, true, func(context.Context) (bool, error) {
		left = deadNow()
		if len(left) == 0 {
			t.Fatalf("every dead instance was removed; the newest is kept (--maximum-dead-containers-per-container 1)")
		}
		return len(left) == 1, nil
	})
	if err != nil {
		t.Fatalf("dead instances %v still in the runtime %s later, want one after a garbage collection pass", left, containerGCTimeout)
	}
	if left[0] != 1 {
		t.Errorf("the garbage collector kept attempt %d, want the newest dead one (1)", left[0])
	}
	if got := n.criContainers(t, pod.UID, true); len(got) != 1 || got[0].Id != running {
		t.Errorf("running containers after GC %v, want %s", got, running)
	}
	t.Logf("garbage collection left the newest dead instance and the running one, %s after the third run was seen", time.Since(start).Round(time.Second))
}
