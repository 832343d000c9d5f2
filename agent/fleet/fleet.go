// Package fleet runs many simulated nodes in one process: each a complete
// nodekit agent (agent.New, the whole fx graph) on its own in-process fake
// runtime (runtime/fakecri, called directly, or on a unix socket of its
// own with Options.SocketCRI), with its own client certificate,
// Prometheus registry and root directory. Their pods
// "run" on the fake runtime; everything the API server sees (registration,
// status, leases, pod status, events) is the real agent's. Once an agent
// is built the fleet keeps its lifecycle hooks and lets its fx application
// (the dig graph) go; a component's failure stops its node, as a kubelet's
// process exits.
//
// nodebench (e2e/cmd/nodebench) runs a fleet beside the control plane to
// measure a node's cost; examples/fleet runs one as a shard of a
// StatefulSet on Kubernetes itself, its nodes named after the shard's pod.
//
// Credentials come either from the caller (Options.Kubeconfig: a client
// certificate per node issued beforehand) or from the agent's TLS
// bootstrap (Options.BootstrapKubeconfig: each node requests its client
// certificate with a CertificateSigningRequest, as a kubelet with
// --bootstrap-kubeconfig does).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/certificate"
	"github.com/nodekit/nodekit/internal/memtrim"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/volume"
)

// Options configure Start.
type Options struct {
	// Names are the nodes' names, one agent each. Required.
	Names []string
	// Dir holds a directory per node (<Dir>/<name>: its root directory,
	// kubeconfig, certificates, pod logs and the links to them, which
	// would otherwise fill the host's /var/log/containers). Required.
	Dir string
	// SocketCRI serves each node's fake runtime on a unix socket and has
	// its agent dial it, as an agent does a real runtime: the same CRI
	// client code (cri-client over gRPC) as on containerd, for two gRPC
	// connections per node (about 16 goroutines and 76 KiB of heap) and
	// their CPU. False, the default, has each agent call its fake runtime
	// in process (fakecri's Server.InProcess through the runtime
	// package's Options.RuntimeService and ImageService): no socket,
	// connection or serialization, the same replies and errors.
	SocketCRI bool
	// SocketDir holds the fake runtimes' sockets (<SocketDir>/<n>.sock)
	// with SocketCRI. Unix socket paths are limited to 107 bytes: keep it
	// short. Empty means a new temporary directory, removed by Stop.
	SocketDir string
	// Kubeconfig returns the kubeconfig of node i (Names[i]) with its
	// client certificate. Exactly one of Kubeconfig and
	// BootstrapKubeconfig is required.
	Kubeconfig func(i int) string
	// BootstrapKubeconfig holds credentials that may create
	// CertificateSigningRequests (a bootstrap token, a service account's
	// token): each node requests its client certificate with it
	// (certificate.Bootstrap) and writes <Dir>/<name>/kubeconfig, which
	// it then uses. The kube-controller-manager must approve and sign
	// the requests (its csrapproving controller approves them when the
	// requester may create certificatesigningrequests/nodeclient).
	BootstrapKubeconfig string
	// NodeIP returns node i's --node-ip; nil, or "", lets the agent find
	// the machine's address.
	NodeIP func(i int) string
	// Labels are added to every node at registration (--node-labels);
	// Taints registered with every node (--register-with-taints, as
	// "<key>=<value>:<effect>").
	Labels map[string]string
	Taints []string
	// Images are present in every node's fake runtime.
	Images []*runtimeapi.Image
	// Parallel is how many agents start at once (default 50).
	Parallel int
	// Services, when set, is the one ServiceLister of every agent (see
	// agent.ServiceLister): no agent watches the Services itself. The
	// caller runs it.
	Services agent.ServiceLister
	// Log receives progress messages; nil discards them. The agents log
	// through klog, each line carrying the node's name.
	Log io.Writer
	// MemoryMax, when positive, is the memory this process may use in
	// all: its container's memory limit (cgroup memory.max, which
	// examples/fleet reads), as an operator sizes a shard. Before the first
	// agent starts, Start sets the process's Go memory limit
	// (debug.SetMemoryLimit) to MemoryMax less the size of the executable's
	// read-only mappings (memtrim.ExecutableSize: pages that count in the
	// process's RSS but not in the Go runtime's memory), unless the
	// process's limit is lower already (GOMEMLIMIT); it stays set after
	// Stop. The collector then runs when the Go runtime's memory nears the
	// limit as well as each time the heap doubled (GOGC): a fleet whose
	// heap would regrow past its budget after the start (the start's
	// memory is released, then the heap grows back towards twice what the
	// agents hold live) trades that memory for collections, while a start
	// that stays under the limit costs nothing more (1,000 nodes in a
	// 1 GiB budget: no start cost measured, docs/performance.md). Set from
	// the start, as the container's limit is, it also bounds the start's
	// peak. A limit below what the agents hold live (at 1,000
	// nodes about 0.8 MiB per node: heap, stacks and the holes among the
	// agents' objects) makes the collector run continuously (the runtime
	// caps it at about half the CPU). Zero leaves the process's limit
	// (GOMEMLIMIT) alone.
	MemoryMax int64
	// StartMemoryPerNode, when positive, lets the collector run during
	// Start only when the heap reaches a memory limit of what the Go
	// runtime holds when Start begins plus StartMemoryPerNode bytes per
	// node (debug.SetGCPercent(-1) under debug.SetMemoryLimit), instead
	// of each time the heap doubled (GOGC): starting agents allocate
	// several times what they keep, and with GOGC each byte of it costs
	// about a byte of marking, so the collector's CPU falls with the
	// number of its cycles. Start restores the process's GOGC and memory
	// limit (MemoryMax's, when set) and returns the heap's free memory
	// to the system (debug.FreeOSMemory: one collection) before it
	// returns. The process's peak while starting is then up to that limit
	// (with MemoryMax, the lower of the two). Each cycle marks what
	// the agents started so far hold, and the limit must also hold their
	// stacks and the free space among their objects (at 1,000 nodes about
	// 1.35 MiB per node in all): the closer the limit is to that, the
	// more often the collector runs, up to continuously (the runtime caps
	// it at about half the CPU) and more than with GOGC. These are
	// settings of the whole process: two fleets that start at once in one
	// process overwrite each other's. Zero leaves the collector as the
	// process set it.
	StartMemoryPerNode int64
}

