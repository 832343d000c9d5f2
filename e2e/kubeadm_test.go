package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// hostOnCgroupV1 reports whether this machine mounts cgroup v1 at
// /sys/fs/cgroup (cgroup2's magic number is CGROUP2_SUPER_MAGIC).
func hostOnCgroupV1(t *testing.T) bool {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &fs); err != nil {
		t.Fatal(err)
	}
	return fs.Type != unix.CGROUP2_SUPER_MAGIC
}

// TestKubeadmJoinOnFakeCRI joins a nodekit node to the e2e control plane
// with kubeadm itself. The control plane is prepared with kubeadm's own
// `kubeadm init phase bootstrap-token` and `upload-config all` (a bootstrap
// token, the cluster-info ConfigMap the controller manager's
// bootstrapsigner signs, kubeadm's RBAC, the kubeadm-config and
// kubelet-config ConfigMaps); then `kubeadm join <apiserver> --token …
// --discovery-token-ca-cert-hash sha256:…` runs in a private mount
// namespace whose /etc/kubernetes and /var/lib/kubelet are the test's
// (cluster.NodeRoot), with nodekit's agent as `kubelet` on its PATH. There
// is no systemd: once kubeadm has written the kubelet's files the test
// starts the agent with exactly the command line of kubeadm's drop-in
// (10-kubeadm.conf) and kubeadm's kubeadm-flags.env, and kubeadm must see
// its healthz, wait for its TLS bootstrap and succeed. The node must then
// be Ready under the name kubeadm gave it, its client certificate issued
// to the bootstrap token's CSR approved by the controller manager,
// kubelet.conf pointing at the rotated certificate file, and a pod must
// run on it. The runtime is fakecri: a containerd outside the namespace
// would not see the pod volumes the agent mounts under the namespace's
// /var/lib/kubelet (a containerd node needs containerd in the NodeRoot too).
func TestKubeadmJoinOnFakeCRI(t *testing.T) {
	t.Parallel()
	requireCluster(t)
	const name = "kubeadm-join"
	ctx := t.Context()
	src, err := cluster.LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	kubeadm, err := cluster.BuildKubeadm(ctx, cluster.BuildOptions{Source: src, Log: progress})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	binDir, kubeadmEnv := kubeadmMachine(t, dir)

	fake := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
	img, err := fakecri.NewImage(cluster.BusyboxImage, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	fake.AddImage(img)
	criEndpoint, stopFake, err := fake.Start(filepath.Join(env.dir, "cri-"+name+".sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopFake)

	// The control plane, as `kubeadm init` leaves it for joins.
	cgroupV1 := hostOnCgroupV1(t)
	token := kubeadmPrepareJoin(t, kubeadm, kubeadmEnv, dir, criEndpoint, cgroupV1)
	caHash := caCertHash(t, env.cp.PKI.CAData())

	// Node-specific settings, the way kubeadm takes them: the kubelet's
	// addresses and ports (other nodes of the e2e cluster share this
	// machine) as a kubeletconfiguration patch, the node IP as the
	// operator's KUBELET_EXTRA_ARGS (/etc/default/kubelet).
	ip := env.cp.AllocateNodeIP()
	ports, err := cluster.FreePorts(ip, 2)
	if err != nil {
		t.Fatal(err)
	}
	healthzPort, apiPort := ports[0], ports[1]
	patches := filepath.Join(dir, "patches")
	writeYAML(t, filepath.Join(patches, "kubeletconfiguration+merge.yaml"), map[string]any{
		"address": ip, "port": apiPort, "healthzBindAddress": ip, "healthzPort": healthzPort,
		// Container logs stay with the test, not in the host's /var/log/pods.
		"podLogsDir": filepath.Join(dir, "pod-logs"),
	})
	extraArgs := []string{"--node-ip=" + ip, "--container-logs-dir=" + filepath.Join(dir, "container-logs")}

	root, err := cluster.NewNodeRoot(ctx, filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(root.Close)

	endpoint := strings.TrimPrefix(env.cp.Server, "https://")
	joinArgs := []string{"join", endpoint, "--token", token, "--discovery-token-ca-cert-hash", caHash,
		"--node-name", name, "--cri-socket", criEndpoint, "--patches", patches, "--v=1"}
	// Every preflight check runs, among them KubeletVersion (`kubelet
	// --version`, answered by nodekit) and the CRI checks against the
	// node's runtime. SystemVerification refuses a cgroup v1 host outright
	// (KEP-5573) and says to skip it there, with failCgroupV1: false in the
	// kubelet's configuration (kubeadmPrepareJoin); on cgroup v2 it must
	// pass.
	if cgroupV1 {
		joinArgs = append(joinArgs, "--ignore-preflight-errors=SystemVerification")
	}
	join := startKubeadm(t, filepath.Join(dir, "kubeadm-join.log"), kubeadmEnv, root.Command(append([]string{kubeadm}, joinArgs...)...))
	started := time.Now()
	// kubeadm prints this once the kubelet's files are written and it
	// would (re)start the kubelet unit.
	join.waitForLine(t, "[kubelet-start] Starting the kubelet")

	argv, kubeadmArgs := kubeadmDropIn(t, binDir, root, extraArgs)
	agent, err := cluster.NewCommandAgent(cluster.CommandAgentOptions{
		Name: name, IP: ip, Dir: filepath.Join(dir, "agent"),
		HealthzURL: fmt.Sprintf("http://%s:%d/healthz", ip, healthzPort),
		Argv:       root.Command(argv...),
	})
	if err != nil {
		t.Fatal(err)
	}
	startAgentNode(t, agent)
	if err := join.wait(3 * time.Minute); err != nil {
		t.Fatalf("kubeadm join: %v\n%s", err, cluster.LogTail(join.log, 60))
	}
	t.Logf("kubeadm join succeeded %v after the agent started", time.Since(started).Round(time.Millisecond))
	for _, l := range strings.Split(join.output(), "\n") {
		if strings.Contains(l, "WARNING") || strings.Contains(l, "ERROR") {
			t.Logf("kubeadm: %s", strings.TrimSpace(l))
		}
	}
	if !strings.Contains(join.output(), "This node has joined the cluster") {
		t.Errorf("kubeadm join exited 0 without saying the node joined:\n%s", join.output())
	}

	node := waitForNode(t, name, "Ready", readyTimeout, isReady)
	var internalIP string
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			internalIP = a.Address
		}
	}
	if internalIP != ip {
		t.Errorf("node %s InternalIP %q, want %s from KUBELET_EXTRA_ARGS", name, internalIP, ip)
	}
	if want := "--hostname-override=" + name; !contains(kubeadmArgs, want) {
		t.Errorf("kubeadm-flags.env has %q, want %s (the node name differs from the host's)", kubeadmArgs, want)
	}

	// kubeadm's kubelet files: the configuration from the kubelet-config
	// ConfigMap with the CRI socket and the node's patch merged in.
	var cfg map[string]any
	readYAML(t, root.Path("/var/lib/kubelet/config.yaml"), &cfg)
	for field, want := range map[string]any{
		"containerRuntimeEndpoint": criEndpoint, "healthzPort": float64(healthzPort), "cgroupDriver": "cgroupfs",
		"rotateCertificates": true, "staticPodPath": "/etc/kubernetes/manifests",
	} {
		if cfg[field] != want {
			t.Errorf("kubeadm's /var/lib/kubelet/config.yaml has %s: %v, want %v", field, cfg[field], want)
		}
	}
	if _, err := os.Stat(root.Path("/etc/kubernetes/bootstrap-kubelet.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bootstrap-kubelet.conf after the join: %v, want it removed by kubeadm", err)
	}

	// TLS bootstrap: one CSR by the token's user, approved by the
	// controller manager and issued; kubelet.conf on the rotated file.
	csrs := nodeClientCSRs(t, name)
	if len(csrs) != 1 {
		t.Fatalf("%d client certificate requests for %s, want 1", len(csrs), name)
	}
	csr := csrs[0]
	t.Cleanup(func() {
		err := env.cp.Client().CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete CSR %s: %v", csr.Name, err)
		}
	})
	if want := "system:bootstrap:" + strings.SplitN(token, ".", 2)[0]; csr.Spec.Username != want {
		t.Errorf("CSR %s made by %q, want %s", csr.Name, csr.Spec.Username, want)
	}
	approved := false
	for _, c := range csr.Status.Conditions {
		approved = approved || (c.Type == certificatesv1.CertificateApproved && c.Status == v1.ConditionTrue && c.Reason == "AutoApproved")
	}
	if !approved || len(csr.Status.Certificate) == 0 {
		t.Errorf("CSR %s: conditions %+v, %d bytes of certificate; want auto-approved and issued", csr.Name, csr.Status.Conditions, len(csr.Status.Certificate))
	}
	kc, err := clientcmd.LoadFromFile(root.Path("/etc/kubernetes/kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	const current = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	auth := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	if auth.ClientCertificate != current || auth.ClientKey != current {
		t.Errorf("kubelet.conf's client certificate %q and key %q, want both %s", auth.ClientCertificate, auth.ClientKey, current)
	}
	// kubelet-client-current.pem links to the dated file, by its path on
	// the node.
	if target, err := os.Readlink(root.Path(current)); err != nil {
		t.Errorf("the client certificate: %v", err)
	} else {
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(current), target)
		}
		if _, err := os.Stat(root.Path(target)); err != nil {
			t.Errorf("the client certificate %s links to %s: %v", current, target, err)
		}
	}

	// The node runs a pod.
	ns := newNamespace(t, name)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "joined", Namespace: ns},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{v1.LabelHostname: name},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers:                    []v1.Container{{Name: "main", Image: cluster.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent}},
		},
	}
	if _, err := env.cp.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.cp.Client().CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	waitForPod(t, ns, pod.Name, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
}

