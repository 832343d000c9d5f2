package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// apiNode is the node of TestNodeAPIOnContainerd: an agent on a containerd
// of its own, whose InternalIP sits on a veth of a network namespace the
// test creates (the API server proxies nodes/proxy to no loopback address),
// serving the kubelet API with a certificate issued through a
// kubelet-serving CSR.
type apiNode struct {
	name, ip, ns string
	agent        *cluster.Agent
	containerd   *cluster.Containerd
	cgroupRoot   string
	// approved are the kubelet-serving CSRs the test's approver approved.
	approvedMu sync.Mutex
	approved   []string
}

// TestNodeAPIOnContainerd is issue 11's "done when": kubectl logs, exec,
// attach, port-forward, cp and top, and the kubelet API through the API
// server's nodes/proxy, against a nodekit agent on containerd with the
// kubelet's secure defaults (webhook authentication and authorization,
// anonymous off) and a bootstrapped serving certificate.
func TestNodeAPIOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()

	// metrics-server builds (cold: minutes) while the node comes up.
	type built struct {
		bin string
		err error
	}
	msBuild := make(chan built, 1)
	go func() {
		bin, err := cluster.BuildMetricsServer(ctx, cluster.BuildOptions{Log: progress})
		msBuild <- built{bin, err}
	}()

	n := newAPINode(t, "ctr-api")
	pods := n.startPods(t)

	t.Run("serving certificate from an approved kubelet-serving CSR", func(t *testing.T) { n.testServingCert(t) })
	t.Run("node features and daemon endpoint", func(t *testing.T) {
		node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("declaredFeatures: %v", node.Status.DeclaredFeatures)
		if port := node.Status.DaemonEndpoints.KubeletEndpoint.Port; !strings.HasSuffix(n.agent.APIURL, ":"+strconv.Itoa(int(port))) {
			t.Errorf("daemonEndpoints port %d, the API serves on %s", port, n.agent.APIURL)
		}
	})
	t.Run("authentication and authorization", func(t *testing.T) { n.testAuth(t, pods) })
	t.Run("nodes/proxy through the API server", func(t *testing.T) { n.testNodesProxy(t) })
	t.Run("kubectl logs", func(t *testing.T) { n.testLogs(t, pods) })
	t.Run("kubectl exec -i", func(t *testing.T) { n.testExec(t, pods) })
	t.Run("kubectl attach", func(t *testing.T) { n.testAttach(t, pods) })
	t.Run("kubectl port-forward", func(t *testing.T) { n.testPortForward(t, pods) })
	t.Run("kubectl cp", func(t *testing.T) { n.testCopy(t, pods) })
	t.Run("WebSockets to the node (ExtendWebSocketsToKubelet)", func(t *testing.T) { n.testWebSockets(t, pods) })
	t.Run("dashboard metrics", func(t *testing.T) { n.testDashboardMetrics(t) })

	var ms *cluster.MetricsServer
	t.Run("kubectl top", func(t *testing.T) {
		b := <-msBuild
		if b.err != nil {
			t.Fatalf("build metrics-server: %v", b.err)
		}
		var err error
		ms, err = env.cp.StartMetricsServer(ctx, cluster.MetricsServerOptions{
			Binary: b.bin, NodeSelector: v1.LabelHostname + "=" + n.name,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := ms.Stop(); err != nil {
				t.Errorf("stop metrics-server: %v", err)
			}
		})
		n.testTop(t, pods)
	})
}

// newAPINode creates the network namespace and veth, a cgroup root, a
// containerd and the agent (serverTLSBootstrap on), approves its serving
// CSR and waits until the node is Ready and serves with the issued
// certificate.
func newAPINode(t *testing.T, name string) *apiNode {
	t.Helper()
	n := &apiNode{name: name}
	n.ip = newVethAddress(t)
	n.cgroupRoot = newCgroupRoot(t, name)
	n.containerd = startNodeContainerd(t, name)
	var err error
	n.agent, err = env.cp.NewAgent(cluster.AgentOptions{
		Binary:          env.agent,
		NodeName:        name,
		NodeIP:          n.ip,
		RuntimeEndpoint: n.containerd.Endpoint,
		CgroupDriver:    "cgroupfs",
		KubeletConfig:   map[string]any{"serverTLSBootstrap": true},
		ExtraArgs:       []string{"--cgroup-root=" + n.cgroupRoot},
	})
	if err != nil {
		t.Fatal(err)
	}
	approverCtx, stopApprover := context.WithCancel(context.Background())
	approverDone := make(chan struct{})
	go func() {
		defer close(approverDone)
		n.approveServingCSRs(approverCtx, t)
	}()
	t.Cleanup(func() {
		stopApprover()
		<-approverDone
	})
	startAgentNode(t, n.agent)
	n.ns = newNamespace(t, name)
	waitForNode(t, name, "Ready", readyTimeout, isReady)
	return n
}

