package e2e

import (
	"context"
	"fmt"
	"os"
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

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/internal/testenv"
)

// handoverSyncFrequency is the agent's --sync-frequency in the handover
// test: short, so that the observation window after the handover spans
// more than one periodic resync of every adopted pod.
const handoverSyncFrequency = 5 * time.Second

// TestHandoverFromKubelet replaces the upstream kubelet (v1.37.2) on a node
// by a nodekit agent, as an operator would: the kubelet runs pods of several
// shapes on containerd and is stopped; the agent starts with the same node
// name, node IP, root directory, pod logs directory, cgroup root and
// containerd. The agent must adopt every running container as it is: the
// same container IDs, unchanged restart counts, no container started for an
// old pod, the pods Running and Ready throughout; and it must then own them
// (a new pod runs, a deleted old pod is stopped and removed).
func TestHandoverFromKubelet(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	const name = "handover"
	ns := "handover-" + fmt.Sprint(os.Getpid())
	k := startKubeletNode(t, name, ns)

	newNamespace(t, ns)
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
	const wantPods = 5 // 3 pods and 2 replicas
	before := waitForHandoverPods(t, ns, wantPods, "Running and Ready under the kubelet")
	t.Logf("%d pods Running and Ready under the kubelet in %s", len(before), time.Since(start).Round(100*time.Millisecond))
	criBefore := runningContainers(t, k.cri.Runtime)
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
	waitForNode(t, name, "declaring nodekit's features only", time.Minute, func(n *v1.Node) bool {
		return slices.Equal(n.Status.DeclaredFeatures, []string{"InPlacePodVerticalScalingInitContainers"})
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
}

// kubeletNode is a node run by the upstream kubelet (v1.37.2) on a
// containerd of its own, to be handed over to a nodekit agent.
type kubeletNode struct {
	name, nodeIP, cgroupRoot string
	cri                      *cluster.CRIClient
	ctrd                     *cluster.Containerd
	kubelet                  *cluster.Agent
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
// name on a containerd and cgroup root of its own and waits until the node
// is Ready. Cleanup stops it (unless handed over), puts back the kernel
// tunables it set, removes the container log links of pods of namespace
// ns it left, and unmounts its root directory.
func startKubeletNode(t *testing.T, name, ns string) *kubeletNode {
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

	k := &kubeletNode{name: name}
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
// cgroup root and containerd, as an operator would, and waits until the
// node is Ready with a heartbeat of the agent. It returns the agent
// (stopped when the test ends) and when it started.
func (k *kubeletNode) handOver(t *testing.T, extraArgs ...string) (*cluster.Agent, time.Time) {
	t.Helper()
	ctx := t.Context()
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
	agent, err := env.cp.NewAgent(cluster.AgentOptions{
		Binary: env.agent, NodeName: k.name, NodeIP: k.nodeIP, RuntimeEndpoint: k.ctrd.Endpoint, CgroupDriver: "cgroupfs",
		ExtraArgs: append([]string{"--cgroup-root=" + k.cgroupRoot}, extraArgs...),
	})
	if err != nil {
		t.Fatal(err)
	}
	if agent.Dir != k.kubelet.Dir {
		t.Fatalf("the agent's directory %s is not the kubelet's %s: they must share the root and pod logs directories", agent.Dir, k.kubelet.Dir)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log %s, last lines:\n%s", agent.LogPath, cluster.LogTail(agent.LogPath, 40))
		}
		if err := agent.Stop(); err != nil {
			t.Errorf("stop agent %s: %v", k.name, err)
		}
	})
	agentStart := time.Now()
	if err := agent.Start(ctx); err != nil {
		t.Fatalf("start agent: %v", err)
	}
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
		pod, err := env.cp.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s: %v", name, err)
			continue
		}
		if pod.UID != old.UID {
			t.Errorf("pod %s was replaced (uid %s, was %s)", name, pod.UID, old.UID)
			continue
		}
		if !isPodReady(pod) {
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
