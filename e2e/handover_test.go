package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/internal/testenv"
	"github.com/nodekit/nodekit/pods"
)

// handoverSyncFrequency is the agent's --sync-frequency in the handover
// test: short, so that the observation window after the handover spans
// more than one periodic resync of every adopted pod.
const handoverSyncFrequency = 5 * time.Second

// handoverRestartGrace is how long before the agent starts a container
// must have started for the agent to take it as running before it (the
// kubelet's 10 s, prober's kubeletRestartGracePeriod), with a margin for
// the status's one-second resolution.
const handoverRestartGrace = 12 * time.Second

// TestHandoverFromKubelet replaces the upstream kubelet (v1.37.2) on a node
// by a nodekit agent, as an operator would: the kubelet runs pods of several
// shapes and two static pods (one shaped like kubeadm's control plane
// manifests) on containerd and is stopped; the agent starts with the same
// node name, node IP, root directory, pod logs directory, cgroup root,
// manifest directory (--pod-manifest-path) and containerd. The agent must
// adopt every running container as it is: the same container IDs,
// unchanged restart counts, no container started for an old pod, the pods
// Running and Ready throughout (the static pods Running: the startup probe
// of one runs again before it is Ready, as under a restarted kubelet), the
// static pods' mirror pods kept (the same
// mirror pod UIDs and static pod UIDs: the agent gives a static pod the
// kubelet's UID, so it finds the kubelet's mirror pod current); and it must
// then own them (a new pod runs, a deleted old pod is stopped and removed,
// an edited manifest restarts its pod once, as the kubelet would, and no
// other).
func TestHandoverFromKubelet(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	const name = "handover"
	ns := "handover-" + fmt.Sprint(os.Getpid())
	// The namespace exists before the kubelet starts: it creates the
	// mirror pods at once rather than on a later sync.
	newNamespace(t, ns)
	// The static pods, in the pods' namespace: a plain one, edited after
	// the handover, and one shaped like kubeadm's control plane manifests.
	manifests := t.TempDir()
	webManifest := filepath.Join(manifests, "web.yaml")
	writeManifest(t, webManifest, staticManifest(ns, "web", "1"))
	writeManifest(t, filepath.Join(manifests, "control.yaml"), controlPlaneManifest(ns, "control", t.TempDir()))
	webPod, controlPod := "web-"+name, "control-"+name
	k := startKubeletNode(t, name, ns, manifests)

	start := time.Now()
	for _, p := range handoverPods(name, ns) {
		if _, err := env.cp.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
	d := handoverDeployment(name, ns)
	if _, err := env.cp.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const wantPods = 7 // 3 pods, 2 replicas and 2 mirror pods
	before := waitForHandoverPods(t, ns, wantPods, "Running and Ready under the kubelet")
	t.Logf("%d pods Running and Ready under the kubelet in %s", len(before), time.Since(start).Round(100*time.Millisecond))
	for _, p := range []string{webPod, controlPod} {
		if before[p].Annotations[configMirrorAnnotation] == "" {
			t.Fatalf("pod %s is not the kubelet's mirror pod: no %s annotation", p, configMirrorAnnotation)
		}
	}
	criBefore := runningContainers(t, k.cri.Runtime)
	// Like the kubelet, the agent keeps the probe results of a container
	// that started more than 10 s before it did (the kubelet's restart
	// grace period); a younger one starts over (a startup probe not yet
	// run: not started, not Ready), as on a kubelet restart. Hand over
	// older containers only, as a node in service has: wait until the
	// youngest one is old enough.
	var youngest time.Time
	for _, p := range before {
		for _, cs := range p.Status.ContainerStatuses {
			if r := cs.State.Running; r != nil && r.StartedAt.After(youngest) {
				youngest = r.StartedAt.Time
			}
		}
	}
	if d := time.Until(youngest.Add(handoverRestartGrace)); d > 0 {
		t.Logf("waiting %s for the youngest container to be older than the restart grace period", d.Round(100*time.Millisecond))
		time.Sleep(d)
	}
	kubeletNode, err := env.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(kubeletNode.Status.DeclaredFeatures, "RestartAllContainersOnContainerExits") {
		t.Fatalf("the kubelet declared %v, want its default features (RestartAllContainersOnContainerExits among them)", kubeletNode.Status.DeclaredFeatures)
	}

	agent, agentStart := k.handOver(t, "--sync-frequency="+handoverSyncFrequency.String())
	cri := k.cri
	// The node declares the agent's features, not the kubelet's leftover.
	own, err := pods.NodeDeclaredFeatures(nodekit.KubeletVersion(), pods.CRIFeatures(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitForNode(t, name, fmt.Sprintf("declaring nodekit's features only (%v)", own), time.Minute, func(n *v1.Node) bool {
		return slices.Equal(n.Status.DeclaredFeatures, own)
	})

	// A pod created now runs only if the agent syncs pods: by then it has
	// also synced every pod it found.
	fresh := handoverPod("after", name, ns)
	if _, err := env.cp.Client().CoreV1().Pods(ns).Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPod(t, ns, fresh.Name, "Running and Ready under the agent", isPodReady)

	// Watch the adopted pods over more than one periodic resync: nothing
	// may change.
	deadline := time.Now().Add(3 * handoverSyncFrequency)
	for time.Now().Before(deadline) {
		checkAdopted(t, ns, before, criBefore, runningContainers(t, cri.Runtime))
		if t.Failed() {
			t.FailNow()
		}
		time.Sleep(time.Second)
	}
	waitForAPIPod(t, ns, controlPod, "the adopted static pod Ready again once its startup probe ran", func(p *v1.Pod) bool {
		return p != nil && p.UID == before[controlPod].UID && isPodReady(p)
	})
	checkAdopted(t, ns, before, criBefore, runningContainers(t, cri.Runtime))
	m, err := agent.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("kubelet_started_containers_total", nil); got != 1 {
		t.Errorf("the agent started %v containers, want 1 (the new pod's): it restarted adopted ones", got)
	}
	t.Logf("adopted %d pods (%d containers) with 0 restarts; watched them for %s after the agent started", len(before), len(criBefore), time.Since(agentStart).Round(100*time.Millisecond))

	// The agent owns the adopted pods: deleting one stops it.
	victim := "plain"
	if err := env.cp.Client().CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := env.cp.Client().CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("adopted pod %s was not removed after its deletion: %v", victim, err)
	}
	for _, c := range runningContainers(t, cri.Runtime) {
		if c.Labels[labelPodUID] == string(before[victim].UID) {
			t.Errorf("container %s of the deleted pod %s still runs", c.Id, victim)
		}
	}

	// The agent owns the adopted static pods: an edited manifest restarts
	// its pod once (a new pod UID, the old copy stopped first, the mirror
	// pod replaced), as the kubelet does, and leaves the other one alone.
	oldWeb := before[webPod]
	writeManifest(t, webManifest, staticManifest(ns, "web", "2"))
	edited := time.Now()
	newMirror := waitForAPIPod(t, ns, webPod, "the mirror pod of the edited manifest, Running and Ready", func(p *v1.Pod) bool {
		return p != nil && p.DeletionTimestamp == nil && p.Annotations[configMirrorAnnotation] != oldWeb.Annotations[configMirrorAnnotation] && isPodReady(p)
	})
	t.Logf("edited manifest: pod restarted and its mirror pod Ready %s after the edit", time.Since(edited).Round(100*time.Millisecond))
	controlBefore := map[string]*v1.Pod{controlPod: before[controlPod]}
	controlContainers := map[string]*runtimeapi.Container{}
	for id, c := range criBefore {
		if c.Labels[labelPodName] == controlPod {
			controlContainers[id] = c
		}
	}
	// Over two resyncs: the edited pod started once, the other one not at all.
	deadline = time.Now().Add(2 * handoverSyncFrequency)
	for {
		checkRestartedOnce(t, cri.Runtime, ns, newMirror, oldWeb, criBefore)
		checkAdopted(t, ns, controlBefore, controlContainers, runningContainers(t, cri.Runtime))
		if t.Failed() {
			t.FailNow()
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if m, err = agent.Metrics(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("kubelet_started_containers_total", nil); got != 2 {
		t.Errorf("the agent started %v containers, want 2 (the new pod's and the edited static pod's)", got)
	}
}

// checkRestartedOnce checks that the static pod whose manifest was edited
// (its mirror pod was old, is now mirror) runs exactly one container that
// did not run before the handover, runs the edited command and has not
// restarted, and that its old container no longer runs.
func checkRestartedOnce(t *testing.T, rs runtimeapi.RuntimeServiceClient, ns string, mirror, old *v1.Pod, criBefore map[string]*runtimeapi.Container) {
	t.Helper()
	var fresh []*runtimeapi.ContainerStatus
	for _, c := range listContainers(t, rs, ns, mirror.Name) {
		if _, adopted := criBefore[c.Id]; adopted {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Errorf("the old container %s of the edited static pod %s still runs", c.Id, mirror.Name)
			}
			continue
		}
		fresh = append(fresh, c)
	}
	if len(fresh) != 1 || fresh[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		var states []string
		for _, c := range fresh {
			states = append(states, fmt.Sprintf("%s=%s/attempt %d", c.Id, c.State, c.GetMetadata().GetAttempt()))
		}
		t.Errorf("the edited static pod %s has new containers %v, want one, running", mirror.Name, states)
		return
	}
	if got := strings.Join(containerCommand(t, rs, fresh[0].Id), " "); !strings.Contains(got, "version=2") {
		t.Errorf("the edited static pod %s runs %q, want the edited command", mirror.Name, got)
	}
	pod, err := env.cp.Client().CoreV1().Pods(ns).Get(t.Context(), mirror.Name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("mirror pod %s: %v", mirror.Name, err)
		return
	}
	if pod.UID == old.UID || pod.UID != mirror.UID {
		t.Errorf("mirror pod %s has UID %s, want the edited pod's %s (the kubelet's was %s)", mirror.Name, pod.UID, mirror.UID, old.UID)
	}
	want := fmt.Sprintf("main=containerd://%s/restarts=0", fresh[0].Id)
	if got := containerIDs(pod); got != want {
		t.Errorf("mirror pod %s reports %s, want %s", mirror.Name, got, want)
	}
}

// controlPlaneManifest is a static pod shaped like those kubeadm writes for
// the control plane (host network, system-node-critical, RuntimeDefault
// seccomp, a DirectoryOrCreate host path under dir, CPU request, startup
// and liveness probes), running BusyboxImage.
func controlPlaneManifest(ns, name, dir string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: %[2]s
  labels: {component: %[1]s, tier: control-plane}
  annotations:
    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://127.0.0.1:2379
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile: {type: RuntimeDefault}
  terminationGracePeriodSeconds: 2
  containers:
  - name: %[1]s
    image: %[3]s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
    env:
    - {name: GOMAXPROCS, value: "1"}
    resources:
      requests: {cpu: 10m}
    startupProbe:
      exec: {command: ["true"]}
      periodSeconds: 2
      timeoutSeconds: 10
      failureThreshold: 24
    livenessProbe:
      exec: {command: ["true"]}
      periodSeconds: 10
      timeoutSeconds: 10
      failureThreshold: 8
    volumeMounts:
    - {name: data, mountPath: /var/lib/%[1]s}
  volumes:
  - name: data
    hostPath: {path: %[4]s, type: DirectoryOrCreate}
`, name, ns, cluster.BusyboxImage, filepath.Join(dir, name))
}

// kubeletNode is a node run by the upstream kubelet (v1.37.2) on a
// containerd of its own, to be handed over to a nodekit agent.
type kubeletNode struct {
	name, nodeIP, cgroupRoot string
	// manifests is the static pod manifest directory ("" for none).
	manifests string
	cri       *cluster.CRIClient
	ctrd      *cluster.Containerd
	kubelet   *cluster.Agent
	// stopped is set once the kubelet is stopped for the handover;
	// released once it gave up its hold on the kernel tunables.
	stopped, released bool
	endExcuse         func()
}

// kubeletTunables are the kernel tunables as they were before the first of
// the tests' kubelets started (they run in parallel): restored when the
// last one stops, so that no test saves another's kubelet's values.
var kubeletTunables struct {
	sync.Mutex
	holders int
	saved   cluster.KernelTunables
}

// acquireKernelTunables saves the kernel tunables unless a kubelet of
// another test holds them already, and holds them.
func acquireKernelTunables() error {
	kubeletTunables.Lock()
	defer kubeletTunables.Unlock()
	if kubeletTunables.holders == 0 {
		saved, err := cluster.SaveKernelTunables()
		if err != nil {
			return err
		}
		kubeletTunables.saved = saved
	}
	kubeletTunables.holders++
	return nil
}

// releaseKernelTunables gives up k's hold on the kernel tunables (once),
// restoring them when no other test's kubelet holds them.
func (k *kubeletNode) releaseKernelTunables() error {
	kubeletTunables.Lock()
	defer kubeletTunables.Unlock()
	if k.released {
		return nil
	}
	k.released = true
	kubeletTunables.holders--
	if kubeletTunables.holders > 0 {
		return nil
	}
	return kubeletTunables.saved.Restore()
}

// startKubeletNode builds (cached) and starts the upstream kubelet as node
// name on a containerd and cgroup root of its own, running the static pods
// of the manifest directory manifests (none if ""), and waits until the
// node is Ready. Cleanup stops it (unless handed over), puts back the kernel
// tunables it set, removes the container log links of pods of namespace
// ns it left, and unmounts its root directory.
func startKubeletNode(t *testing.T, name, ns, manifests string) *kubeletNode {
	t.Helper()
	ctx := t.Context()
	src, err := cluster.LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kubeletBin, err := cluster.BuildKubelet(ctx, cluster.BuildOptions{Source: src, Log: progress})
	switch {
	case err != nil && testenv.InCI():
		t.Fatalf("build the upstream kubelet (required under CI): %v", err)
	case err != nil:
		t.Skipf("cannot build the upstream kubelet: %v", err)
	}
	t.Logf("kubelet binary ready in %s", time.Since(start).Round(time.Second))

	k := &kubeletNode{name: name, manifests: manifests}
	// The kubelet sets kernel tunables when it starts; put them back once
	// no kubelet of a test runs.
	if err := acquireKernelTunables(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.releaseKernelTunables(); err != nil {
			t.Error(err)
		}
	})
	// The kubelet links container logs into /var/log/containers; the
	// agent that takes over its pods does not remove those links.
	_, statErr := os.Stat(cluster.ContainerLogLinks)
	t.Cleanup(func() {
		if err := cluster.RemoveLogLinks("_"+ns+"_", statErr != nil); err != nil {
			t.Error(err)
		}
	})

	k.cgroupRoot = newCgroupRoot(t, name)
	// The kubelet leaves its root directory mounted; unmount it once
	// containerd (registered later, so closed earlier) removed the pods.
	var kubeletDir string
	t.Cleanup(func() {
		if kubeletDir == "" {
			return
		}
		if err := cluster.UnmountUnder(kubeletDir); err != nil {
			t.Error(err)
		}
	})
	k.ctrd = startNodeContainerd(t, name)
	k.cri = dialCRI(t, k.ctrd)

	k.nodeIP = env.cp.AllocateNodeIP()
	k.kubelet, err = env.cp.NewKubelet(cluster.KubeletOptions{
		Binary: kubeletBin, NodeName: name, NodeIP: k.nodeIP, RuntimeEndpoint: k.ctrd.Endpoint, CgroupRoot: k.cgroupRoot,
		StaticPodPath: manifests,
	})
	if err != nil {
		t.Fatal(err)
	}
	kubeletDir = k.kubelet.Dir
	t.Cleanup(func() {
		err := env.cp.Client().CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node %s: %v", name, err)
		}
	})
	// The upstream kubelet is not held to nodekit's standard of no
	// refused request (its status manager reads pods already deleted);
	// the least-privilege check still holds it to the kubelet's scope.
	k.endExcuse = excuseDenials(name, "the upstream kubelet")
	t.Cleanup(func() {
		if k.stopped {
			return
		}
		defer k.endExcuse()
		if t.Failed() {
			t.Logf("kubelet log %s, last lines:\n%s", k.kubelet.LogPath, cluster.LogTail(k.kubelet.LogPath, 30))
		}
		if err := k.kubelet.Stop(); cluster.StopTimedOut(err) {
			t.Errorf("stop kubelet: %v", err)
		}
	})

	start = time.Now()
	if err := k.kubelet.Start(ctx); err != nil {
		t.Fatalf("start kubelet: %v", err)
	}
	waitForNode(t, name, "Ready under the kubelet", readyTimeout, isReady)
	t.Logf("kubelet start → node Ready: %s", time.Since(start).Round(100*time.Millisecond))
	return k
}

// handOver stops the kubelet and starts a nodekit agent (with extraArgs)
// with the same node name, node IP, root directory, pod logs directory,
// cgroup root, manifest directory and containerd, as an operator would,
// and waits until the node is Ready with a heartbeat of the agent. It
// returns the agent (stopped when the test ends) and when it started.
func (k *kubeletNode) handOver(t *testing.T, extraArgs ...string) (*cluster.Agent, time.Time) {
	t.Helper()
	start := time.Now()
	k.stopped = true
	err := k.kubelet.Stop()
	k.endExcuse()
	if cluster.StopTimedOut(err) {
		t.Fatalf("stop kubelet: %v", err)
	}
	if err := k.releaseKernelTunables(); err != nil {
		t.Error(err)
	}
	args := []string{"--cgroup-root=" + k.cgroupRoot}
	if k.manifests != "" {
		args = append(args, "--pod-manifest-path="+k.manifests)
	}
	agent, err := env.cp.NewAgent(cluster.AgentOptions{
		Binary: env.agent, NodeName: k.name, NodeIP: k.nodeIP, RuntimeEndpoint: k.ctrd.Endpoint, CgroupDriver: "cgroupfs",
		ExtraArgs: append(args, extraArgs...),
	})
	if err != nil {
		t.Fatal(err)
	}
	if agent.Dir != k.kubelet.Dir {
		t.Fatalf("the agent's directory %s is not the kubelet's %s: they must share the root and pod logs directories", agent.Dir, k.kubelet.Dir)
	}
	agentStart := time.Now()
	startAgentNode(t, agent)
	waitForNode(t, k.name, "Ready with a heartbeat from the agent", readyTimeout, func(n *v1.Node) bool {
		c := readyCondition(n)
		return c.Status == v1.ConditionTrue && c.LastHeartbeatTime.Time.After(agentStart.Add(-time.Second))
	})
	t.Logf("kubelet stop → agent's node Ready: %s", time.Since(start).Round(100*time.Millisecond))
	return agent, agentStart
}

// handoverPod is a pod on node that sleeps, with nothing else.
func handoverPod(name, node, ns string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{v1.LabelHostname: node},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []v1.Container{{
				Name: "main", Image: cluster.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
}

// handoverPods are pods of varied shapes: each field is one the agent could
// wrongly take for a change (the kubelet hashes only name and image).
func handoverPods(node, ns string) []*v1.Pod {
	plain := handoverPod("plain", node, ns)

	rich := handoverPod("rich", node, ns)
	c := &rich.Spec.Containers[0]
	c.Command = []string{"sh", "-c", "touch /data/ready; exec sleep 3600"}
	c.Env = []v1.EnvVar{
		{Name: "GREETING", Value: "hello"},
		{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	c.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}}
	c.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("32Mi")},
	}
	c.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	// runc's exec init runs inside the container's cgroup, 50m of CPU: on
	// a loaded CI machine it has taken more than the default 1 s three times
	// in a row, and the liveness probe restarted the container (as the
	// kubelet would). The probes are here to be adopted, not timed.
	c.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"test", "-f", "/data/ready"}}}, PeriodSeconds: 2, TimeoutSeconds: 10}
	c.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 5, TimeoutSeconds: 10}
	c.Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo started > /data/poststart"}}}}
	c.SecurityContext = &v1.SecurityContext{RunAsUser: ptr.To[int64](1000), AllowPrivilegeEscalation: ptr.To(false)}
	c.TerminationMessagePolicy = v1.TerminationMessageFallbackToLogsOnError
	rich.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}

	withInit := handoverPod("with-init", node, ns)
	withInit.Spec.InitContainers = []v1.Container{{
		Name: "setup", Image: cluster.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
		Command: []string{"sh", "-c", "echo init done"},
	}}
	withInit.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")}
	return []*v1.Pod{plain, rich, withInit}
}

// handoverDeployment runs two replicas of a sleeping pod on node.
func handoverDeployment(node, ns string) *appsv1.Deployment {
	labels := map[string]string{"app": "handover"}
	tmpl := handoverPod("", node, ns)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec},
		},
	}
}

// waitForHandoverPods waits until ns holds want pods, all Running and
// Ready, and returns them by name.
func waitForHandoverPods(t *testing.T, ns string, want int, what string) map[string]*v1.Pod {
	t.Helper()
	var last []v1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := env.cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		last = list.Items
		if len(last) != want {
			return false, nil
		}
		for i := range last {
			if !isPodReady(&last[i]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var b strings.Builder
		for i := range last {
			b.WriteString("\n" + describePod(t, &last[i]))
		}
		t.Fatalf("%d pods in %s %s: %v (want %d)%s", len(last), ns, what, err, want, b.String())
	}
	out := make(map[string]*v1.Pod, len(last))
	for i := range last {
		out[last[i].Name] = &last[i]
	}
	return out
}

// runningContainers lists the runtime's running containers by ID.
func runningContainers(t *testing.T, cri runtimeapi.RuntimeServiceClient) map[string]*runtimeapi.Container {
	t.Helper()
	resp, err := cri.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		t.Fatalf("CRI ListContainers: %v", err)
	}
	out := make(map[string]*runtimeapi.Container, len(resp.Containers))
	for _, c := range resp.Containers {
		out[c.Id] = c
	}
	return out
}

// checkAdopted compares the pods and the runtime's containers with what
// they were under the kubelet: every old pod still there, Running and
// Ready, with the same container IDs and restart counts, every old
// container still running, and no new container in an old pod.
func checkAdopted(t *testing.T, ns string, before map[string]*v1.Pod, criBefore, criNow map[string]*runtimeapi.Container) {
	t.Helper()
	ctx := t.Context()
	oldUIDs := map[string]string{}
	for name, old := range before {
		oldUIDs[string(old.UID)] = name
		static := old.Annotations[configMirrorAnnotation]
		if static != "" {
			oldUIDs[static] = name // a mirror pod's: its containers carry the static pod's UID
		}
		pod, err := env.cp.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s: %v", name, err)
			continue
		}
		if pod.UID != old.UID {
			t.Errorf("pod %s was replaced (uid %s, was %s)", name, pod.UID, old.UID)
			continue
		}
		if got := pod.Annotations[configMirrorAnnotation]; got != static {
			t.Errorf("mirror pod %s names the static pod %q, was %q", name, got, static)
		}
		switch {
		case static != "":
			// A static pod's status starts afresh when the node agent
			// restarts, the kubelet's too (its previous status is the
			// manifest's, empty): a container with a startup probe is
			// not started, so not Ready, until the probe has run again.
			// It keeps running.
			if pod.Status.Phase != v1.PodRunning {
				t.Errorf("static pod %s is no longer Running:\n%s", name, describePod(t, pod))
			}
		case !isPodReady(pod):
			t.Errorf("pod %s is no longer Running and Ready:\n%s", name, describePod(t, pod))
		}
		if got, want := containerIDs(pod), containerIDs(old); got != want {
			t.Errorf("pod %s containers changed:\n  now    %s\n  before %s", name, got, want)
		}
	}
	var ids []string
	for id := range criBefore {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if _, ok := criNow[id]; !ok {
			c := criBefore[id]
			t.Errorf("container %s (%s of pod %s) no longer runs", id, c.Labels[labelContainerName], c.Labels[labelPodName])
		}
	}
	for id, c := range criNow {
		if _, old := criBefore[id]; !old && oldUIDs[c.Labels[labelPodUID]] != "" {
			t.Errorf("new container %s (%s, attempt %d) in adopted pod %s", id, c.Labels[labelContainerName], c.GetMetadata().GetAttempt(), c.Labels[labelPodName])
		}
	}
}

// containerIDs sums up a pod's container statuses: name, ID, restart count.
func containerIDs(pod *v1.Pod) string {
	var parts []string
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			parts = append(parts, fmt.Sprintf("%s=%s/restarts=%d", cs.Name, cs.ContainerID, cs.RestartCount))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
