package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/template"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerdOptions configure StartContainerd.
type ContainerdOptions struct {
	// Source is the checkout the images are built from; zero means
	// LocateSource().
	Source Source
	// Dir holds containerd's root, state, socket, CNI config and log; empty
	// means a new temporary directory, removed by Close.
	Dir string
	// Series picks the runtime: ContainerdSeries2 or ContainerdSeries16;
	// empty means DefaultContainerdSeries().
	Series ContainerdSeries
	// Binaries are containerd 2's programs; zero means BuildContainerd2's
	// (built once, then from the cache). Unused with ContainerdSeries16.
	Binaries ContainerdBinaries
	// StartTimeout bounds the wait for the CRI to report ready. Default 1m.
	StartTimeout time.Duration
	// Log receives progress messages; nil discards them.
	Log io.Writer
	// Enter, when set, wraps containerd's command line (the program
	// first), such as NodeRoot.Command: the daemon, its shims and their
	// containers then run in the namespaces it enters, which resolve the
	// containers' host paths and hold host-network pods. Clients (the CRI,
	// ctr) still reach it through Socket.
	Enter func(argv ...string) []string
	// SandboxImage, when set, is the pod sandbox image containerd is
	// configured with instead of PauseImage: PauseImage's program tagged
	// with this name as well (kubeadm's pause image, for instance).
	SandboxImage string
	// Cgroup, when set, is a cgroup made by CreateCgroup (its name) the
	// daemon is moved into each time it starts, in every hierarchy: what
	// it starts (its shims, runc under them, the CNI plugins) starts there
	// too, so that the cgroup's usage is the runtime's CPU. The pods'
	// containers run in the cgroups the CRI asks for, not in it.
	Cgroup string
	// Metrics serves containerd's Prometheus metrics (among them
	// grpc_server_handled_total: every gRPC call, CRI calls by method) on
	// a free port of 127.0.0.1, at Containerd.MetricsURL.
	Metrics bool
}

// Containerd is a containerd daemon, containerd 2 built from the pinned Go
// modules (ContainerdSeries2) or Debian's 1.6 package (ContainerdSeries16),
// with runc and the cgroupfs driver, its root, state and socket under Dir
// (never Debian's /run/containerd), pod networking by Debian's bridge and
// host-local CNI plugins, and PauseImage and BusyboxImage imported. Its
// methods are safe for concurrent use.
type Containerd struct {
	// Series is the runtime's: ContainerdSeries2 or ContainerdSeries16.
	Series ContainerdSeries
	// Dir holds everything the daemon writes, except the few paths
	// containerd does not let a configuration move, which Close cleans.
	Dir string
	// CDISpecDir is the directory of CDI specs containerd 2 reads
	// (cdi_spec_dirs; CDI devices are enabled): a device plugin or DRA
	// driver of a test writes its specs there. Empty on 1.6, which has no
	// CDI.
	CDISpecDir string
	// Socket is the daemon's gRPC socket; Endpoint is the same as a CRI
	// endpoint, unix://<Socket>.
	Socket   string
	Endpoint string
	// LogPath is the daemon's log (all starts append to it).
	LogPath string
	// PodSubnet is the CIDR pod IPs come from.
	PodSubnet string
	// MetricsURL serves the daemon's Prometheus metrics (Metrics) when
	// ContainerdOptions.Metrics asked for them; empty otherwise.
	MetricsURL string

	configPath string
	binary     string   // the containerd executable
	runc       string   // runc's path for containerd 2; Debian's on PATH for 1.6
	ctr        string   // the ctr executable
	crictl     string   // the crictl executable (BuildContainerd2's)
	env        []string // the daemon's extra environment
	network    string   // CNI network name, unique per instance
	bridge     string   // Linux bridge the CNI plugin creates in the host
	cniConfig  []byte
	removeDir  bool
	timeout    time.Duration
	enter      func(argv ...string) []string
	sandbox    string
	cgroup     string
	log        io.Writer

	mu     sync.Mutex
	proc   *process
	closed bool
}

// ContainerdSeries names a containerd release series StartContainerd runs.
type ContainerdSeries string

