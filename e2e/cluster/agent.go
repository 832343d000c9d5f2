package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// AgentOptions describe one node agent process: examples/nodeagent run with
// the kubelet's flags and a KubeletConfiguration file the harness writes.
type AgentOptions struct {
	// Binary is the agent program (BuildAgent). Required.
	Binary string
	// NodeName is --hostname-override. Required.
	NodeName string
	// NodeIP is --node-ip; empty means ControlPlane.AllocateNodeIP(). The
	// agent's healthz, metrics and kubelet API bind to it.
	NodeIP string
	// RuntimeEndpoint is --container-runtime-endpoint (unix://…). Required.
	RuntimeEndpoint string
	// Labels are --node-labels.
	Labels map[string]string
	// RegisterWithTaints are --register-with-taints ("key=value:Effect").
	RegisterWithTaints []string
	// NodeStatusUpdateFrequency, NodeStatusReportFrequency and
	// NodeLeaseDurationSeconds go into the KubeletConfiguration; zero
	// leaves the kubelet's default (10s, 5m, 40).
	NodeStatusUpdateFrequency time.Duration
	NodeStatusReportFrequency time.Duration
	NodeLeaseDurationSeconds  int32
	// CgroupDriver goes into the KubeletConfiguration; empty leaves the
	// default (cgroupfs).
	CgroupDriver string
	// KubeletConfig are more KubeletConfiguration fields by their names in
	// the file (e.g. "serverTLSBootstrap": true), written over the
	// harness's own.
	KubeletConfig map[string]any
	// Verbosity is --v (default 2).
	Verbosity int
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// Agent is one node agent process. Start and Stop may be called repeatedly
// (a restart keeps the node's name, IP, credentials and ports); all methods
// are safe for concurrent use.
type Agent struct {
	// Name and IP are the node's name and InternalIP.
	Name string
	IP   string
	// Dir holds the node's kubeconfig, configuration, root dir, pod logs
	// (pod-logs), the links to them (container-logs, the kubelet's
	// /var/log/containers) and log.
	Dir        string
	Kubeconfig string
	ConfigPath string
	// LogPath is the agent's log; every start appends to it.
	LogPath string
	// HealthzURL and MetricsURL are served by the agent on its node IP.
	HealthzURL string
	MetricsURL string
	// APIURL is the kubelet API, https://<IP>:<port>.
	APIURL string

	binary string
	args   []string
	// prepare, when set, runs before each start.
	prepare func() error
	// dial, when set, connects to HealthzURL.
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	mu   sync.Mutex
	proc *process
	// config is the KubeletConfiguration file's content.
	config map[string]any
}

// newNodeProcess prepares what every node process (a nodekit agent or a
// kubelet) needs: its directory NodesDir/<name>, its client
// certificate and kubeconfig, and free healthz and API ports on ip. what
// names the process in errors.
func (c *ControlPlane) newNodeProcess(what, name, ip, binary string) (a *Agent, healthzPort, apiPort int, err error) {
	a = &Agent{Name: name, IP: ip, Dir: filepath.Join(c.NodesDir, name), binary: binary}
	fail := func(err error) (*Agent, int, int, error) {
		return nil, 0, 0, fmt.Errorf("new %s %s: %w", what, name, err)
	}
	if err := os.MkdirAll(a.Dir, 0o755); err != nil {
		return fail(err)
	}
	if a.Kubeconfig, err = c.NodeCredentials(a.Name, a.Dir); err != nil {
		return fail(err)
	}
	ports, err := freePorts(a.IP, 2)
	if err != nil {
		return fail(err)
	}
	healthzPort, apiPort = ports[0], ports[1]
	a.HealthzURL = "http://" + hostPort(a.IP, healthzPort) + "/healthz"
	a.APIURL = "https://" + hostPort(a.IP, apiPort)
	return a, healthzPort, apiPort, nil
}

// sharedDiskEvictionHard is the evictionHard of every node the harness
// starts: the kubelet's default memory threshold, and disk thresholds at
// 1 %. Every node's root and image filesystems are the test host's one
// disk, which the kubelet's measure (reserved and foreign blocks count as
// used) can put below the default 10 % / 15 % on a shared machine: each
// node would report DiskPressure, be tainted and evict pods a test did not
// ask to. A test of disk eviction sets its own thresholds.
func sharedDiskEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "1%",
		"nodefs.inodesFree":  "1%",
		"imagefs.available":  "1%",
		"imagefs.inodesFree": "1%",
	}
}