// Fleet is a running set of simulated nodes.
type Fleet struct {
	// Names are the nodes' names, as in Options.
	Names []string
	// Started is how long starting every agent (its TLS bootstrap
	// included) took, Options.Parallel at a time.
	Started time.Duration
	// MemoryLimit is the Go memory limit Start set (Options.MemoryMax),
	// zero when it set none.
	MemoryLimit int64

	socketDir, ownSocketDir string
	// mounter is every agent's: mount.New checks how umount behaves by
	// running it, once per mounter.
	mounter mount.Interface
	mu      sync.Mutex
	nodes   []*node
	stopCRI []func()
	// stopped is closed by the first Stop: no startup memory is
	// released after it.
	stopped  chan struct{}
	stopOnce sync.Once
}

// Start builds and starts the agents, opts.Parallel at a time, and returns
// once every agent's fx application started (the nodes turn Ready
// afterwards). On failure it stops what it started. The caller must Stop
// the fleet. A few seconds after it returns (memtrim.Settle), unless the
// fleet was stopped, the process gives back to the system what it touched
// only to start the agents, as agent.Run does for its one agent: the
// executable's pages mapped since the process started (those still in use
// come back one page at a time) and the heap the collector freed
// (NODEKIT_RELEASE_STARTUP_MEMORY=false in the environment keeps them).
func Start(ctx context.Context, opts Options) (_ *Fleet, err error) {
	switch {
	case len(opts.Names) == 0 || opts.Dir == "":
		return nil, errors.New("start fleet: Names and Dir are required")
	case (opts.Kubeconfig == nil) == (opts.BootstrapKubeconfig == ""):
		return nil, errors.New("start fleet: exactly one of Kubeconfig and BootstrapKubeconfig is required")
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 50
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	f := &Fleet{Names: opts.Names, socketDir: opts.SocketDir, mounter: mount.New(""), stopped: make(chan struct{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Stop())
		}
	}()
	if !opts.SocketCRI {
		f.socketDir = ""
	} else if f.socketDir == "" {
		if f.socketDir, err = os.MkdirTemp("", "nbf"); err != nil {
			return nil, fmt.Errorf("start fleet: %w", err)
		}
		f.ownSocketDir = f.socketDir
	} else if err := os.MkdirAll(f.socketDir, 0o755); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}

	if opts.MemoryMax > 0 {
		if f.MemoryLimit, err = goMemoryLimit(opts.MemoryMax); err != nil {
			return nil, fmt.Errorf("start fleet: %w", err)
		}
		if prev := debug.SetMemoryLimit(-1); prev < f.MemoryLimit {
			fmt.Fprintf(opts.Log, "fleet: keeping the Go memory limit %d MiB, lower than %d MiB of the %d MiB memory budget\n", prev>>20, f.MemoryLimit>>20, opts.MemoryMax>>20)
			f.MemoryLimit = 0
		} else {
			debug.SetMemoryLimit(f.MemoryLimit)
			fmt.Fprintf(opts.Log, "fleet: Go memory limit %d MiB: the %d MiB memory budget less the executable's %d MiB\n", f.MemoryLimit>>20, opts.MemoryMax>>20, (opts.MemoryMax-f.MemoryLimit)>>20)
		}
	}
	if opts.StartMemoryPerNode > 0 {
		limit := memoryLimit(len(opts.Names), opts.StartMemoryPerNode)
		if f.MemoryLimit > 0 {
			limit = min(limit, f.MemoryLimit)
		}
		gogc := debug.SetGCPercent(-1)
		after := debug.SetMemoryLimit(limit)
		fmt.Fprintf(opts.Log, "fleet: collector off until started, below a memory limit of %d MiB (%d KiB per node)\n", limit>>20, opts.StartMemoryPerNode>>10)
		defer func() {
			debug.SetMemoryLimit(after)
			debug.SetGCPercent(gogc)
			debug.FreeOSMemory()
		}()
	}
	began := time.Now()
	sem := make(chan struct{}, opts.Parallel)
	errs := make(chan error, len(opts.Names))
	for i := range opts.Names {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- f.startNode(ctx, opts, i)
		}()
	}
	var startErrs []error
	for range opts.Names {
		if err := <-errs; err != nil {
			startErrs = append(startErrs, err)
		}
	}
	if len(startErrs) > 0 {
		return nil, fmt.Errorf("start fleet: %d of %d agents failed: %w", len(startErrs), len(opts.Names), errors.Join(startErrs...))
	}
	f.Started = time.Since(began)
	fmt.Fprintf(opts.Log, "fleet: %d agents started in %s\n", len(opts.Names), f.Started.Round(time.Millisecond))
	// As agent.Run for its one agent: what the process touched only to
	// start them (the executable's pages mapped by fault-around, the heap
	// the collector freed) goes back to the system once they settled.
	go memtrim.AfterStart(klog.FromContext(ctx), f.stopped)
	return f, nil
}