// The series StartContainerd runs.
const (
	// ContainerdSeries2 is containerd 2 with runc, both built from the Go
	// modules e2e/tools/containerd and e2e/tools/runc pin
	// (BuildContainerd2): what Kubernetes 1.37 nodes run, with CDI and
	// container events (the evented PLEG).
	ContainerdSeries2 ContainerdSeries = "2"
	// ContainerdSeries16 is Debian bookworm's containerd 1.6 and runc
	// packages, which older nodes still run.
	ContainerdSeries16 ContainerdSeries = "1.6"
)

// ContainerdSeriesEnv names the environment variable that sets
// DefaultContainerdSeries: "2" or "1.6".
const ContainerdSeriesEnv = "NODEKIT_E2E_CONTAINERD"

// DefaultContainerdSeries returns the series StartContainerd runs when
// its options name none: $NODEKIT_E2E_CONTAINERD if set, else
// ContainerdSeries2. It panics on any other value of the variable, which
// is a mistake in how the tests were invoked.
func DefaultContainerdSeries() ContainerdSeries {
	switch v := ContainerdSeries(os.Getenv(ContainerdSeriesEnv)); v {
	case "":
		return ContainerdSeries2
	case ContainerdSeries2, ContainerdSeries16:
		return v
	default:
		panic(fmt.Sprintf("%s=%q: want %q or %q", ContainerdSeriesEnv, v, ContainerdSeries2, ContainerdSeries16))
	}
}

// Paths containerd uses whatever its configuration says.
const (
	shimSocketDir  = "/run/containerd/s"
	cniResultsDir  = "/var/lib/cni/results"
	criNamespace   = "k8s.io"
	cniPluginDir   = "/usr/lib/cni"
	shimBinaryName = "containerd-shim-runc-v2"
)

// CheckContainerd reports what this machine lacks to run StartContainerd
// with DefaultContainerdSeries: root, the CNI plugin binaries, a static
// busybox and the ip command; for containerd 1.6 Debian's containerd and
// runc, for containerd 2 the go command and a C compiler (BuildContainerd2
// builds them). hack/install-deps.sh installs the Debian packages.
func CheckContainerd() error {
	return CheckContainerdSeries(DefaultContainerdSeries())
}

// CheckContainerdSeries is CheckContainerd for the given series.
func CheckContainerdSeries(series ContainerdSeries) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root privileges (containerd and runc run as root)")
	}
	commands := []string{"ip"}
	switch series {
	case ContainerdSeries16:
		commands = append(commands, "containerd", shimBinaryName, "ctr", "runc")
	case ContainerdSeries2:
		if _, err := goCommand(); err != nil {
			missing = append(missing, err.Error())
		}
		commands = append(commands, "gcc", "pkg-config")
	default:
		return fmt.Errorf("containerd series %q: want %q or %q", series, ContainerdSeries2, ContainerdSeries16)
	}
	for _, cmd := range commands {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd+" on PATH")
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniPluginDir, plugin)); err != nil {
			missing = append(missing, filepath.Join(cniPluginDir, plugin))
		}
	}
	if _, err := os.Stat(busyboxPath); err != nil {
		missing = append(missing, busyboxPath)
	} else if err := checkStatic(busyboxPath); err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) > 0 {
		return fmt.Errorf("containerd %s unavailable, missing: %s (hack/install-deps.sh installs the Debian packages containerd, runc, containernetworking-plugins, busybox-static, iproute2, gcc, pkg-config, libseccomp-dev)", series, strings.Join(missing, "; "))
	}
	return nil
}

var containerdInstances atomic.Uint32