// newVethAddress creates a network namespace with a veth pair whose host
// end gets a 198.18.x.1/30 address (the benchmarking range, routed
// nowhere) and returns that address: an InternalIP that is not loopback,
// so the API server proxies nodes/proxy to it. Cleanup deletes the
// namespace, and the pair with it.
func newVethAddress(t *testing.T) string {
	t.Helper()
	pid := os.Getpid()
	netns := fmt.Sprintf("nke2e-%d", pid)
	host, peer := fmt.Sprintf("nkh%d", pid%100000), fmt.Sprintf("nkp%d", pid%100000)
	block := 4 * (pid % 64)
	hostIP, peerIP := fmt.Sprintf("198.18.%d.%d", pid/64%256, block+1), fmt.Sprintf("198.18.%d.%d", pid/64%256, block+2)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(t.Context(), "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", netns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", netns).CombinedOutput(); err != nil {
			t.Errorf("delete network namespace %s: %v: %s", netns, err, out)
		}
	})
	run("link", "add", host, "type", "veth", "peer", "name", peer, "netns", netns)
	run("addr", "add", hostIP+"/30", "dev", host)
	run("link", "set", host, "up")
	run("-n", netns, "addr", "add", peerIP+"/30", "dev", peer)
	run("-n", netns, "link", "set", peer, "up")
	t.Logf("node address %s on veth %s (peer %s in network namespace %s)", hostIP, host, peer, netns)
	return hostIP
}

// approveServingCSRs approves, until ctx ends, the kubelet-serving CSRs of
// the node whose subject is system:node:<name> in system:nodes and whose
// names are the node's: what a cluster's serving CSR approver checks.
func (n *apiNode) approveServingCSRs(ctx context.Context, t *testing.T) {
	csrs := env.cp.Client().CertificatesV1().CertificateSigningRequests()
	_ = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := csrs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			csr := &list.Items[i]
			if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || csr.Spec.Username != "system:node:"+n.name || decided(csr) {
				continue
			}
			if why := n.servingRequestProblem(csr); why != "" {
				t.Logf("CSR %s not approved: %s", csr.Name, why)
				continue
			}
			csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue,
				Reason: "NodekitE2EApprove", Message: "the e2e test's serving CSR approver",
			})
			if _, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err == nil {
				n.approvedMu.Lock()
				n.approved = append(n.approved, csr.Name)
				n.approvedMu.Unlock()
			}
		}
		return false, nil
	})
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
			return true
		}
	}
	return false
}

// servingRequestProblem says why csr is not a serving request of this
// node, "" when it is.
func (n *apiNode) servingRequestProblem(csr *certificatesv1.CertificateSigningRequest) string {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		return "no PEM request"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return err.Error()
	}
	if req.Subject.CommonName != "system:node:"+n.name || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return fmt.Sprintf("subject %s", req.Subject)
	}
	for _, ip := range req.IPAddresses {
		if ip.String() != n.ip {
			return fmt.Sprintf("IP %s is not the node's", ip)
		}
	}
	for _, dns := range req.DNSNames {
		if dns != n.name {
			return fmt.Sprintf("DNS name %s is not the node's", dns)
		}
	}
	if len(req.IPAddresses) == 0 {
		return "no IP address"
	}
	return ""
}

// testServingCert checks that the API serves the certificate the cluster
// CA issued for the approved CSR, verified as a client verifies a kubelet.
func (n *apiNode) testServingCert(t *testing.T) {
	var leaf *x509.Certificate
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		conn, err := (&tls.Dialer{Config: &tls.Config{RootCAs: n.caPool(t)}}).DialContext(ctx, "tcp", strings.TrimPrefix(n.agent.APIURL, "https://"))
		if err != nil {
			return false, nil
		}
		defer conn.Close()
		leaf = conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
		return true, nil
	})
	n.approvedMu.Lock()
	approved := slices.Clone(n.approved)
	n.approvedMu.Unlock()
	if err != nil {
		t.Fatalf("no serving certificate the cluster CA verifies for %s within 2m (approved CSRs: %v): %v", n.agent.APIURL, approved, err)
	}
	t.Logf("kubelet-serving CSRs approved: %v; serving certificate: subject %s, issuer %s, IPs %v, DNS %v, valid until %s",
		approved, leaf.Subject, leaf.Issuer, leaf.IPAddresses, leaf.DNSNames, leaf.NotAfter.Format(time.RFC3339))
	if len(approved) == 0 {
		t.Error("no kubelet-serving CSR was approved")
	}
	if leaf.Subject.CommonName != "system:node:"+n.name || !slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.String() == n.ip }) {
		t.Errorf("serving certificate for %s %v, want system:node:%s with IP %s", leaf.Subject.CommonName, leaf.IPAddresses, n.name, n.ip)
	}
}

