package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ControlPlaneOptions configure StartControlPlane.
type ControlPlaneOptions struct {
	// Binaries are the programs to run (BuildControlPlane).
	Binaries Binaries
	// Dir holds certificates, kubeconfigs, etcd data and logs; empty means a
	// new temporary directory, removed by Stop.
	Dir string
	// NodesDir holds the directory of each node started by NewAgent or
	// NewKubelet (NodesDir/<name>: its kubeconfig, configuration, root
	// dir, pod logs and log); empty means Dir/nodes.
	NodesDir string
	// NodeMonitorGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period: how long a node may go without a Lease
	// renewal or status update before it is marked Unknown. Default 20s
	// (upstream: 50s), so tests of an unreachable node finish quickly.
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod is --node-monitor-period. Default 2s (upstream: 5s).
	NodeMonitorPeriod time.Duration
	// ClusterSigningDuration is kube-controller-manager's
	// --cluster-signing-duration, the lifetime of the certificates it
	// issues (a test of client certificate rotation makes it short). Zero
	// keeps upstream's year.
	ClusterSigningDuration time.Duration
	// StartTimeout bounds the wait for each server to turn healthy.
	// Default 2 minutes.
	StartTimeout time.Duration
	// Log receives progress messages; nil discards them.
	Log io.Writer
}

// ControlPlane is a running etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler on 127.0.0.1, with RBAC, the Node authorizer and
// NodeRestriction admission. Its methods are safe for concurrent use.
type ControlPlane struct {
	// Dir holds everything the control plane writes.
	Dir string
	// NodesDir holds the directory of each node NewAgent or NewKubelet
	// prepares (ControlPlaneOptions.NodesDir).
	NodesDir string
	// PKI is the cluster's certificate authority and keys.
	PKI *PKI
	// Binaries are the programs running.
	Binaries Binaries
	// Server is the apiserver's URL, https://127.0.0.1:<port>.
	Server string
	// AdminKubeconfig authenticates as a cluster admin (system:masters).
	AdminKubeconfig string
	// AuditLog is the apiserver's audit log (JSON lines): every request by
	// a node identity, and every write to Nodes and Leases, at Metadata
	// level.
	AuditLog string

	removeDir bool
	admin     *rest.Config
	client    kubernetes.Interface
	log       io.Writer
	nodeIPs   atomic.Uint32

	mu    sync.Mutex
	procs []*process        // running, in start order
	logs  map[string]string // every server's log, by name, kept after Stop
}

const (
	serviceClusterIPRange = "10.0.0.0/24"
	serviceClusterIP      = "10.0.0.1"
	loopback              = "127.0.0.1"
)

// auditPolicy records, at Metadata level, everything node identities do and
// every write to Nodes and Leases, so a test can tell who wrote what.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:nodes"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: ""
    resources: ["nodes", "nodes/status"]
  - group: "coordination.k8s.io"
    resources: ["leases"]
