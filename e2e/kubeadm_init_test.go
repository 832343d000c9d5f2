package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// kubeadmInitSkippedAddons are the phases of `kubeadm init` the test skips
// with kubeadm's --skip-phases, by the image each would need: CoreDNS is
// not part of k8s.io/kubernetes, so its image cannot be built from the
// pinned modules, and kube-proxy's would need iptables and its kernel
// modules in the image, which a one-binary image does not hold. Neither
// is needed for the node to be Ready or the control plane to run.
var kubeadmInitSkippedAddons = map[string]string{
	"coredns":    "addon/coredns",
	"kube-proxy": "addon/kube-proxy",
}

// kubeadmImageRepository is the ClusterConfiguration's imageRepository:
// the images the test builds and imports are named after it, so that
// kubeadm finds every one it needs and pulls none.
const kubeadmImageRepository = "nodekit.local/kubeadm"

// kubeadmInitAddress is the node's address, in a network namespace of its
// own: the control plane's fixed ports (6443, 2379, 2380, 2381, 10257,
// 10259, the kubelet's 10248 and 10250) are then the namespace's, free
// whatever the host runs, and kubeadm gets the non-loopback address it
// requires to advertise.
const kubeadmInitAddress = "10.250.0.10"

// TestKubeadmInitOnContainerd sets up a control plane node with `kubeadm
// init`, nodekit's agent as its kubelet. kubeadm (v1.37.2, built from the
// pinned k8s.io/kubernetes) names the images it needs (`kubeadm config
// images list`): etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler are built statically from the pinned modules, packed one
// binary to an image under kubeadm's names and imported into the node's
// containerd, whose sandbox image is the harness's pause program under
// kubeadm's pause name; the addons whose images are not built (CoreDNS,
// kube-proxy) are skipped with kubeadm's own --skip-phases. The node is a
// cluster.NodeRoot with a network namespace of its own: /etc/kubernetes,
// /var/lib/kubelet, /var/lib/etcd and /var/log/pods are the test's, the
// control plane's fixed ports the namespace's; containerd runs in it too,
// so that the static pods' host paths and host network are the node's.
// Once kubeadm has written the kubelet's files the test starts the agent
// with exactly the command line of kubeadm's drop-in and
// kubeadm-flags.env. kubeadm must then see the control plane come up as
// static pods and finish; the node must be Ready in `kubectl get nodes`
// and the mirror pods of etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler Running.
func TestKubeadmInitOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	const name = "kubeadm-init"
	ctx := t.Context()
	src, err := cluster.LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	kubeadm, err := cluster.BuildKubeadm(ctx, cluster.BuildOptions{Source: src, Log: progress})
	if err != nil {
		t.Fatal(err)
	}
	static, err := cluster.BuildControlPlane(ctx, cluster.BuildOptions{Source: src, Log: progress})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	binDir, kubeadmEnv := kubeadmMachine(t, dir)
	hostEtcd := dirEntries(t, "/var/lib/etcd")

	// Removed last: after containerd removed the pods in it.
	cgroupRoot := newCgroupRoot(t, name)
	root, err := cluster.NewNodeRootWith(ctx, cluster.NodeRootOptions{
		Dir: filepath.Join(dir, "root"),
		// etcd's data directory (a hostPath in its manifest) and the
		// containers' logs.
		Paths:   []string{"/var/lib/etcd", "/var/log/pods"},
		Address: kubeadmInitAddress + "/24",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(root.Close)

	ctrDir := filepath.Join(env.dir, "containerd-"+name)
	criEndpoint := "unix://" + filepath.Join(ctrDir, "containerd.sock")
	cgroupV1 := hostOnCgroupV1(t)
	config := filepath.Join(dir, "kubeadm.yaml")
	kubeletConfig := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		// The harness's containerd runs runc with cgroupfs (kubeadm's
		// default is systemd), the node's pods below a cgroup of the
		// test's. The harness's disk thresholds: below kubeadm's
		// defaults, the shared disk would have the agent reclaim space by
		// removing the side-loaded control plane images.
		"cgroupDriver": "cgroupfs", "cgroupRoot": cgroupRoot,
	}
	maps.Copy(kubeletConfig, cluster.SharedDiskKubeletConfig())
	if cgroupV1 {
		kubeletConfig["failCgroupV1"] = false
	}
	writeYAMLDocs(t, config, map[string]any{
		"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
		"localAPIEndpoint": map[string]any{"advertiseAddress": kubeadmInitAddress, "bindPort": 6443},
		"nodeRegistration": map[string]any{
			"name": name, "criSocket": criEndpoint,
			// Into kubeadm-flags.env: the node's address is given, so the
			// kubelet looks up no name (the namespace has no route to the
			// host's resolver).
			"kubeletExtraArgs": []any{map[string]any{"name": "node-ip", "value": kubeadmInitAddress}},
		},
	}, map[string]any{
		"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
		"kubernetesVersion": static.KubernetesVersion,
		"imageRepository":   kubeadmImageRepository,
		"networking":        map[string]any{"podSubnet": "10.244.0.0/16"},
	}, kubeletConfig)

	// The images kubeadm wants, built from the static binaries.
	kubeadmCmd := func(args ...string) *exec.Cmd {
		argv := root.Command(append([]string{kubeadm}, args...)...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), kubeadmEnv...)
		return cmd
	}
	// The list is on standard output, kubeadm's warnings on standard error.
	out, err := kubeadmCmd("config", "images", "list", "--config", config).Output()
	if err != nil {
		var stderr []byte
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			stderr = exit.Stderr
		}
		t.Fatalf("kubeadm config images list: %v\n%s%s", err, out, stderr)
	}
	programs := map[string]string{
		"kube-apiserver": static.KubeAPIServer, "kube-controller-manager": static.KubeControllerManager,
		"kube-scheduler": static.KubeScheduler, "etcd": static.Etcd,
	}
	var archives, skipPhases, built []string
	pauseImage := ""
	for _, ref := range strings.Fields(string(out)) {
		repo, _, _ := strings.Cut(ref, ":")
		if path.Dir(repo) != kubeadmImageRepository {
			t.Fatalf("kubeadm wants image %s, outside the imageRepository %s", ref, kubeadmImageRepository)
		}
		component := path.Base(repo)
		switch {
		case programs[component] != "":
			archive, err := cluster.ControlPlaneImage(programs[component], ref, dir)
			if err != nil {
				t.Fatal(err)
			}
			archives = append(archives, archive)
			built = append(built, ref)
		case component == "pause":
			pauseImage = ref
		case kubeadmInitSkippedAddons[component] != "":
			skipPhases = append(skipPhases, kubeadmInitSkippedAddons[component])
		default:
			t.Fatalf("kubeadm wants image %s, which the test neither builds nor skips", ref)
		}
	}
	if len(built) != len(programs) || pauseImage == "" || len(skipPhases) != len(kubeadmInitSkippedAddons) {
		t.Fatalf("kubeadm config images list printed %q: want one image for each of %v, pause and the addons %v", out, slices.Sorted(maps.Keys(programs)), kubeadmInitSkippedAddons)
	}
	slices.Sort(skipPhases)
	t.Logf("images built from static binaries: %s; sandbox image %s (the harness's pause); skipped, no image: --skip-phases=%s",
		strings.Join(built, ", "), pauseImage, strings.Join(skipPhases, ","))

	c, err := cluster.StartContainerd(ctx, cluster.ContainerdOptions{
		Source: src, Dir: ctrDir, Log: progress, Enter: root.Command, SandboxImage: pauseImage,
	})
	if err != nil {
		t.Fatalf("start containerd for %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("close containerd of %s: %v", name, err)
		}
	})
	for _, archive := range archives {
		if err := c.ImportImage(ctx, archive); err != nil {
			t.Fatal(err)
		}
	}

	// Every preflight check runs but, on a cgroup v1 host,
	// SystemVerification, which refuses cgroup v1 and says to skip it
	// there (failCgroupV1: false above).
	initArgs := []string{"init", "--config", config, "--skip-phases=" + strings.Join(skipPhases, ","), "--v=1"}
	if cgroupV1 {
		initArgs = append(initArgs, "--ignore-preflight-errors=SystemVerification")
	}
	kinit := startKubeadm(t, filepath.Join(dir, "kubeadm-init.log"), kubeadmEnv, root.Command(append([]string{kubeadm}, initArgs...)...))
	started := time.Now()
	kinit.waitForLine(t, "[kubelet-start] Starting the kubelet")
	t.Logf("kubeadm wrote the kubelet's files %v after it started", time.Since(started).Round(time.Millisecond))

	argv, kubeadmArgs := kubeadmDropIn(t, binDir, root, nil)
	if want := "--node-ip=" + kubeadmInitAddress; !contains(kubeadmArgs, want) {
		t.Errorf("kubeadm-flags.env has %q, want %s from kubeletExtraArgs", kubeadmArgs, want)
	}
	agent, err := cluster.NewCommandAgent(cluster.CommandAgentOptions{
		Name: name, IP: kubeadmInitAddress, Dir: filepath.Join(dir, "agent"),
		HealthzURL: "http://127.0.0.1:10248/healthz",
		Argv:       root.Command(argv...),
		Dial:       root.Dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	agentStarted := time.Now()
	if err := agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent %s log %s, last lines:\n%s", name, agent.LogPath, cluster.LogTail(agent.LogPath, 60))
			t.Logf("containerd of %s log %s, last lines:\n%s", name, c.LogPath, cluster.LogTail(c.LogPath, 30))
		}
		if err := agent.Stop(); err != nil {
			t.Errorf("stop agent %s: %v", name, err)
		}
	})
	if err := kinit.wait(4 * time.Minute); err != nil {
		t.Fatalf("kubeadm init: %v\n%s", err, cluster.LogTail(kinit.log, 80))
	}
	t.Logf("kubeadm init succeeded %v after the agent started (%v in all)",
		time.Since(agentStarted).Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	for _, l := range strings.Split(kinit.output(), "\n") {
		if strings.Contains(l, "WARNING") || strings.Contains(l, "ERROR") {
			t.Logf("kubeadm: %s", strings.TrimSpace(l))
		}
	}
	if !strings.Contains(kinit.output(), "Your Kubernetes control-plane has initialized successfully!") {
		t.Errorf("kubeadm init exited 0 without saying the control plane initialized:\n%s", kinit.output())
	}

	// The cluster kubeadm made, through its admin.conf, in the node's
	// network.
	restConfig, err := clientcmd.BuildConfigFromFlags("", root.Path("/etc/kubernetes/admin.conf"))
	if err != nil {
		t.Fatal(err)
	}
	restConfig.Dial = root.Dial
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	var node *v1.Node
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return isReady(n), nil
	})
	if err != nil {
		t.Fatalf("node %s not Ready in kubeadm's cluster: %v; last seen: %+v", name, err, node)
	}
	kubectl := root.Command(env.bins.Kubectl, "--kubeconfig=/etc/kubernetes/admin.conf", "get", "nodes", "-o", "wide")
	out, err = exec.CommandContext(ctx, kubectl[0], kubectl[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get nodes: %v\n%s", err, out)
	}
	t.Logf("kubectl get nodes:\n%s", out)
	if fields := strings.Fields(lineStarting(string(out), name+" ")); len(fields) < 2 || fields[1] != "Ready" {
		t.Errorf("kubectl get nodes shows %s as %q, want Ready", name, fields)
	}
	if _, ok := node.Labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("node %s labels %v: kubeadm's mark-control-plane label missing", name, node.Labels)
	}

	// The control plane: nodekit's static pods, as mirror pods.
	for _, component := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		podName := component + "-" + name
		var pod *v1.Pod
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, podName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			pod = p
			return p.Status.Phase == v1.PodRunning, nil
		})
		if err != nil {
			t.Errorf("mirror pod kube-system/%s not Running: %v; last seen: %+v", podName, err, pod)
			continue
		}
		if pod.Annotations[configMirrorAnnotation] == "" || pod.Annotations[configSourceAnnotation] != "file" || pod.Spec.NodeName != name {
			t.Errorf("kube-system/%s: annotations %v on node %q, want the mirror pod of a static pod of %s", podName, pod.Annotations, pod.Spec.NodeName, name)
		}
	}

	// kubelet-finalize found the certificate the agent's certificate
	// manager stored from kubelet.conf's embedded pair, and pointed
	// kubelet.conf at it for rotation.
	kc, err := clientcmd.LoadFromFile(root.Path("/etc/kubernetes/kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	const current = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	if auth := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]; auth.ClientCertificate != current || auth.ClientKey != current {
		t.Errorf("kubelet.conf's client certificate %q and key %q, want both %s (kubeadm's kubelet-finalize)", auth.ClientCertificate, auth.ClientKey, current)
	}

	// kubeadm's skipped addons are not there.
	if _, err := client.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment kube-system/coredns: %v, want it not created (addon/coredns skipped)", err)
	}
	if _, err := client.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "kube-proxy", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("daemonset kube-system/kube-proxy: %v, want it not created (addon/kube-proxy skipped)", err)
	}

	// etcd wrote into the node's /var/lib/etcd, not the host's.
	if _, err := os.Stat(root.Path("/var/lib/etcd/member")); err != nil {
		t.Errorf("etcd's data in the node's /var/lib/etcd: %v", err)
	}
	if after := dirEntries(t, "/var/lib/etcd"); !slices.Equal(after, hostEtcd) {
		t.Errorf("the host's /var/lib/etcd holds %v, held %v before", after, hostEtcd)
	}
}

// dirEntries lists the names in dir (none if it does not exist).
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// lineStarting returns the first line of s that starts with prefix, or "".
func lineStarting(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// writeYAMLDocs writes docs as one YAML stream.
func writeYAMLDocs(t *testing.T, file string, docs ...map[string]any) {
	t.Helper()
	var parts []string
	for _, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, string(data))
	}
	if err := os.WriteFile(file, []byte(strings.Join(parts, "---\n")), 0o600); err != nil {
		t.Fatal(fmt.Errorf("write %s: %w", file, err))
	}
}