// goMemoryLimit is the Go memory limit for a process that may use budget
// bytes in all: the budget less the executable's read-only mappings.
func goMemoryLimit(budget int64) (int64, error) {
	exe, err := memtrim.ExecutableSize()
	if err != nil {
		return 0, err
	}
	if limit := budget - int64(exe); limit > 0 {
		return limit, nil
	}
	return 0, fmt.Errorf("a memory budget of %d MiB leaves nothing beside the executable's %d MiB", budget>>20, exe>>20)
}

// memoryLimit is what the Go runtime holds now (its mapped memory less
// what it returned to the system, as the limit counts) plus perNode bytes
// for each of nodes.
func memoryLimit(nodes int, perNode int64) int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()-s[1].Value.Uint64()) + int64(nodes)*perNode
}

// args are the agent flags of a simulated node: its name and runtime, no
// cgroups of its own, no kubelet API, no healthz listener.
func args(name, ip, kubeconfig, endpoint, root string, labels map[string]string, taints []string) []string {
	a := []string{
		"--hostname-override=" + name,
		"--kubeconfig=" + kubeconfig,
		"--container-runtime-endpoint=" + endpoint,
		"--root-dir=" + root,
		"--cgroup-driver=cgroupfs",
		// The fake runtime's pods have no cgroups: leave the host's alone.
		"--cgroups-per-qos=false",
		// A host may have swap on.
		"--fail-swap-on=false",
		// No healthz/metrics listener per node; each agent still has its
		// own Prometheus registry.
		"--healthz-port=0",
	}
	if ip != "" {
		a = append(a, "--node-ip="+ip)
	}
	if len(labels) > 0 {
		kv := make([]string, 0, len(labels))
		for k, v := range labels {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		a = append(a, "--node-labels="+strings.Join(kv, ","))
	}
	if len(taints) > 0 {
		a = append(a, "--register-with-taints="+strings.Join(taints, ","))
	}
	return a
}

func (f *Fleet) startNode(ctx context.Context, opts Options, i int) error {
	name := opts.Names[i]
	dir := filepath.Join(opts.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	cri := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, Images: opts.Images})
	// An in-process runtime has no endpoint; this one names it in the
	// agent's messages.
	endpoint := inProcessEndpoint + name
	if opts.SocketCRI {
		var stopCRI func()
		var err error
		endpoint, stopCRI, err = cri.Start(filepath.Join(f.socketDir, fmt.Sprintf("%d.sock", i+1)))
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		f.mu.Lock()
		f.stopCRI = append(f.stopCRI, stopCRI)
		f.mu.Unlock()
		cri = nil // the agent dials it
	}
	cfg, err := nodeConfig(opts, i, dir, endpoint)
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	logger := klog.FromContext(ctx).WithValues("node", name)
	if opts.BootstrapKubeconfig != "" {
		cfg.BootstrapKubeconfigPath = opts.BootstrapKubeconfig
		if err := certificate.Bootstrap(klog.NewContext(ctx, logger), cfg.BootstrapOptions()); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	n := newNode(name, opts.Log)
	app := agent.New(cfg, append(nodeOptions(opts, i, cri, f.mounter), n.options())...)
	if err := app.Err(); err != nil {
		return fmt.Errorf("node %s: build agent: %w", name, err)
	}
	// The application is not kept (see node).
	n.startTimeout, n.stopTimeout = app.StartTimeout(), app.StopTimeout()
	startCtx, cancel := context.WithTimeout(ctx, n.startTimeout)
	defer cancel()
	if err := n.start(startCtx); err != nil {
		return fmt.Errorf("node %s: start agent: %w", name, err)
	}
	f.mu.Lock()
	f.nodes = append(f.nodes, n)
	f.mu.Unlock()
	return nil
}

// nodeConfig is the agent configuration of node i, whose files are under
// dir and whose runtime is at endpoint: the flags of args, its pod logs and
// their links under dir, no kubelet API.
func nodeConfig(opts Options, i int, dir, endpoint string) (*agent.Config, error) {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if opts.Kubeconfig != nil {
		kubeconfig = opts.Kubeconfig(i)
	}
	ip := ""
	if opts.NodeIP != nil {
		ip = opts.NodeIP(i)
	}
	cfg, err := agent.ParseFlags(klog.Background(), args(opts.Names[i], ip, kubeconfig, endpoint, filepath.Join(dir, "root"), opts.Labels, opts.Taints))
	if err != nil {
		return nil, err
	}
	// Pod logs stay in the node's directory, not the host's /var/log/pods.
	cfg.Kubelet.PodLogsDir = filepath.Join(dir, "pod-logs")
	// So do the links to them: not the host's /var/log/containers.
	cfg.ContainerLogsDir = filepath.Join(dir, "container-logs")
	// No kubelet API per node: every agent of the fleet would want port
	// 10250 (and a key pair of its own).
	cfg.Kubelet.EnableServer = ptr.To(false)
	return cfg, nil
}

// inProcessEndpoint, followed by the node's name, is the runtime endpoint
// of an agent that calls its fake runtime in process.
const inProcessEndpoint = "inprocess://fakecri/"

// nodeOptions are the fx options the fleet adds to node i's agent: its
// name on every log line, the shared Services lister, the in-process
// services of cri, its fake runtime, unless nil (Options.SocketCRI: the
// agent dials the runtime's socket), mounter as its volume manager's
// unless nil (volume.Manager's default, mount.New, runs umount(8) once
// for each agent to learn how it behaves: a thousand processes at a
// fleet's start), and, for every node
// but the first, an empty fx.DotGraph. The agent's graph check
// (a value in a nodekit value group of a type nobody reads there fails the
// start) reads the graph's DOT rendering, which fx then keeps for the
// application's lifetime: about 47 KiB per agent, and its CPU at start.
// Every node of a fleet is built from the same options, so the first
// node's check stands for all of them.
func nodeOptions(opts Options, i int, cri *fakecri.Server, mounter mount.Interface) []fx.Option {
	name := opts.Names[i]
	extra := []fx.Option{fx.Decorate(func(l logr.Logger) logr.Logger { return l.WithValues("node", name) })}
	if mounter != nil {
		extra = append(extra, fx.Decorate(func(o volume.Options) volume.Options {
			if o.Mounter == nil {
				o.Mounter = mounter
			}
			return o
		}))
	}
	if cri != nil {
		extra = append(extra, fx.Decorate(func(o runtime.Options) runtime.Options {
			o.RuntimeService, o.ImageService = cri.InProcess()
			return o
		}))
	}
	if opts.Services != nil {
		extra = append(extra, fx.Replace(opts.Services))
	}
	if i > 0 {
		extra = append(extra, fx.Replace(fx.DotGraph("")))
	}
	return extra
}

// Stop stops every agent (in parallel) and fake runtime and removes the
// sockets' directory if Start made it. The nodes' Node objects stay: the
// caller deletes them (a node may not delete its own). It reports agents
// that did not stop cleanly and may be called more than once.
func (f *Fleet) Stop() error {
	f.stopOnce.Do(func() { close(f.stopped) })
	f.mu.Lock()
	nodes, stops := f.nodes, f.stopCRI
	f.nodes, f.stopCRI = nil, nil
	f.mu.Unlock()
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), n.stopTimeout)
			defer cancel()
			if err := n.stop(ctx); err != nil {
				errs <- fmt.Errorf("node %s: %w", n.name, err)
				return
			}
			errs <- nil
		}()
	}
	var all []error
	for range nodes {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	for _, stop := range stops {
		stop()
	}
	if f.ownSocketDir != "" {
		if err := os.RemoveAll(f.ownSocketDir); err != nil {
			all = append(all, err)
		}
	}
	if len(all) > 0 {
		return fmt.Errorf("stop fleet: %d agents did not stop cleanly: %w", len(all), errors.Join(all...))
	}
	return nil
}