// StartContainerd builds the images, writes the configuration, starts
// containerd and imports the images, returning once the CRI reports the
// runtime and the network ready. On failure it cleans up what it started.
// The caller must Close the returned daemon.
func StartContainerd(ctx context.Context, opts ContainerdOptions) (_ *Containerd, err error) {
	if opts.Series == "" {
		opts.Series = DefaultContainerdSeries()
	}
	if err := CheckContainerdSeries(opts.Series); err != nil {
		return nil, err
	}
	if opts.Source == (Source{}) {
		if opts.Source, err = LocateSource(); err != nil {
			return nil, err
		}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = time.Minute
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	c := &Containerd{Series: opts.Series, Dir: opts.Dir, timeout: opts.StartTimeout, log: opts.Log, binary: "containerd", ctr: "ctr", enter: opts.Enter, sandbox: opts.SandboxImage, cgroup: opts.Cgroup}
	if c.sandbox == "" {
		c.sandbox = PauseImage
	}
	if opts.Series == ContainerdSeries2 {
		bins := opts.Binaries
		if bins == (ContainerdBinaries{}) {
			if bins, err = BuildContainerd2(ctx, BuildOptions{Source: opts.Source, Log: opts.Log}); err != nil {
				return nil, fmt.Errorf("start containerd: %w", err)
			}
		}
		c.binary, c.ctr, c.crictl = bins.Containerd, bins.Ctr, bins.Crictl
		// containerd finds its shim on PATH before next to itself, and the
		// shim finds runc on PATH: Debian's must not come first.
		c.env = []string{"PATH=" + filepath.Dir(bins.Shim) + string(filepath.ListSeparator) + filepath.Dir(bins.Runc) + string(filepath.ListSeparator) + os.Getenv("PATH")}
		c.runc = bins.Runc
	} else {
		opts, goBin, err := BuildOptions{Source: opts.Source, Log: opts.Log}.complete()
		if err != nil {
			return nil, fmt.Errorf("start containerd: %w", err)
		}
		if _, c.crictl, err = buildCrictl(ctx, opts, goBin); err != nil {
			return nil, fmt.Errorf("start containerd: %w", err)
		}
	}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "nodekit-containerd-"); err != nil {
			return nil, fmt.Errorf("start containerd: %w", err)
		}
		c.removeDir = true
	}
	if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	if err := makeTraversable(c.Dir); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	hostDirs.acquire()
	defer func() {
		if err != nil {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	c.Socket = filepath.Join(c.Dir, "containerd.sock")
	c.Endpoint = "unix://" + c.Socket
	c.LogPath = filepath.Join(c.Dir, "containerd.log")
	c.configPath = filepath.Join(c.Dir, "config.toml")
	if c.Series == ContainerdSeries2 {
		c.CDISpecDir = filepath.Join(c.Dir, "cdi")
	}
	instance := fmt.Sprintf("%d-%d", os.Getpid(), containerdInstances.Add(1))
	c.network = "nodekit-e2e-" + instance
	c.bridge = fmt.Sprintf("nk%x", sha256.Sum256([]byte(c.Dir)))[:15]
	if c.PodSubnet, err = freePodSubnet(c.Dir); err != nil {
		return nil, err
	}
	metricsAddress := ""
	if opts.Metrics {
		port, err := freePort(loopback)
		if err != nil {
			return nil, fmt.Errorf("start containerd: metrics: %w", err)
		}
		metricsAddress = hostPort(loopback, port)
		c.MetricsURL = "http://" + metricsAddress + "/v1/metrics"
	}
	if err := c.writeConfig(metricsAddress); err != nil {
		return nil, err
	}
	images, err := BuildImages(ctx, opts.Source, c.Dir, opts.Log)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	for _, image := range images {
		if err := c.ImportImage(ctx, image); err != nil {
			return nil, fmt.Errorf("start containerd: %w", err)
		}
	}
	if c.sandbox != PauseImage {
		if _, err := runCommand(ctx, c.Dir, c.env, nil, c.ctr, "--address", c.Socket, "--namespace", criNamespace, "images", "tag", "--force", PauseImage, c.sandbox); err != nil {
			return nil, fmt.Errorf("start containerd: tag %s as the sandbox image: %w", PauseImage, err)
		}
	}
	fmt.Fprintf(c.log, "containerd %s ready at %s (log %s)\n", c.Series, c.Endpoint, c.LogPath)
	return c, nil
}

// podSubnets holds the pod subnets this process's containerd instances
// use. A subnet shows on a host interface only once the instance's CNI
// bridge exists, at its first pod: two instances started before that whose
// seeds land on the same /24 both took it, and the second bridge's pods
// were unreachable (connection refused from the host, the route going to
// the first bridge). Processes do not share the machine's e2e instances
// (the e2e lock), so a process-wide set suffices beside the host check.
var podSubnets = struct {
	sync.Mutex
	taken map[string]bool
}{taken: map[string]bool{}}

// freePodSubnet picks a /24 in 10.88.0.0/16 that no host interface and no
// other instance of this process uses, starting from one derived from seed
// so concurrent instances spread out, and takes it until
// releasePodSubnet.
func freePodSubnet(seed string) (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("list host addresses: %w", err)
	}
	podSubnets.Lock()
	defer podSubnets.Unlock()
	start := int(sha256.Sum256([]byte(seed))[0])
	for i := range 256 {
		_, subnet, _ := net.ParseCIDR(fmt.Sprintf("10.88.%d.0/24", (start+i)%256))
		used := podSubnets.taken[subnet.String()]
		for _, a := range addrs {
			if ipnet, ok := a.(*net.IPNet); ok && subnet.Contains(ipnet.IP) {
				used = true
			}
		}
		if !used {
			podSubnets.taken[subnet.String()] = true
			return subnet.String(), nil
		}
	}
	return "", errors.New("no free /24 for pods in 10.88.0.0/16")
}