// NewAgent prepares a node agent: it issues the node's client certificate
// (system:node:<name>) and kubeconfig and writes its KubeletConfiguration
// in NodesDir/<name>. It starts nothing; call Start.
func (c *ControlPlane) NewAgent(opts AgentOptions) (*Agent, error) {
	if opts.Binary == "" || opts.NodeName == "" || opts.RuntimeEndpoint == "" {
		return nil, errors.New("new agent: Binary, NodeName and RuntimeEndpoint are required")
	}
	if opts.NodeIP == "" {
		opts.NodeIP = c.AllocateNodeIP()
	}
	if opts.Verbosity == 0 {
		opts.Verbosity = 2
	}
	a, healthzPort, apiPort, err := c.newNodeProcess("agent", opts.NodeName, opts.NodeIP, opts.Binary)
	if err != nil {
		return nil, err
	}
	a.MetricsURL = "http://" + hostPort(a.IP, healthzPort) + "/metrics"
	a.LogPath = filepath.Join(a.Dir, "agent.log")

	// Only the fields set here appear in the file, so everything else keeps
	// the kubelet's defaults.
	cfg := map[string]any{
		"apiVersion":         "kubelet.config.k8s.io/v1beta1",
		"kind":               "KubeletConfiguration",
		"healthzBindAddress": a.IP,
		"healthzPort":        healthzPort,
		"address":            a.IP,
		"port":               apiPort,
		"readOnlyPort":       0,
		// Container logs stay with the node, not in the host's /var/log/pods.
		"podLogsDir": filepath.Join(a.Dir, "pod-logs"),
		"authentication": map[string]any{
			"x509": map[string]any{"clientCAFile": c.PKI.CA.Cert},
		},
		// No image garbage collection by disk usage: the harness
		// side-loads its images, which no registry serves, and a host
		// disk that looks 85 % full by the kubelet's measure (reserved
		// blocks count as used) would have them removed between a test's
		// pods. TestImageGCOnContainerd sets its own threshold.
		"imageGCHighThresholdPercent": 100,
		// Test hosts may have swap on; the agents' containers get NoSwap.
		"failSwapOn":   false,
		"evictionHard": sharedDiskEvictionHard(),
	}
	if opts.NodeStatusUpdateFrequency > 0 {
		cfg["nodeStatusUpdateFrequency"] = opts.NodeStatusUpdateFrequency.String()
	}
	if opts.NodeStatusReportFrequency > 0 {
		cfg["nodeStatusReportFrequency"] = opts.NodeStatusReportFrequency.String()
	}
	if opts.NodeLeaseDurationSeconds > 0 {
		cfg["nodeLeaseDurationSeconds"] = opts.NodeLeaseDurationSeconds
	}
	if opts.CgroupDriver != "" {
		cfg["cgroupDriver"] = opts.CgroupDriver
	}
	a.config = cfg
	a.ConfigPath = filepath.Join(a.Dir, "config.yaml")
	if err := a.SetKubeletConfig(opts.KubeletConfig); err != nil {
		return nil, fmt.Errorf("new agent %s: %w", a.Name, err)
	}

	a.args = []string{
		"--kubeconfig=" + a.Kubeconfig,
		"--config=" + a.ConfigPath,
		"--hostname-override=" + a.Name,
		"--node-ip=" + a.IP,
		"--container-runtime-endpoint=" + opts.RuntimeEndpoint,
		"--root-dir=" + filepath.Join(a.Dir, "root"),
		// The container log links stay with the node too.
		"--container-logs-dir=" + filepath.Join(a.Dir, "container-logs"),
		"--v=" + strconv.Itoa(opts.Verbosity),
	}
	if len(opts.Labels) > 0 {
		var labels []string
		for k, v := range opts.Labels {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		a.args = append(a.args, "--node-labels="+strings.Join(labels, ","))
	}
	if len(opts.RegisterWithTaints) > 0 {
		a.args = append(a.args, "--register-with-taints="+strings.Join(opts.RegisterWithTaints, ","))
	}
	a.args = append(a.args, opts.ExtraArgs...)
	return a, nil
}

// CommandAgentOptions describe a node agent run with a command line of the
// caller's (NewCommandAgent).
type CommandAgentOptions struct {
	// Name and IP are the node's name and InternalIP, as the command line
	// sets them. Required.
	Name string
	IP   string
	// Dir holds the agent's log. Required.
	Dir string
	// HealthzURL is where the agent answers /healthz. Required.
	HealthzURL string
	// Argv is the command line, program first. Required.
	Argv []string
	// Dial, when set, connects to HealthzURL (NodeRoot.Dial, for an agent
	// in a network namespace of its own).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// NewCommandAgent prepares an agent that runs exactly opts.Argv: no flag,
// configuration or credential of the harness's, as when a test starts the
// agent the way a node's service manager would with files another tool
// (kubeadm) wrote. Start and Stop work as for NewAgent's agents; Metrics
// and Profile do not (MetricsURL and APIURL are empty).
func NewCommandAgent(opts CommandAgentOptions) (*Agent, error) {
	if opts.Name == "" || opts.IP == "" || opts.Dir == "" || opts.HealthzURL == "" || len(opts.Argv) == 0 {
		return nil, errors.New("new command agent: Name, IP, Dir, HealthzURL and Argv are required")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("new command agent %s: %w", opts.Name, err)
	}
	return &Agent{
		Name: opts.Name, IP: opts.IP, Dir: opts.Dir, HealthzURL: opts.HealthzURL,
		LogPath: filepath.Join(opts.Dir, "agent.log"),
		binary:  opts.Argv[0], args: opts.Argv[1:], dial: opts.Dial,
	}, nil
}

// SetKubeletConfig sets fields of the agent's KubeletConfiguration file by
// their names in the file (a nil value removes a field) and rewrites it; a
// running agent sees the change when it is started again.
func (a *Agent) SetKubeletConfig(fields map[string]any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, v := range fields {
		if v == nil {
			delete(a.config, k)
			continue
		}
		a.config[k] = v
	}
	data, err := yaml.Marshal(a.config)
	if err != nil {
		return fmt.Errorf("encode the configuration of agent %s: %w", a.Name, err)
	}
	if err := os.WriteFile(a.ConfigPath, data, 0o644); err != nil {
		return fmt.Errorf("write the configuration of agent %s: %w", a.Name, err)
	}
	return nil
}

// Start runs the agent and waits (up to a minute, or ctx) until its
// /healthz answers. It fails, with the tail of the agent's log, if the agent
// exits first. Starting a running agent is a no-op.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc != nil && !a.proc.exited() {
		return nil
	}
	if a.prepare != nil {
		if err := a.prepare(); err != nil {
			return fmt.Errorf("start agent %s: %w", a.Name, err)
		}
	}
	p, err := startProcess("agent "+a.Name, a.LogPath, a.binary, a.args, nil)
	if err != nil {
		return err
	}
	a.proc = p
	client := &http.Client{Timeout: 5 * time.Second}
	if a.dial != nil {
		client.Transport = &http.Transport{DialContext: a.dial, DisableKeepAlives: true}
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, p.exitErr()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.HealthzURL, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("start agent %s: not healthy at %s: %w\n--- last lines of %s:\n%s", a.Name, a.HealthzURL, err, a.LogPath, LogTail(a.LogPath, 40))
	}
	return nil
}