func (n *apiNode) caPool(t *testing.T) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.cp.PKI.CAData())
	return pool
}

// apiPods are the pods the node API tests use.
type apiPods struct {
	logger, crasher, echo, web, burner *v1.Pod
}

// startPods creates the test pods and waits until they run (the crasher
// until it restarted once).
func (n *apiNode) startPods(t *testing.T) apiPods {
	t.Helper()
	mk := func(name string, mutate func(*v1.Pod), command ...string) *v1.Pod {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns},
			Spec: v1.PodSpec{
				NodeSelector:                  map[string]string{v1.LabelHostname: n.name},
				AutomountServiceAccountToken:  ptr.To(false),
				TerminationGracePeriodSeconds: ptr.To[int64](2),
				Containers: []v1.Container{{
					Name: "main", Image: cluster.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent, Command: command,
				}},
			},
		}
		if mutate != nil {
			mutate(pod)
		}
		created, err := env.cp.Client().CoreV1().Pods(n.ns).Create(t.Context(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
		return created
	}
	var p apiPods
	p.logger = mk("logger", nil, "sh", "-c", "echo early; sleep 10; i=0; while true; do echo line $i; i=$((i+1)); sleep 1; done")
	p.crasher = mk("crasher", nil, "sh", "-c", "echo run at $(date +%s); sleep 3; exit 3")
	p.echo = mk("echo", func(p *v1.Pod) { p.Spec.Containers[0].Stdin = true },
		"sh", "-c", "echo attached-ready; while read l; do echo echo:$l; done; sleep 3600")
	p.web = mk("web", nil, "sh", "-c", "mkdir -p /www && echo nodekit-httpd-ok > /www/index.html && exec httpd -f -p 8080 -h /www")
	// 48 MiB held in the container's /dev/shm (charged to its memory
	// cgroup), and a busy loop capped at 200m.
	p.burner = mk("burner", func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("128Mi")}
	}, "sh", "-c", "dd if=/dev/zero of=/dev/shm/hold bs=1M count=48 2>/dev/null; while :; do :; done")
	for _, pod := range []*v1.Pod{p.logger, p.echo, p.web, p.burner} {
		waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	}
	waitForPod(t, n.ns, p.crasher.Name, "restarted once", func(pod *v1.Pod) bool {
		cs, ok := mainStatus(pod)
		return ok && cs.RestartCount >= 1
	})
	return p
}

// podsStartedAt returns a time after every running container of the
// test's pods started (their start times are whole seconds, so one second
// after the latest).
func (n *apiNode) podsStartedAt(t *testing.T) time.Time {
	t.Helper()
	list, err := env.cp.Client().CoreV1().Pods(n.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var latest time.Time
	for _, p := range list.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if r := cs.State.Running; r != nil && r.StartedAt.After(latest) {
				latest = r.StartedAt.Time
			}
		}
	}
	if latest.IsZero() {
		t.Fatalf("no running container in namespace %s", n.ns)
	}
	return latest.Add(time.Second)
}