// releasePodSubnet gives back a subnet freePodSubnet returned.
func releasePodSubnet(subnet string) {
	podSubnets.Lock()
	defer podSubnets.Unlock()
	delete(podSubnets.taken, subnet)
}

var containerdConfig = template.Must(template.New("config").Parse(`version = 2
root = "{{.Dir}}/root"
state = "{{.Dir}}/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{{.Socket}}"

[ttrpc]
  address = "{{.Socket}}.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = "{{.MetricsAddress}}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.PauseImage}}"
  # Root lacks CAP_SYS_RESOURCE on some machines; without this every
  # sandbox fails with runc's "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{{.Dir}}/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBinDir}}"
    conf_dir = "{{.Dir}}/cni/net.d"
    max_conf_num = 1
`))

// containerd2Config is containerd 2's configuration (version 4): the
// same runtime as containerdConfig's, with CDI devices from CDISpecDir
// and NRI's socket under Dir.
var containerd2Config = template.Must(template.New("config2").Parse(`version = 4
root = "{{.Dir}}/root"
state = "{{.Dir}}/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

# Version 4 ignores the top-level [grpc] and [ttrpc] of earlier versions:
# without these two, the daemon would serve on /run/containerd/containerd.sock.
[plugins."io.containerd.server.v1.grpc"]
  address = "{{.Socket}}"

[plugins."io.containerd.server.v1.ttrpc"]
  address = "{{.Socket}}.ttrpc"

[debug]
  level = "info"

[plugins."io.containerd.server.v1.metrics"]
  address = "{{.MetricsAddress}}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/opt"

[plugins."io.containerd.nri.v1.nri"]
  socket_path = "{{.Dir}}/nri.sock"
  plugin_path = "{{.Dir}}/nri/plugins"
  plugin_config_path = "{{.Dir}}/nri/conf.d"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{{.PauseImage}}"

  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{{.Dir}}/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  # As for 1.6: root lacks CAP_SYS_RESOURCE on some machines.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  # CDI devices are always on in containerd 2.
  cdi_spec_dirs = ["{{.CDISpecDir}}"]

  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{{.Runc}}"
        SystemdCgroup = false
        Root = "{{.Dir}}/runc"

  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{{.CNIBinDir}}"]
    conf_dir = "{{.Dir}}/cni/net.d"
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`))