// Stop sends SIGTERM and waits up to 30 s. It returns an error if the agent
// had to be killed or exited with a non-zero status (an agent stops cleanly
// on SIGTERM). Stopping a stopped agent returns how it exited.
func (a *Agent) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil {
		return nil
	}
	return a.proc.stop(30 * time.Second)
}

// UnmountVolumes detaches whatever is still mounted under the agent's
// directory: the volumes (tmpfs, subPath bind mounts) of pods that were
// still on the node when it stopped, which a stopped agent leaves mounted
// as a stopped kubelet does. Call it after Stop, when the node is torn
// down for good.
func (a *Agent) UnmountVolumes() error {
	return unmountUnder(a.Dir)
}

// Running reports whether the agent process is up.
func (a *Agent) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proc != nil && !a.proc.exited()
}

// Metrics scrapes the agent's /metrics.
func (a *Agent) Metrics(ctx context.Context) (Metrics, error) {
	return scrapeMetrics(ctx, "agent "+a.Name, a.MetricsURL)
}

// scrapeMetrics reads the Prometheus text at url; who names the server in
// errors.
func scrapeMetrics(ctx context.Context, who, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", who, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", who, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// Profile writes the agent's /debug/pprof/<what> (what: "heap", or
// "profile?seconds=N" for N seconds of CPU, which it blocks for) to w,
// fetched through its node API as a cluster admin (a client certificate
// of pki's CA in system:masters; the agent's serving certificate, often
// self-signed, is not verified).
func (a *Agent) Profile(ctx context.Context, pki *PKI, what string, w io.Writer) error {
	pair, err := pki.ClientCert("nodekit-e2e-profiler", "nodekit-e2e:profiler", "system:masters")
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, //nolint:gosec // the agent's self-signed certificate
	}}}
	url := a.APIURL + "/debug/pprof/" + what
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// Metrics are parsed Prometheus metric families by name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics parses the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return families, nil
}

// Sum adds the values of the counters, gauges or untyped samples of family
// name whose labels include all of match; 0 if there are none.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	family, ok := m[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, metric := range family.Metric {
		if !hasLabels(metric, match) {
			continue
		}
		switch {
		case metric.Counter != nil:
			sum += metric.Counter.GetValue()
		case metric.Gauge != nil:
			sum += metric.Gauge.GetValue()
		case metric.Untyped != nil:
			sum += metric.Untyped.GetValue()
		}
	}
	return sum
}

func hasLabels(metric *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		found := false
		for _, l := range metric.Label {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