// kubeadmPrepareJoin runs the phases of `kubeadm init` that make a control
// plane take joins — bootstrap-token, upload-config all — against the e2e
// control plane with its admin kubeconfig, and returns the token kubeadm
// printed. The cluster-wide KubeletConfiguration sets what every node of
// this cluster needs: the cgroupfs driver, no QoS cgroups on the fake
// runtime (which runs no process), the harness's disk thresholds (the
// host's disk, shared, below kubeadm's defaults tainted the node with
// DiskPressure and left the test's pod unscheduled), and on a cgroup v1
// host failCgroupV1: false.
func kubeadmPrepareJoin(t *testing.T, kubeadm string, extraEnv []string, dir, criEndpoint string, cgroupV1 bool) string {
	t.Helper()
	config := filepath.Join(dir, "kubeadm-init.yaml")
	docs := []map[string]any{{
		"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
		"bootstrapTokens": []any{map[string]any{
			"description": "nodekit e2e: " + t.Name(), "ttl": "1h",
			"groups": []string{cluster.BootstrapTokenGroup}, "usages": []string{"signing", "authentication"},
		}},
		// Not this machine's: kubeadm needs it set to skip CRI detection.
		"nodeRegistration": map[string]any{"criSocket": criEndpoint},
	}, {
		"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
		"kubernetesVersion":    env.cp.Binaries.KubernetesVersion,
		"controlPlaneEndpoint": strings.TrimPrefix(env.cp.Server, "https://"),
		"certificatesDir":      env.cp.PKI.Dir,
		"networking":           map[string]any{"serviceSubnet": "10.0.0.0/24"},
	}, {
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		"cgroupDriver": "cgroupfs", "cgroupsPerQOS": false,
	}}
	maps.Copy(docs[2], cluster.SharedDiskKubeletConfig())
	if cgroupV1 {
		docs[2]["failCgroupV1"] = false
	}
	writeYAMLDocs(t, config, docs...)
	run := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), kubeadm, append(args, "--config", config, "--kubeconfig", env.cp.AdminKubeconfig)...)
		cmd.Env = append(os.Environ(), extraEnv...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubeadm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run("init", "phase", "bootstrap-token")
	m := regexp.MustCompile(`\[bootstrap-token\] Using token: ([a-z0-9]{6}\.[a-z0-9]{16})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kubeadm init phase bootstrap-token printed no token:\n%s", out)
	}
	token := m[1]
	id := token[:6]
	t.Cleanup(func() {
		err := env.cp.Client().CoreV1().Secrets(metav1.NamespaceSystem).Delete(context.Background(), "bootstrap-token-"+id, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete bootstrap token %s: %v", id, err)
		}
	})
	run("init", "phase", "upload-config", "all")

	// The bootstrap signer signs cluster-info for the new token.
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := env.cp.Client().CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_, ok := cm.Data["jws-kubeconfig-"+id]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("kube-public/cluster-info not signed for token %s by the controller manager's bootstrapsigner: %v", id, err)
	}
	return token
}

// caCertHash is kubeadm's --discovery-token-ca-cert-hash for a CA
// certificate: sha256 of its DER SubjectPublicKeyInfo.
func caCertHash(t *testing.T, caPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(caPEM)
	if block == nil {
		t.Fatal("no PEM in the CA certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// kubeadmProcess is a running kubeadm whose output goes to a log file and
// is watched line by line.
type kubeadmProcess struct {
	log  string
	cmd  *exec.Cmd
	done chan error

	mu    sync.Mutex
	lines []string
	seen  chan struct{} // closed and replaced on every line
}

// startKubeadm runs argv (kubeadm, possibly behind nsenter) with extra
// environment variables; the test's end kills it.
func startKubeadm(t *testing.T, log string, extraEnv, argv []string) *kubeadmProcess {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	p := &kubeadmProcess{log: log, done: make(chan error, 1), seen: make(chan struct{})}
	p.cmd = exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			fmt.Fprintln(f, s.Text())
			p.mu.Lock()
			p.lines = append(p.lines, s.Text())
			close(p.seen)
			p.seen = make(chan struct{})
			p.mu.Unlock()
		}
		f.Close()
	}()
	go func() {
		err := p.cmd.Wait()
		pw.Close()
		p.done <- err
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// output is what kubeadm printed so far.
func (p *kubeadmProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitForLine waits (up to two minutes) until kubeadm prints a line
// containing s; it fails the test if kubeadm exits first.
func (p *kubeadmProcess) waitForLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.Contains(l, s) {
				p.mu.Unlock()
				return
			}
		}
		seen := p.seen
		p.mu.Unlock()
		select {
		case <-seen:
		case err := <-p.done:
			t.Fatalf("kubeadm exited (%v) before printing %q:\n%s", err, s, p.output())
		case <-timeout:
			t.Fatalf("kubeadm did not print %q within 2m:\n%s", s, p.output())
		}
	}
}

// wait waits up to timeout for kubeadm to exit and returns how it did.
func (p *kubeadmProcess) wait(timeout time.Duration) error {
	select {
	case err := <-p.done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("still running after %s", timeout)
	}
}

// kubeadmMachine makes dir/bin, the PATH of a machine kubeadm sets up:
// kubelet is nodekit's agent, beside the programs kubeadm's preflight
// requires. There is no systemctl: kubeadm then leaves starting the kubelet
// to the operator (the test, with kubeadmDropIn). It returns the directory
// and kubeadm's environment.
func kubeadmMachine(t *testing.T, dir string) (binDir string, kubeadmEnv []string) {
	t.Helper()
	binDir = filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(env.agent, filepath.Join(binDir, "kubelet")); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"losetup", "mount", "cp"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("kubeadm's preflight requires %s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(binDir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return binDir, []string{"PATH=" + binDir}
}

// kubeadmDropIn returns the kubelet's command line as kubeadm's systemd
// drop-in (10-kubeadm.conf) runs it on the node root's files —
// ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS
// $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS, with binDir's kubelet, the
// operator's extraArgs — and the words of KUBELET_KUBEADM_ARGS.
func kubeadmDropIn(t *testing.T, binDir string, root *cluster.NodeRoot, extraArgs []string) (argv, kubeadmArgs []string) {
	t.Helper()
	kubeadmArgs = kubeadmFlagsEnv(t, root.Path("/var/lib/kubelet/kubeadm-flags.env"))
	argv = []string{filepath.Join(binDir, "kubelet"),
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml"}
	return append(append(argv, kubeadmArgs...), extraArgs...), kubeadmArgs
}

// kubeadmFlagsEnv reads KUBELET_KUBEADM_ARGS from kubeadm-flags.env and
// splits it into words, as systemd expands an unquoted $VAR.
func kubeadmFlagsEnv(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	value, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "KUBELET_KUBEADM_ARGS=")
	if !ok {
		t.Fatalf("%s: no KUBELET_KUBEADM_ARGS in %q", path, data)
	}
	if value, err = strconv.Unquote(value); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return strings.Fields(value)
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