// writeConfig writes the daemon's, crictl's and the CNI configuration;
// metricsAddress is where the daemon serves its metrics (empty: nowhere).
func (c *Containerd) writeConfig(metricsAddress string) error {
	var cfg strings.Builder
	tmpl := containerdConfig
	if c.Series == ContainerdSeries2 {
		tmpl = containerd2Config
		if err := os.MkdirAll(c.CDISpecDir, 0o755); err != nil {
			return fmt.Errorf("containerd config: %w", err)
		}
	}
	err := tmpl.Execute(&cfg, map[string]string{
		"Dir": c.Dir, "Socket": c.Socket, "PauseImage": c.sandbox, "CNIBinDir": cniPluginDir,
		"Runc": c.runc, "CDISpecDir": c.CDISpecDir, "MetricsAddress": metricsAddress,
	})
	if err != nil {
		return fmt.Errorf("containerd config: %w", err)
	}
	if err := os.WriteFile(c.configPath, []byte(cfg.String()), 0o644); err != nil {
		return fmt.Errorf("containerd config: %w", err)
	}
	crictlConfig := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 30\n", c.Endpoint, c.Endpoint)
	if err := os.WriteFile(c.crictlConfigPath(), []byte(crictlConfig), 0o644); err != nil {
		return fmt.Errorf("crictl config: %w", err)
	}
	cni := map[string]any{
		"cniVersion": "1.0.0",
		"name":       c.network,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      c.bridge,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": c.PodSubnet}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(c.Dir, "cni", "ipam"),
			},
		}},
	}
	data, err := json.MarshalIndent(cni, "", "  ")
	if err != nil {
		return fmt.Errorf("cni config: %w", err)
	}
	c.cniConfig = data
	if err := os.MkdirAll(filepath.Dir(c.cniConfigPath()), 0o755); err != nil {
		return fmt.Errorf("cni config: %w", err)
	}
	return c.SetNetworkConfigured(true)
}

func (c *Containerd) cniConfigPath() string {
	return filepath.Join(c.Dir, "cni", "net.d", "10-nodekit-e2e.conflist")
}

// SetNetworkConfigured writes (true) or removes (false) the CNI network
// configuration. containerd watches the directory: without a configuration
// it reports NetworkReady=false (reason NetworkPluginNotReady) and runs only
// host-network pods.
func (c *Containerd) SetNetworkConfigured(configured bool) error {
	if !configured {
		if err := removeIfExists(c.cniConfigPath()); err != nil {
			return fmt.Errorf("remove cni config: %w", err)
		}
		return nil
	}
	// Written in place: containerd 1.6 ignores a file renamed into the
	// directory. It may see the file empty first and retry on the write.
	if err := os.WriteFile(c.cniConfigPath(), c.cniConfig, 0o644); err != nil {
		return fmt.Errorf("write cni config: %w", err)
	}
	return nil
}

// Start starts the daemon (again, after Stop) and waits until the CRI
// reports RuntimeReady and NetworkReady. Starting a running daemon is a
// no-op.
func (c *Containerd) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("start containerd: already closed")
	}
	if c.proc != nil && !c.proc.exited() {
		return nil
	}
	argv := []string{c.binary, "--config", c.configPath}
	if c.enter != nil {
		argv = c.enter(argv...)
	}
	p, err := startProcess("containerd", c.LogPath, argv[0], argv[1:], c.env)
	if err != nil {
		return err
	}
	c.proc = p
	if c.cgroup != "" {
		if err := joinCgroup(c.cgroup, p.pid()); err != nil {
			return errors.Join(fmt.Errorf("start containerd: %w", err), c.stopLocked())
		}
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, c.timeout, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, p.exitErr()
		}
		last = c.criReady(ctx)
		if status.Code(last) == codes.Unimplemented {
			// The socket serves only once every plugin loaded: the CRI
			// plugin failed, and waiting will not help.
			return false, last
		}
		return last == nil, nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last: %v)", err, last)
		}
		return fmt.Errorf("start containerd: CRI not ready at %s: %w\n--- last lines of %s:\n%s", c.Endpoint, err, c.LogPath, LogTail(c.LogPath, 30))
	}
	fmt.Fprintf(c.log, "containerd running (pid %d)\n", p.pid())
	return nil
}

// Stop terminates the daemon (SIGTERM, SIGKILL after 15 s) but leaves its
// shims and containers running, as `systemctl stop containerd` does with the
// unit's KillMode=process: only the daemon's pid is signalled, and the shims
// are out of reach anyway (containerd starts each in a process group of its
// own, and they are reparented once started; see Shims). Stopping a stopped
// daemon is a no-op.
func (c *Containerd) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked()
}

func (c *Containerd) stopLocked() error {
	if c.proc == nil || c.proc.exited() {
		return nil
	}
	err := c.proc.stop(15 * time.Second)
	if errors.Is(err, errTimeout) {
		return err
	}
	fmt.Fprintf(c.log, "containerd stopped (pid %d)\n", c.proc.pid())
	return nil
}