// kubectl runs kubectl as the cluster admin and returns its stdout and
// stderr; err is its exit error.
func kubectl(ctx context.Context, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, env.cp.Binaries.Kubectl, append([]string{"--kubeconfig=" + env.cp.AdminKubeconfig}, args...)...)
	cmd.Stdin = stdin
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, errOut, err := kubectl(ctx, nil, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// kubeletClient calls the kubelet API directly, verifying its serving
// certificate against the cluster CA, as user (a client certificate the
// cluster CA issues, in groups) or anonymously when user is "".
func (n *apiNode) kubeletClient(t *testing.T, user string, groups ...string) *http.Client {
	t.Helper()
	cfg := &tls.Config{RootCAs: n.caPool(t)}
	if user != "" {
		pair, err := env.cp.PKI.ClientCert("user-"+strings.ReplaceAll(user, ":", "-"), user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func call(t *testing.T, c *http.Client, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body)
}

// testAuth: anonymous requests get 401; a user whom RBAC gives pods/log
// and pods/exec but nothing on nodes gets 403 on the kubelet's exec and
// logs; a user with nodes/proxy gets through.
func (n *apiNode) testAuth(t *testing.T, p apiPods) {
	ctx := t.Context()
	rbac := env.cp.Client().RbacV1()
	for _, r := range []struct {
		user  string
		rules []rbacv1.PolicyRule
	}{
		{"nodekit-e2e-alice", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/log", "pods/exec"}, Verbs: []string{"get", "list", "create"}}}},
		{"nodekit-e2e-bob", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get", "create"}}}},
	} {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.user}, Rules: r.rules}
		if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: r.user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.user},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: r.user}},
		}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = rbac.ClusterRoleBindings().Delete(context.Background(), r.user, metav1.DeleteOptions{})
			_ = rbac.ClusterRoles().Delete(context.Background(), r.user, metav1.DeleteOptions{})
		})
	}
	logs := n.agent.APIURL + "/containerLogs/" + n.ns + "/" + p.logger.Name + "/main?tailLines=1"
	exec := n.agent.APIURL + "/exec/" + n.ns + "/" + p.logger.Name + "/main?command=true&output=1"

	code, body := call(t, n.kubeletClient(t, ""), http.MethodGet, n.agent.APIURL+"/pods")
	t.Logf("anonymous GET /pods: %d %q", code, strings.TrimSpace(body))
	if code != http.StatusUnauthorized {
		t.Errorf("anonymous GET /pods = %d, want 401", code)
	}
	alice := n.kubeletClient(t, "nodekit-e2e-alice")
	bob := n.kubeletClient(t, "nodekit-e2e-bob")
	// RBAC is read by the SubjectAccessReview at once; the kubelet caches
	// a denial for 30s, so nothing is asked before the bindings exist.
	for _, c := range []struct {
		who    string
		client *http.Client
		method string
		url    string
		want   int
	}{
		{"alice", alice, http.MethodGet, logs, http.StatusForbidden},
		{"alice", alice, http.MethodPost, exec, http.StatusForbidden},
		{"bob", bob, http.MethodGet, logs, http.StatusOK},
	} {
		code, body := call(t, c.client, c.method, c.url)
		t.Logf("%s %s %s: %d %q", c.who, c.method, strings.TrimPrefix(c.url, n.agent.APIURL), code, strings.TrimSpace(body))
		if code != c.want {
			t.Errorf("%s %s %s = %d, want %d", c.who, c.method, c.url, code, c.want)
		}
		if c.want == http.StatusForbidden && !strings.Contains(body, "subresource(s)=[proxy]") {
			t.Errorf("403 body %q does not name the nodes/proxy check", body)
		}
	}
	// alice may exec and read logs through the API server (pods/exec,
	// pods/log), which calls the kubelet as its kubelet client.
	if out := mustKubectl(t, "--as=nodekit-e2e-alice", "-n", n.ns, "logs", p.logger.Name, "--tail=1"); !strings.Contains(out, "line") && !strings.Contains(out, "early") {
		t.Errorf("kubectl logs as alice = %q", out)
	}
}