- level: None
`

// StartControlPlane generates certificates and starts etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, each on a free port of
// 127.0.0.1, and returns once all are healthy and the kube-node-lease
// namespace exists. On failure it stops whatever it started and the error
// names the failing server with the tail of its log. The caller must Stop the
// returned control plane.
func StartControlPlane(ctx context.Context, opts ControlPlaneOptions) (_ *ControlPlane, err error) {
	if opts.Binaries.KubeAPIServer == "" {
		return nil, errors.New("start control plane: Binaries not set (use BuildControlPlane)")
	}
	if opts.NodeMonitorGracePeriod == 0 {
		opts.NodeMonitorGracePeriod = 20 * time.Second
	}
	if opts.NodeMonitorPeriod == 0 {
		opts.NodeMonitorPeriod = 2 * time.Second
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	c := &ControlPlane{Dir: opts.Dir, Binaries: opts.Binaries, log: opts.Log}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "nodekit-e2e-"); err != nil {
			return nil, fmt.Errorf("start control plane: %w", err)
		}
		c.removeDir = true
	}
	if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	c.NodesDir = filepath.Join(c.Dir, "nodes")
	if opts.NodesDir != "" {
		if c.NodesDir, err = filepath.Abs(opts.NodesDir); err != nil {
			return nil, fmt.Errorf("start control plane: %w", err)
		}
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if c.PKI, err = NewPKI(filepath.Join(c.Dir, "pki")); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}

	etcdURL, err := c.startEtcd(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, opts, etcdURL); err != nil {
		return nil, err
	}
	if err := c.startControllerManager(ctx, opts); err != nil {
		return nil, err
	}
	if err := c.startScheduler(ctx, opts); err != nil {
		return nil, err
	}
	// The apiserver creates kube-node-lease shortly after it is ready; a
	// node's first Lease create fails until then.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, opts.StartTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().Namespaces().Get(ctx, "kube-node-lease", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("start control plane: wait for namespace kube-node-lease: %w", err)
	}
	fmt.Fprintf(c.log, "control plane ready: %s, admin kubeconfig %s\n", c.Server, c.AdminKubeconfig)
	return c, nil
}

func (c *ControlPlane) startEtcd(ctx context.Context, opts ControlPlaneOptions) (string, error) {
	ports, err := freePorts(loopback, 2)
	if err != nil {
		return "", err
	}
	clientPort, peerPort := ports[0], ports[1]
	clientURL := "http://" + hostPort(loopback, clientPort)
	peerURL := "http://" + hostPort(loopback, peerPort)
	p, err := c.start("etcd", opts.Binaries.Etcd,
		"--name=nodekit-e2e",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=nodekit-e2e="+peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return "", err
	}
	err = c.waitHealthy(ctx, p, opts.StartTimeout, http.DefaultClient, clientURL+"/health")
	return clientURL, err
}

func (c *ControlPlane) startAPIServer(ctx context.Context, opts ControlPlaneOptions, etcdURL string) error {
	pki := c.PKI
	port, err := freePort(loopback)
	if err != nil {
		return err
	}
	c.Server = "https://" + hostPort(loopback, port)
	serving, err := pki.ServingCert("kube-apiserver", "kube-apiserver",
		[]net.IP{net.ParseIP(loopback), net.ParseIP(serviceClusterIP)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return err
	}
	kubeletClient, err := pki.ClientCert("kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return err
	}
	proxyClient, err := pki.FrontProxyClientCert("front-proxy-client", "front-proxy-client")
	if err != nil {
		return err
	}
	admin, err := pki.ClientCert("admin", "nodekit-e2e-admin", "system:masters")
	if err != nil {
		return err
	}
	c.AdminKubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := pki.WriteKubeconfig(c.AdminKubeconfig, c.Server, admin); err != nil {
		return err
	}
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return fmt.Errorf("write audit policy: %w", err)
	}
	c.AuditLog = filepath.Join(c.Dir, "logs", "audit.log")
	p, err := c.start("kube-apiserver", opts.Binaries.KubeAPIServer,
		"--etcd-servers="+etcdURL,
		"--bind-address="+loopback,
		"--advertise-address="+loopback,
		// A loopback advertise address is refused unless the endpoint
		// reconciler is off; no pod needs the kubernetes Service here.
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+serving.Cert,
		"--tls-private-key-file="+serving.Key,
		"--client-ca-file="+pki.CA.Cert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.ServiceAccount.Cert,
		"--service-account-signing-key-file="+pki.ServiceAccount.Key,
		"--service-cluster-ip-range="+serviceClusterIPRange,
		"--authorization-mode=Node,RBAC",
		// Bootstrap tokens authenticate TLS bootstrap (BootstrapToken), as
		// on a kubeadm cluster.
		"--enable-bootstrap-token-auth=true",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--kubelet-client-certificate="+kubeletClient.Cert,
		"--kubelet-client-key="+kubeletClient.Key,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--requestheader-client-ca-file="+pki.FrontProxyCA.Cert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+proxyClient.Cert,
		"--proxy-client-key-file="+proxyClient.Key,
		"--audit-policy-file="+policy,
		"--audit-log-path="+c.AuditLog,
		"--audit-log-mode=blocking",
		"--v=1",
	)
	if err != nil {
		return err
	}
	if c.admin, err = clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig); err != nil {
		return fmt.Errorf("load admin kubeconfig: %w", err)
	}
	c.admin.QPS, c.admin.Burst = 50, 100
	if c.client, err = kubernetes.NewForConfig(c.admin); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	httpClient, err := rest.HTTPClientFor(c.admin)
	if err != nil {
		return fmt.Errorf("admin http client: %w", err)
	}
	return c.waitHealthy(ctx, p, opts.StartTimeout, httpClient, c.Server+"/readyz")
}

// componentFlags are the flags kube-controller-manager and kube-scheduler
// share: their kubeconfig for the API and for delegated authn/authz, a
// loopback serving endpoint with its certificate, the client CAs, and no
// leader election.
func componentFlags(pki *PKI, kubeconfig string, port int, serving CertPair) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=" + loopback,
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + serving.Cert,
		"--tls-private-key-file=" + serving.Key,
		"--client-ca-file=" + pki.CA.Cert,
		"--requestheader-client-ca-file=" + pki.FrontProxyCA.Cert,
		"--leader-elect=false",
	}
}

func (c *ControlPlane) startControllerManager(ctx context.Context, opts ControlPlaneOptions) error {
	kubeconfig, err := c.componentKubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	port, serving, err := c.componentServing("kube-controller-manager")
	if err != nil {
		return err
	}
	flags := componentFlags(c.PKI, kubeconfig, port, serving)
	if opts.ClusterSigningDuration != 0 {
		flags = append(flags, "--cluster-signing-duration="+opts.ClusterSigningDuration.String())
	}
	p, err := c.start("kube-controller-manager", opts.Binaries.KubeControllerManager, append(flags,
		// Under RBAC each controller needs its own service account.
		"--use-service-account-credentials=true",
		// kubeadm's set: the bootstrap signer signs kube-public/cluster-info
		// with each bootstrap token (kubeadm join's discovery checks the
		// signature) and the token cleaner deletes expired tokens; both
		// are off by default.
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--service-account-private-key-file="+c.PKI.ServiceAccount.Key,
		"--root-ca-file="+c.PKI.CA.Cert,
		"--cluster-signing-cert-file="+c.PKI.CA.Cert,
		"--cluster-signing-key-file="+c.PKI.CA.Key,
		"--service-cluster-ip-range="+serviceClusterIPRange,
		"--node-monitor-grace-period="+opts.NodeMonitorGracePeriod.String(),
		"--node-monitor-period="+opts.NodeMonitorPeriod.String(),
		"--v=2",
	)...)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, p, opts.StartTimeout, c.caHTTPClient(), "https://"+hostPort(loopback, port)+"/healthz")
}

func (c *ControlPlane) startScheduler(ctx context.Context, opts ControlPlaneOptions) error {
	kubeconfig, err := c.componentKubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	port, serving, err := c.componentServing("kube-scheduler")
	if err != nil {
		return err
	}
	p, err := c.start("kube-scheduler", opts.Binaries.KubeScheduler, append(componentFlags(c.PKI, kubeconfig, port, serving),
		"--v=1",
	)...)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, p, opts.StartTimeout, c.caHTTPClient(), "https://"+hostPort(loopback, port)+"/healthz")
}

// componentKubeconfig issues a client certificate for user and writes a
// kubeconfig named after the component.
func (c *ControlPlane) componentKubeconfig(name, user string) (string, error) {
	creds, err := c.PKI.ClientCert(name+"-client", user)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, name+".kubeconfig")
	return path, c.PKI.WriteKubeconfig(path, c.Server, creds)
}

func (c *ControlPlane) componentServing(name string) (int, CertPair, error) {
	port, err := freePort(loopback)
	if err != nil {
		return 0, CertPair{}, err
	}
	serving, err := c.PKI.ServingCert(name+"-serving", name, []net.IP{net.ParseIP(loopback)}, []string{"localhost"})
	return port, serving, err
}

// caHTTPClient trusts the cluster CA and presents no client certificate.
func (c *ControlPlane) caHTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.PKI.CAData())
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
}

func (c *ControlPlane) start(name, bin string, args ...string) (*process, error) {
	fmt.Fprintf(c.log, "starting %s\n", name)
	p, err := startProcess(name, filepath.Join(c.Dir, "logs", name+".log"), bin, args, nil)
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	if c.logs == nil {
		c.logs = map[string]string{}
	}
	c.logs[name] = p.logPath
	c.mu.Unlock()
	return p, nil
}

// waitHealthy polls url until it answers 200, failing early if p exits.
func (c *ControlPlane) waitHealthy(ctx context.Context, p *process, timeout time.Duration, client *http.Client, url string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, p.exitErr()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true, nil
		}
		last = fmt.Errorf("%s: %s: %s", url, resp.Status, body)
		return false, nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last: %v)", err, last)
		}
		return fmt.Errorf("start %s: not healthy at %s: %w\n--- last lines of %s:\n%s", p.name, url, err, p.logPath, LogTail(p.logPath, 30))
	}
	fmt.Fprintf(c.log, "%s healthy (pid %d, log %s)\n", p.name, p.pid(), p.logPath)
	return nil
}

// AdminConfig returns a copy of the cluster-admin REST config.
func (c *ControlPlane) AdminConfig() *rest.Config { return rest.CopyConfig(c.admin) }

// Client returns a cluster-admin clientset.
func (c *ControlPlane) Client() kubernetes.Interface { return c.client }

// NodeCredentials issues the client certificate a kubelet for nodeName
// presents (CN=system:node:<name>, O=system:nodes) and writes a kubeconfig
// for it into dir. It returns the kubeconfig's path.
func (c *ControlPlane) NodeCredentials(nodeName, dir string) (string, error) {
	creds, err := c.PKI.ClientCert("node-"+nodeName, "system:node:"+nodeName, "system:nodes")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, c.PKI.WriteKubeconfig(path, c.Server, creds)
}

// AllocateNodeIP returns a loopback address no earlier call returned:
// 127.0.0.2, 127.0.0.3, … Every node of the cluster gets its own, so
// apiserver-to-node traffic and host-network pods stay on loopback.
func (c *ControlPlane) AllocateNodeIP() string {
	n := c.nodeIPs.Add(1) // 1, 2, …; 127.0.0.1 belongs to the control plane
	// Skip x.x.x.0 and x.x.x.255 so every address looks like a host.
	host := n%254 + 1
	third := n / 254
	return fmt.Sprintf("127.%d.%d.%d", third/256, third%256, host)
}

// Kubectl runs the built kubectl with the given kubeconfig and returns its
// combined output; the error includes it.
func (c *ControlPlane) Kubectl(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	out, err := runCommand(ctx, c.Dir, nil, nil, c.Binaries.Kubectl, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	return string(out), err
}

// ServerPID returns the process id of the running server name
// ("kube-apiserver", "etcd", ...), for reading its /proc/<pid> figures.
func (c *ControlPlane) ServerPID(name string) (int, error) {
	if pid, ok := c.PIDs()[name]; ok {
		return pid, nil
	}
	return 0, fmt.Errorf("server %s is not running", name)
}

// ServerArgs returns the command line of the running server name
// ("kube-apiserver", ...) as the kernel holds it (/proc/<pid>/cmdline),
// program first.
func (c *ControlPlane) ServerArgs(name string) ([]string, error) {
	pid, err := c.ServerPID(name)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, fmt.Errorf("command line of %s: %w", name, err)
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00"), nil
}

// PIDs returns the process id of each running server by name (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler), for reading
// their /proc/<pid> figures.
func (c *ControlPlane) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := map[string]int{}
	for _, p := range c.procs {
		if !p.exited() {
			pids[p.name] = p.pid()
		}
	}
	return pids
}

// LogFiles returns each server's log file by name, also after Stop (when
// Dir was given; a temporary Dir is removed by Stop).
func (c *ControlPlane) LogFiles() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	logs := map[string]string{}
	for name, path := range c.logs {
		logs[name] = path
	}
	return logs
}

// Stop terminates the servers in reverse start order (SIGTERM, then SIGKILL
// after 15 s) and removes Dir if StartControlPlane created it. It returns
// the first server's failure to stop cleanly; Stop may be called again.
func (c *ControlPlane) Stop() error {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(15 * time.Second); err != nil && errors.Is(err, errTimeout) {
			errs = append(errs, err)
		}
	}
	if c.removeDir && len(procs) > 0 {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// APIServerMetrics scrapes kube-apiserver's /metrics as the admin.
func (c *ControlPlane) APIServerMetrics(ctx context.Context) (Metrics, error) {
	data, err := c.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape kube-apiserver metrics: %w", err)
	}
	return ParseMetrics(bytes.NewReader(data))
}