// Shims returns the shim processes serving this daemon, running or
// stopped: each shim's -id (the task it was started for) and its pid. With
// runc.v2 a pod's containers join the shim of its sandbox, so normally
// every id is a sandbox's. An id that is a container's means containerd
// 1.6's shim grouping could not reach the sandbox's shim within its 100 ms
// (a starved machine), removed that shim's socket and started a second
// shim on the same address: after a daemon restart containerd reconnects
// to the second one, finds no task for the sandbox and reports it NOTREADY
// although its pause process still runs.
func (c *Containerd) Shims() (map[string]int, error) {
	procs, err := listProcs()
	if err != nil {
		return nil, fmt.Errorf("shims of %s: list processes: %w", c.Endpoint, err)
	}
	shims := map[string]int{}
	for _, p := range procs {
		if filepath.Base(p.args[0]) == shimBinaryName && flagValue(p.args, "-address") == c.Socket {
			shims[flagValue(p.args, "-id")] = p.pid
		}
	}
	return shims, nil
}

// PID returns the process id of the running containerd, for reading its
// /proc/<pid> figures; 0 when it is not running.
func (c *Containerd) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.exited() {
		return 0
	}
	return c.proc.pid()
}

// Metrics scrapes the daemon's Prometheus metrics; an error unless
// ContainerdOptions.Metrics asked for them.
func (c *Containerd) Metrics(ctx context.Context) (Metrics, error) {
	if c.MetricsURL == "" {
		return nil, errors.New("containerd metrics: not served (ContainerdOptions.Metrics)")
	}
	return scrapeMetrics(ctx, "containerd", c.MetricsURL)
}

// Running reports whether the daemon process is up.
func (c *Containerd) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc != nil && !c.proc.exited()
}

// dialCRI connects to the daemon's CRI service. The caller closes the
// connection.
func (c *Containerd) dialCRI() (*grpc.ClientConn, runtimeapi.RuntimeServiceClient, error) {
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", c.Endpoint, err)
	}
	return conn, runtimeapi.NewRuntimeServiceClient(conn), nil
}

func (c *Containerd) criReady(ctx context.Context) error {
	conn, client, err := c.dialCRI()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := client.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	// The kubelet's two: containerd 2 adds more, such as
	// ContainerdHasNoDeprecationWarnings, false on a cgroup v1 host.
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		found := false
		for _, cond := range resp.GetStatus().GetConditions() {
			if cond.Type != want {
				continue
			}
			found = true
			if !cond.Status {
				return fmt.Errorf("CRI condition %s is false: %s: %s", cond.Type, cond.Reason, cond.Message)
			}
		}
		if !found {
			return fmt.Errorf("CRI status has no condition %s", want)
		}
	}
	return nil
}