// testNodesProxy reads configz, the stats summary and the resource metrics
// through the API server's nodes/proxy.
func (n *apiNode) testNodesProxy(t *testing.T) {
	base := "/api/v1/nodes/" + n.name + "/proxy"
	var configz struct {
		Kubelet struct {
			metav1.TypeMeta    `json:",inline"`
			ServerTLSBootstrap bool `json:"serverTLSBootstrap"`
			Authentication     struct {
				Anonymous struct {
					Enabled bool `json:"enabled"`
				} `json:"anonymous"`
			} `json:"authentication"`
		} `json:"kubeletconfig"`
	}
	out := mustKubectl(t, "get", "--raw", base+"/configz")
	if err := json.Unmarshal([]byte(out), &configz); err != nil {
		t.Fatalf("configz: %v: %s", err, out)
	}
	k := configz.Kubelet
	t.Logf("configz: kind %s, apiVersion %s, serverTLSBootstrap %v, anonymous %v (%d bytes)", k.Kind, k.APIVersion, k.ServerTLSBootstrap, k.Authentication.Anonymous.Enabled, len(out))
	if k.Kind != "KubeletConfiguration" || k.APIVersion != "kubelet.config.k8s.io/v1beta1" || !k.ServerTLSBootstrap || k.Authentication.Anonymous.Enabled {
		t.Errorf("configz = %+v, want the agent's v1beta1 KubeletConfiguration", k)
	}

	// The summary may come from the agent's cache (up to 10 s old): one
	// computed before the test's pods ran (for the eviction manager, say)
	// does not show them. Wait for one sampled after the last of them
	// started.
	started := n.podsStartedAt(t)
	var summary statsapi.Summary
	var podNames []string
	deadline := time.Now().Add(time.Minute)
	for {
		summary = statsapi.Summary{}
		out = mustKubectl(t, "get", "--raw", base+"/stats/summary")
		if err := json.Unmarshal([]byte(out), &summary); err != nil {
			t.Fatalf("stats/summary: %v", err)
		}
		podNames = podNames[:0]
		for _, ps := range summary.Pods {
			if ps.PodRef.Namespace == n.ns {
				podNames = append(podNames, ps.PodRef.Name)
			}
		}
		if cpu := summary.Node.CPU; cpu != nil && cpu.Time.After(started) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stats summary sampled after the test's pods started (%v) within a minute", started)
		}
		time.Sleep(time.Second)
	}
	slices.Sort(podNames)
	node := summary.Node
	t.Logf("stats/summary: node %s, cpu %s, memory working set %s, nodefs %s used of %s, %d pods of the test: %v",
		node.NodeName, milli(node.CPU.UsageNanoCores), mib(node.Memory.WorkingSetBytes), gib(node.Fs.UsedBytes), gib(node.Fs.CapacityBytes), len(podNames), podNames)
	if node.NodeName != n.name || len(podNames) < 4 || node.Memory.WorkingSetBytes == nil || node.Fs == nil || node.Fs.CapacityBytes == nil {
		t.Errorf("summary of node %q with %d test pods, want %s with its pods, memory and nodefs", node.NodeName, len(podNames), n.name)
	}

	out = mustKubectl(t, "get", "--raw", base+"/metrics/resource")
	for _, want := range []string{"node_cpu_usage_seconds_total", "node_memory_working_set_bytes", `container_cpu_usage_seconds_total{container="main",namespace="` + n.ns + `",pod="burner"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics/resource lacks %s", want)
		}
	}
	t.Logf("metrics/resource: %d lines", strings.Count(out, "\n"))
	for _, path := range []string{"/pods", "/healthz", "/metrics/cadvisor", "/metrics/probes", "/runningpods/"} {
		out := mustKubectl(t, "get", "--raw", base+path)
		t.Logf("%s: %d bytes", path, len(out))
	}
}

// testLogs runs kubectl logs with --tail, --since, -f and --previous.
func (n *apiNode) testLogs(t *testing.T, p apiPods) {
	waitForPod(t, n.ns, p.logger.Name, "logging lines", func(*v1.Pod) bool {
		out, _, err := kubectl(t.Context(), nil, "-n", n.ns, "logs", p.logger.Name)
		return err == nil && strings.Count(out, "line ") >= 4
	})
	all := mustKubectl(t, "-n", n.ns, "logs", p.logger.Name)
	tail := mustKubectl(t, "-n", n.ns, "logs", p.logger.Name, "--tail=2")
	t.Logf("logs: %d lines; --tail=2: %q", strings.Count(all, "\n"), tail)
	if !strings.HasPrefix(all, "early\n") {
		t.Errorf("logs start %q, want the first line \"early\"", firstLine(all))
	}
	if strings.Count(tail, "\n") != 2 || !strings.HasPrefix(tail, "line ") {
		t.Errorf("--tail=2 = %q, want the last 2 lines", tail)
	}
	n.testLogsSince(t, p)

	// -f: lines written after the command started arrive on its stream.
	last := lastLineNumber(all)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.cp.Binaries.Kubectl, "--kubeconfig="+env.cp.AdminKubeconfig, "-n", n.ns, "logs", "-f", "--tail=1", p.logger.Name)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var followed []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		followed = append(followed, sc.Text())
		if lastLineNumber(sc.Text()+"\n") >= last+3 {
			break
		}
	}
	cancel()
	_ = cmd.Wait()
	t.Logf("logs -f: %d lines followed, up to %q (the last line before was %d)", len(followed), followed[len(followed)-1], last)
	if lastLineNumber(strings.Join(followed, "\n")+"\n") < last+3 {
		t.Errorf("logs -f followed %q, want lines after %d", followed, last)
	}

	prev := mustKubectl(t, "-n", n.ns, "logs", p.crasher.Name, "--previous")
	t.Logf("logs --previous of the crashing container: %q", prev)
	if !strings.HasPrefix(prev, "run at ") {
		t.Errorf("--previous = %q, want the previous instance's \"run at …\"", prev)
	}
	if out, errOut, err := kubectl(t.Context(), nil, "-n", n.ns, "logs", p.logger.Name, "-c", "nope"); err == nil {
		t.Errorf("logs of a container the pod does not have succeeded: %q", out)
	} else {
		t.Logf("logs -c nope: %s", strings.TrimSpace(errOut))
	}
}

var lineNumber = regexp.MustCompile(`line (\d+)\n`)

// lastLineNumber returns the number of the last "line N" in out, -1 if none.
// testLogsSince checks --since-time against the log's own timestamps
// (the API sends sinceTime in whole seconds) and --since=3s against the
// node's clock. The logger writes a line a second, but a starved container
// may write none for a few seconds under CI load, so an empty --since=3s
// is asked again, up to 5 times.
func (n *apiNode) testLogsSince(t *testing.T, p apiPods) {
	stamped := strings.Split(strings.TrimSpace(mustKubectl(t, "-n", n.ns, "logs", p.logger.Name, "--timestamps")), "\n")
	if len(stamped) < 4 {
		t.Fatalf("logs --timestamps = %q, want at least 4 lines", stamped)
	}
	pick := stamped[len(stamped)-2]
	ts, msg, _ := strings.Cut(pick, " ")
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		t.Fatalf("logs --timestamps line %q: %v", pick, err)
	}
	sinceTime := at.Truncate(time.Second).Format(time.RFC3339)
	got := mustKubectl(t, "-n", n.ns, "logs", p.logger.Name, "--since-time="+sinceTime)
	t.Logf("--since-time=%s (line %q at %s): %d lines", sinceTime, msg, ts, strings.Count(got, "\n"))
	if !strings.HasPrefix(got, msg+"\n") && !strings.Contains(got, "\n"+msg+"\n") {
		t.Errorf("--since-time=%s = %q, want it to hold %q", sinceTime, got, msg)
	}
	if strings.Contains(got, "early") || lastLineNumber(firstLine(got)+"\n") < lastLineNumber(msg+"\n")-1 {
		t.Errorf("--since-time=%s = %q, want only lines from %q's second on", sinceTime, got, msg)
	}

	var since string
	for attempt := 1; attempt <= 5; attempt++ {
		since = mustKubectl(t, "-n", n.ns, "logs", p.logger.Name, "--since=3s")
		t.Logf("--since=3s (attempt %d): %d lines", attempt, strings.Count(since, "\n"))
		if since != "" {
			break
		}
		time.Sleep(time.Second)
	}
	if strings.Contains(since, "early") || !strings.Contains(since, "line ") || strings.Count(since, "\n") > 5 {
		t.Errorf("--since=3s = %q, want only the last seconds' lines", since)
	}
}

func lastLineNumber(out string) int {
	m := lineNumber.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return -1
	}
	v, _ := strconv.Atoi(m[len(m)-1][1])
	return v
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// testExec: stdin reaches the command and its exit code comes back.
func (n *apiNode) testExec(t *testing.T, p apiPods) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, errOut, err := kubectl(ctx, strings.NewReader("hello from stdin\n"), "-n", n.ns, "exec", "-i", p.logger.Name, "--", "sh", "-c", "read x; echo got:$x; exit 7")
	code := -1
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	}
	t.Logf("kubectl exec -i: stdout %q, stderr %q, exit code %d", out, strings.TrimSpace(errOut), code)
	if out != "got:hello from stdin\n" || code != 7 {
		t.Errorf("exec -i = %q with exit code %d, want \"got:hello from stdin\" and 7", out, code)
	}
	if out := mustKubectl(t, "-n", n.ns, "exec", p.logger.Name, "--", "cat", "/etc/hostname"); strings.TrimSpace(out) != p.logger.Name {
		t.Errorf("exec cat /etc/hostname = %q, want %s", out, p.logger.Name)
	}
}

// testAttach attaches to a container reading its stdin: a line sent comes
// back on its stdout.
func (n *apiNode) testAttach(t *testing.T, p apiPods) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.cp.Binaries.Kubectl, "--kubeconfig="+env.cp.AdminKubeconfig, "-n", n.ns, "attach", "-i", p.echo.Name, "-c", "main")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// Keep sending until the echo comes back: the attach may not be
	// established when the first line is written.
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	var got []string
	for i := 0; ; i++ {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl attach ended after %q; stderr: %s", got, stderr.String())
			}
			got = append(got, l)
			if strings.HasPrefix(l, "echo:ping-") {
				t.Logf("kubectl attach -i: sent ping lines, read back %q", got)
				return
			}
		case <-tick.C:
			fmt.Fprintf(stdin, "ping-%d\n", i)
		case <-ctx.Done():
			t.Fatalf("no echo through kubectl attach within 2m; read %q; stderr: %s", got, stderr.String())
		}
	}
}

// testPortForward fetches the httpd pod's page through kubectl
// port-forward on 127.0.0.1.
func (n *apiNode) testPortForward(t *testing.T, p apiPods) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.cp.Binaries.Kubectl, "--kubeconfig="+env.cp.AdminKubeconfig, "-n", n.ns, "port-forward", "--address=127.0.0.1", "pod/"+p.web.Name, ":8080")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	forwarding := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
	sc := bufio.NewScanner(stdout)
	local := ""
	for sc.Scan() {
		if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
			local = m[1]
			break
		}
	}
	if local == "" {
		t.Fatalf("kubectl port-forward printed no local port; stderr: %s", stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	var body string
	for i := 0; i < 3; i++ { // several connections over one forward
		resp, err := http.Get("http://127.0.0.1:" + local + "/index.html")
		if err != nil {
			t.Fatalf("GET through the port-forward: %v; stderr: %s", err, stderr.String())
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(data)
		if resp.StatusCode != http.StatusOK || body != "nodekit-httpd-ok\n" {
			t.Fatalf("GET through the port-forward = %d %q, want the pod's page", resp.StatusCode, body)
		}
	}
	t.Logf("kubectl port-forward 127.0.0.1:%s -> %s:8080: 3 GETs answered %q", local, p.web.Name, strings.TrimSpace(body))
}

// testCopy copies a file into a container and one out of it (kubectl cp
// runs tar in the container through exec).
func (n *apiNode) testCopy(t *testing.T, p apiPods) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	content := strings.Repeat("nodekit kubectl cp\n", 1000)
	if err := os.WriteFile(in, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	target := n.ns + "/" + p.logger.Name
	mustKubectl(t, "cp", in, target+":/tmp/in.txt")
	if out := mustKubectl(t, "-n", n.ns, "exec", p.logger.Name, "--", "md5sum", "/tmp/in.txt"); !strings.HasPrefix(out, md5Of(t, content)) {
		t.Errorf("md5sum in the container = %q, want %s", out, md5Of(t, content))
	}
	out := filepath.Join(dir, "out.txt")
	mustKubectl(t, "cp", target+":/tmp/in.txt", out)
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != content {
		t.Errorf("copied back %d bytes, want the %d sent", len(got), len(content))
	}
	t.Logf("kubectl cp: %d bytes into %s:/tmp/in.txt and back, identical", len(content), target)
}

func md5Of(t *testing.T, s string) string {
	cmd := exec.Command("md5sum")
	cmd.Stdin = strings.NewReader(s)
	sum, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(sum))[0]
}

// dashboardFamilies are the kubelet series the common dashboards query
// that a nodekit agent on containerd with serverTLSBootstrap exposes.
var dashboardFamilies = []string{
	"kubelet_node_name", "kubelet_running_pods", "kubelet_running_containers",
	"kubelet_pod_start_duration_seconds", "kubelet_pod_worker_duration_seconds",
	"kubelet_pleg_relist_duration_seconds", "kubelet_pleg_relist_interval_seconds",
	"kubelet_runtime_operations_total", "kubelet_runtime_operations_duration_seconds",
	"kubelet_cgroup_manager_duration_seconds",
	"rest_client_requests_total", "rest_client_request_duration_seconds",
	"kubelet_certificate_manager_server_ttl_seconds", "kubelet_http_requests_total",
	"process_resident_memory_bytes", "process_cpu_seconds_total", "go_goroutines",
}

// testDashboardMetrics scrapes /metrics through the API server and checks
// the dashboard series with real values.
func (n *apiNode) testDashboardMetrics(t *testing.T) {
	out := mustKubectl(t, "get", "--raw", "/api/v1/nodes/"+n.name+"/proxy/metrics")
	m, err := cluster.ParseMetrics(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, name := range dashboardFamilies {
		if f, ok := m[name]; !ok || len(f.Metric) == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("/metrics lacks %v", missing)
	}
	t.Logf("/metrics: %d families; kubelet_node_name{node=%s}=%v, kubelet_running_pods=%v, kubelet_running_containers{running}=%v, pod starts %d, rest_client_requests_total=%v, serving certificate TTL %.0fs",
		len(m), n.name, m.Sum("kubelet_node_name", map[string]string{"node": n.name}), m.Sum("kubelet_running_pods", nil),
		m.Sum("kubelet_running_containers", map[string]string{"container_state": "running"}), histCount(m, "kubelet_pod_start_duration_seconds"),
		m.Sum("rest_client_requests_total", nil), m.Sum("kubelet_certificate_manager_server_ttl_seconds", nil))
	if got := m.Sum("kubelet_running_pods", nil); got < 5 {
		t.Errorf("kubelet_running_pods = %v, want the test's 5 pods", got)
	}
	if got := histCount(m, "kubelet_pod_start_duration_seconds"); got < 5 {
		t.Errorf("kubelet_pod_start_duration_seconds counted %d starts, want at least the test's 5", got)
	}
	if m.Sum("rest_client_requests_total", map[string]string{"code": "200"}) == 0 {
		t.Error("rest_client_requests_total has no code=200 requests")
	}
}

func histCount(m cluster.Metrics, name string) uint64 {
	var n uint64
	if f, ok := m[name]; ok {
		for _, s := range f.Metric {
			n += s.GetHistogram().GetSampleCount()
		}
	}
	return n
}

// topRow matches a kubectl top line: name, CPU in millicores, memory in Mi.
var topRow = regexp.MustCompile(`(?m)^(\S+)\s+(\d+)m\s+(?:\d+%\s+)?(\d+)Mi`)

// testTop checks kubectl top node and pod against what the kernel says:
// the burner pod's CPU (a busy loop capped at 200m) and memory (48 MiB in
// /dev/shm) from its own cgroup over the same time, the node's memory from
// the root cgroup.
func (n *apiNode) testTop(t *testing.T, p apiPods) {
	var nodeOut, podOut string
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err1, err2 error
		nodeOut, _, err1 = kubectl(ctx, nil, "top", "node", n.name, "--no-headers")
		podOut, _, err2 = kubectl(ctx, nil, "top", "pod", "-n", n.ns, p.burner.Name, "--no-headers")
		return err1 == nil && err2 == nil && topRow.MatchString(nodeOut) && topRow.MatchString(podOut), nil
	})
	if err != nil {
		t.Fatalf("kubectl top node/pod gave no figures within 3m (node: %q, pod: %q)", nodeOut, podOut)
	}
	cpuWindow := 30 * time.Second
	cpuBefore := cgroupCPU(t, n.podCgroup(t, p.burner, "cpuacct"))
	time.Sleep(cpuWindow)
	cpuAfter := cgroupCPU(t, n.podCgroup(t, p.burner, "cpuacct"))
	realCPU := float64(cpuAfter-cpuBefore) / float64(cpuWindow) * 1000 // millicores
	realMem := workingSet(t, n.podCgroup(t, p.burner, "memory"))
	rootMem := workingSet(t, "/sys/fs/cgroup/memory")

	podOut = mustKubectl(t, "top", "pod", "-n", n.ns, p.burner.Name, "--no-headers")
	nodeOut = mustKubectl(t, "top", "node", n.name, "--no-headers")
	pm, nm := topRow.FindStringSubmatch(podOut), topRow.FindStringSubmatch(nodeOut)
	if pm == nil || nm == nil {
		t.Fatalf("kubectl top output changed shape: node %q, pod %q", nodeOut, podOut)
	}
	podCPU, _ := strconv.ParseFloat(pm[2], 64)
	podMem, _ := strconv.ParseFloat(pm[3], 64)
	nodeCPU, _ := strconv.ParseFloat(nm[2], 64)
	nodeMem, _ := strconv.ParseFloat(nm[3], 64)
	t.Logf("kubectl top node %s: %s", n.name, strings.TrimSpace(nodeOut))
	t.Logf("kubectl top pod %s: %s", p.burner.Name, strings.TrimSpace(podOut))
	t.Logf("burner pod: top %.0fm CPU, %.0f Mi; its cgroup over %s: %.0fm CPU, %.0f Mi working set", podCPU, podMem, cpuWindow, realCPU, realMem/(1<<20))
	t.Logf("node: top %.0fm CPU, %.0f Mi; root cgroup working set %.0f Mi", nodeCPU, nodeMem, rootMem/(1<<20))
	if podCPU > 260 || podCPU < 0.5*realCPU-20 || podCPU > 1.5*realCPU+20 {
		t.Errorf("top pod CPU %.0fm, the cgroup used %.0fm (capped at 200m)", podCPU, realCPU)
	}
	if realMemMi := realMem / (1 << 20); podMem < 48 || podMem < 0.8*realMemMi || podMem > 1.2*realMemMi+2 {
		t.Errorf("top pod memory %.0f Mi, the cgroup's working set %.0f Mi (48 Mi held)", podMem, realMemMi)
	}
	if rootMi := rootMem / (1 << 20); nodeMem < 0.7*rootMi || nodeMem > 1.3*rootMi {
		t.Errorf("top node memory %.0f Mi, the root cgroup's working set %.0f Mi", nodeMem, rootMi)
	}
	if nodeCPU <= 0 {
		t.Errorf("top node CPU %.0fm", nodeCPU)
	}
}

// podCgroup finds the pod's cgroup directory in the v1 hierarchy
// controller, under the node's cgroup root.
func (n *apiNode) podCgroup(t *testing.T, pod *v1.Pod, controller string) string {
	t.Helper()
	root := filepath.Join("/sys/fs/cgroup", controller, n.cgroupRoot)
	var found string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "pod"+string(pod.UID) {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no cgroup pod%s under %s", pod.UID, root)
	}
	return found
}

func cgroupCPU(t *testing.T, dir string) time.Duration {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ns)
}

// workingSet is the v1 memory cgroup's usage less its inactive file pages,
// as cAdvisor and the kubelet compute it.
func workingSet(t *testing.T, dir string) float64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	usage, _ := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "total_inactive_file "); ok {
			inactive, _ := strconv.ParseFloat(v, 64)
			return max(0, usage-inactive)
		}
	}
	return usage
}

func podExists(t *testing.T, ns, name string) bool {
	_, err := env.cp.Client().CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	return err == nil
}

func milli(nanoCores *uint64) string {
	if nanoCores == nil {
		return "-"
	}
	return fmt.Sprintf("%dm", *nanoCores/1e6)
}

func mib(b *uint64) string {
	if b == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f Mi", float64(*b)/(1<<20))
}

func gib(b *uint64) string {
	if b == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f Gi", float64(*b)/(1<<30))
}