// Crictl runs crictl (the version e2e/tools/crictl pins) against the
// daemon, as an operator inspects a node, and returns its standard output.
func (c *Containerd) Crictl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.crictl, append([]string{"--config", c.crictlConfigPath()}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("crictl %s on %s: %w: %s", strings.Join(args, " "), c.Endpoint, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// crictlConfigPath is crictl's configuration for this daemon, which
// writeConfig writes: `crictl --config <it> ps` inspects it by hand.
func (c *Containerd) crictlConfigPath() string {
	return filepath.Join(c.Dir, "crictl.yaml")
}

// Version returns the runtime's CRI name and version, e.g. "containerd" and
// "1.6.20~ds1" (1.6) or "v2.4.2" (2).
func (c *Containerd) Version(ctx context.Context) (name, version string, err error) {
	conn, client, err := c.dialCRI()
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	resp, err := client.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return "", "", fmt.Errorf("CRI version of %s: %w", c.Endpoint, err)
	}
	return resp.RuntimeName, resp.RuntimeVersion, nil
}

// Close tears everything down: it stops and removes every pod sandbox
// through the CRI (releasing their network), stops the daemon, kills shims
// and container processes that remain, unmounts whatever is mounted under
// Dir, deletes the pod bridge, the shim sockets and CNI results containerd
// 1.6 leaves outside Dir, and removes Dir if StartContainerd created it.
// Close may be called more than once.
func (c *Containerd) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	ids := map[string]bool{}
	if c.proc != nil && !c.proc.exited() {
		removed, err := c.removeSandboxes(ctx)
		for _, id := range removed {
			ids[id] = true
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.stopLocked(); err != nil {
		errs = append(errs, err)
	}
	shims, err := killShims(c.Socket)
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range shims {
		ids[id] = true
	}
	if err := unmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	for id := range ids {
		if err := removeIfExists(shimSocketPath(c.Socket, criNamespace, id)); err != nil {
			errs = append(errs, err)
		}
	}
	if c.network != "" {
		results, _ := filepath.Glob(filepath.Join(cniResultsDir, c.network+"-*"))
		for _, r := range results {
			if err := removeIfExists(r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.bridge != "" {
		if _, err := net.InterfaceByName(c.bridge); err == nil {
			if _, err := runCommand(ctx, "/", nil, nil, "ip", "link", "delete", c.bridge); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.PodSubnet != "" {
		releasePodSubnet(c.PodSubnet)
	}
	if c.removeDir {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	hostDirs.release()
	return errors.Join(errs...)
}

// hostDirs tracks the directories outside Dir that containerd 1.6 creates
// whatever its configuration says: /run/containerd/s for shim sockets,
// /var/lib/cni/results, and a k8s.io cgroup in every hierarchy for
// containers without a cgroup parent. Those that did not exist when the
// first instance of this process started are removed, if empty, when the
// last one closes.
var hostDirs hostDirTracker

type hostDirTracker struct {
	mu      sync.Mutex
	live    int
	created []string
}

func (h *hostDirTracker) acquire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live++
	if h.live > 1 {
		return
	}
	h.created = nil
	candidates := []string{shimSocketDir, filepath.Dir(shimSocketDir), cniResultsDir, filepath.Dir(cniResultsDir)}
	candidates = append(candidates, cgroupDirs(criNamespace)...)
	for _, dir := range candidates {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			h.created = append(h.created, dir)
		}
	}
}

func (h *hostDirTracker) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live--
	if h.live > 0 {
		return
	}
	// Another process's containerd (another test binary's harness) may be
	// about to put a socket into one of them: leave them all then.
	if procs, err := listProcs(); err != nil || anyContainerd(procs) {
		h.created = nil
		return
	}
	// Children before parents; rmdir fails harmlessly on a non-empty one.
	sort.Slice(h.created, func(i, j int) bool { return len(h.created[i]) > len(h.created[j]) })
	for _, dir := range h.created {
		_ = syscall.Rmdir(dir)
	}
	h.created = nil
}

func anyContainerd(procs []procEntry) bool {
	for _, p := range procs {
		if name := filepath.Base(p.args[0]); name == "containerd" || strings.HasPrefix(name, "containerd-shim") {
			return true
		}
	}
	return false
}

// cgroupDirs returns <mount>/<name> for every mounted cgroup hierarchy.
func cgroupDirs(name string) []string {
	mounts, _ := readMountInfo()
	var dirs []string
	for _, m := range mounts {
		if m.fsType == "cgroup" || m.fsType == "cgroup2" {
			dirs = append(dirs, filepath.Join(m.target, name))
		}
	}
	return dirs
}

// removeSandboxes stops and removes every pod sandbox, returning their ids.
func (c *Containerd) removeSandboxes(ctx context.Context) ([]string, error) {
	conn, client, err := c.dialCRI()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// A node of a test may leave dozens of pods whose containers ignore
	// SIGTERM, on a loaded machine: stop them a few at a time, each with a
	// deadline of its own.
	listCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := client.ListPodSandbox(listCtx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes on %s: %w", c.Endpoint, err)
	}
	var (
		ids  []string
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 4)
	)
	for _, sb := range resp.Items {
		ids = append(ids, sb.Id)
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			var err error
			// A container the stopped agent was starting cannot be removed
			// until its start ends ("container is in starting state"):
			// stop and remove again, a second apart, within the deadline.
			for {
				if _, err = client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
					err = fmt.Errorf("stop pod sandbox %s: %w", id, err)
				} else if _, err = client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
					err = fmt.Errorf("remove pod sandbox %s: %w", id, err)
				}
				if err == nil || !strings.Contains(err.Error(), "in starting state") || ctx.Err() != nil {
					break
				}
				time.Sleep(time.Second)
			}
			if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// A sandbox with many containers on a loaded machine (the
				// hostile input test's 100) may take containerd longer
				// than the deadline to stop; Close kills its shims and
				// processes next, so nothing is left behind.
				fmt.Fprintf(c.log, "containerd: sandbox %s did not stop within a minute; killing its shims (%v)\n", id, err)
				return
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(sb.Id)
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

// shimSocketPath is where containerd 1.6 puts a shim's socket: a hash of the
// daemon address, namespace and shim id under /run/containerd/s.
func shimSocketPath(address, namespace, id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(address, namespace, id)))
	return filepath.Join(shimSocketDir, fmt.Sprintf("%x", sum))
}

// procEntry is what teardown needs to know about a process.
type procEntry struct {
	pid, ppid int
	args      []string
}

func listProcs() ([]procEntry, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []procEntry
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// The command name may hold spaces and parentheses; fields resume
		// after the last ')': state, then ppid.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		procs = append(procs, procEntry{pid: pid, ppid: ppid, args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")})
	}
	return procs, nil
}

// killShims SIGKILLs every shim serving the daemon at address, and every
// process below them (the containers), and waits until they are gone. It
// returns the shims' ids.
func killShims(address string) ([]string, error) {
	procs, err := listProcs()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var ids []string
	var victims []int
	for _, p := range procs {
		if filepath.Base(p.args[0]) != shimBinaryName || flagValue(p.args, "-address") != address {
			continue
		}
		ids = append(ids, flagValue(p.args, "-id"))
		// Children first, so a shim never sees its container die.
		var walk func(pid int)
		walk = func(pid int) {
			for _, child := range children[pid] {
				walk(child)
			}
			victims = append(victims, pid)
		}
		walk(p.pid)
	}
	for _, pid := range victims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, pid := range victims {
			if alive(pid) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return ids, fmt.Errorf("kill shims of %s: processes %v survive SIGKILL", address, victims)
	}
	return ids, nil
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	targets, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	sort.Slice(targets, func(i, j int) bool { return len(targets[i]) > len(targets[j]) })
	var errs []error
	for _, t := range targets {
		if err := syscall.Unmount(t, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or below dir, in mountinfo's order.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := readMountInfo()
	var targets []string
	for _, m := range mounts {
		if m.target == dir || strings.HasPrefix(m.target, dir+"/") {
			targets = append(targets, m.target)
		}
	}
	return targets, err
}

// mountInfo is one line of /proc/self/mountinfo: the mount point and the
// source unescaped, the file system type and its super options (a cgroup
// v1 hierarchy's controllers among them).
type mountInfo struct {
	target, fsType, source string
	superOptions           []string
}

// readMountInfo reads this process's mount table, in the order the mounts
// were made. Lines it cannot read are left out.
func readMountInfo() ([]mountInfo, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountInfo(data), nil
}

// parseMountInfo parses /proc/<pid>/mountinfo for readMountInfo.
func parseMountInfo(data []byte) []mountInfo {
	var mounts []mountInfo
	for _, line := range strings.Split(string(data), "\n") {
		// ID parent major:minor root target options [optional...] - type source super-options
		pre, post, ok := strings.Cut(line, " - ")
		fields, after := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(after) < 2 {
			continue
		}
		m := mountInfo{target: unescapeMountPath(fields[4]), fsType: after[0], source: unescapeMountPath(after[1])}
		if len(after) > 2 {
			m.superOptions = strings.Split(after[2], ",")
		}
		mounts = append(mounts, m)
	}
	return mounts
}

// sharedBindMount makes dir a bind mount of itself with shared propagation
// unless it is a mount point already, so that mounts made below it in
// another mount namespace whose copy of it is its peer appear on the host.
func sharedBindMount(dir string) error {
	targets, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if !slices.Contains(targets, dir) {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", dir, err)
		}
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for space, …).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// makeTraversable lets every user search dir and each directory above it
// (adding g+x and o+x where others lack x), as containerd's own state
// directory (/run/containerd, 0711) allows: runc resolves a container's
// rootfs under the state directory from inside the container's user
// namespace, where a pod with hostUsers: false is not root of the host's
// directories, so a 0700 temporary directory above it fails the sandbox
// with "remount-propagation ... permission denied".
func makeTraversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky)|0o011); err != nil {
				return err
			}
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}
