package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// FleetOptions configure StartFleet.
type FleetOptions struct {
	// ControlPlane is the cluster the nodes join. Required.
	ControlPlane *cluster.ControlPlane
	// Nodes is how many agents to run. Required.
	Nodes int
	// Dir holds the nodes' kubeconfigs and root directories. Required.
	Dir string
	// Name prefixes the node names (<Name>-0001, …) and is the value of
	// the nodes' FleetLabel. Required.
	Name string
	// Images are present in every node's fake runtime.
	Images []*runtimeapi.Image
	// Parallel is how many agents start at once (default 50).
	Parallel int
	// Services, when set, is the one ServiceLister of every agent (see
	// agent.ServiceLister): no agent watches the Services itself. The
	// caller runs it.
	Services agent.ServiceLister
	// Log receives progress messages; nil discards them.
	Log io.Writer
}

// FleetLabel is the node label, set to FleetOptions.Name, that tells a
// fleet's nodes apart.
const FleetLabel = "nodebench.nodekit.io/fleet"

// Fleet is many nodekit agents in this process, each the full agent.Module
// with its own fake runtime (runtime/fakecri on its own socket), client
// certificate, Prometheus registry and root directory: what an embedder
// simulating a large cluster would run. They share what is cluster-wide
// when FleetOptions.Services is given: one informer on the Services.
type Fleet struct {
	// Names are the nodes' names.
	Names []string
	// Credentials is how long issuing the nodes' client certificates and
	// kubeconfigs took (sequentially).
	Credentials time.Duration
	// Started is how long starting every agent's fx application took
	// (Parallel at a time).
	Started time.Duration

	socketDir string
	mu        sync.Mutex
	apps      []*fx.App
	stopCRI   []func()
}

// fleetNode is what one node needs before its agent starts.
type fleetNode struct {
	name, kubeconfig, ip, root string
}

// StartFleet issues the nodes' credentials, then builds and starts their
// agents, opts.Parallel at a time, and returns once every agent's fx
// application started (the nodes turn Ready afterwards: see WatchReady).
// The agents log through klog, each line carrying the node's name. On
// failure it stops what it started. The caller must Stop the fleet.
func StartFleet(ctx context.Context, opts FleetOptions) (_ *Fleet, err error) {
	if opts.ControlPlane == nil || opts.Nodes <= 0 || opts.Dir == "" || opts.Name == "" {
		return nil, errors.New("start fleet: ControlPlane, Nodes, Dir and Name are required")
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 50
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	f := &Fleet{}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Stop())
		}
	}()
	// Unix socket paths are limited to 107 bytes: keep them short.
	if f.socketDir, err = os.MkdirTemp("", "nbf"); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}

	nodes := make([]fleetNode, opts.Nodes)
	began := time.Now()
	for i := range nodes {
		n := &nodes[i]
		n.name = fmt.Sprintf("%s-%04d", opts.Name, i+1)
		n.ip = opts.ControlPlane.AllocateNodeIP()
		dir := filepath.Join(opts.Dir, n.name)
		n.root = filepath.Join(dir, "root")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("start fleet: %w", err)
		}
		if n.kubeconfig, err = opts.ControlPlane.NodeCredentials(n.name, dir); err != nil {
			return nil, fmt.Errorf("start fleet: node %s: %w", n.name, err)
		}
		f.Names = append(f.Names, n.name)
	}
	f.Credentials = time.Since(began)
	fmt.Fprintf(opts.Log, "fleet: %d node certificates and kubeconfigs issued in %s\n", opts.Nodes, f.Credentials.Round(time.Millisecond))

	began = time.Now()
	sem := make(chan struct{}, opts.Parallel)
	errs := make(chan error, opts.Nodes)
	for i := range nodes {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- f.startNode(ctx, opts, i, nodes[i])
		}()
	}
	var startErrs []error
	for range nodes {
		if err := <-errs; err != nil {
			startErrs = append(startErrs, err)
		}
	}
	if len(startErrs) > 0 {
		return nil, fmt.Errorf("start fleet: %d of %d agents failed: %w", len(startErrs), opts.Nodes, errors.Join(startErrs...))
	}
	f.Started = time.Since(began)
	fmt.Fprintf(opts.Log, "fleet: %d agents started in %s\n", opts.Nodes, f.Started.Round(time.Millisecond))
	return f, nil
}

func (f *Fleet) startNode(ctx context.Context, opts FleetOptions, i int, n fleetNode) error {
	cri := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, Images: opts.Images})
	endpoint, stopCRI, err := cri.Start(filepath.Join(f.socketDir, fmt.Sprintf("%d.sock", i+1)))
	if err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	f.mu.Lock()
	f.stopCRI = append(f.stopCRI, stopCRI)
	f.mu.Unlock()
	cfg, err := agent.ParseFlags(klog.Background(), []string{
		"--hostname-override=" + n.name,
		"--node-ip=" + n.ip,
		"--kubeconfig=" + n.kubeconfig,
		"--container-runtime-endpoint=" + endpoint,
		"--root-dir=" + n.root,
		"--node-labels=" + FleetLabel + "=" + opts.Name,
		"--cgroup-driver=cgroupfs",
		// The fake runtime's pods have no cgroups: leave the host's alone.
		"--cgroups-per-qos=false",
		// A benchmark host may have swap on.
		"--fail-swap-on=false",
		// No healthz/metrics listener per node; each agent still has its
		// own Prometheus registry.
		"--healthz-port=0",
	})
	if err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	// Pod logs stay in the node's directory, not the host's /var/log/pods.
	cfg.Kubelet.PodLogsDir = filepath.Join(filepath.Dir(n.root), "pod-logs")
	// No kubelet API per node: every agent of the fleet would want port
	// 10250 (and a key pair of its own).
	cfg.Kubelet.EnableServer = ptr.To(false)
	opts2 := []fx.Option{fx.Decorate(func(l logr.Logger) logr.Logger { return l.WithValues("node", n.name) })}
	if opts.Services != nil {
		opts2 = append(opts2, fx.Replace(opts.Services))
	}
	app := agent.New(cfg, opts2...)
	if err := app.Err(); err != nil {
		return fmt.Errorf("node %s: build agent: %w", n.name, err)
	}
	startCtx, cancel := context.WithTimeout(ctx, app.StartTimeout())
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return fmt.Errorf("node %s: start agent: %w", n.name, err)
	}
	f.mu.Lock()
	f.apps = append(f.apps, app)
	f.mu.Unlock()
	return nil
}

// Stop stops every agent (in parallel) and fake runtime and removes the
// sockets' directory. It reports agents that did not stop cleanly and may
// be called more than once.
func (f *Fleet) Stop() error {
	f.mu.Lock()
	apps, stops := f.apps, f.stopCRI
	f.apps, f.stopCRI = nil, nil
	f.mu.Unlock()
	errs := make(chan error, len(apps))
	for _, app := range apps {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), app.StopTimeout())
			defer cancel()
			errs <- app.Stop(ctx)
		}()
	}
	var all []error
	for range apps {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	for _, stop := range stops {
		stop()
	}
	if f.socketDir != "" {
		if err := os.RemoveAll(f.socketDir); err != nil {
			all = append(all, err)
		}
	}
	if len(all) > 0 {
		return fmt.Errorf("stop fleet: %d agents did not stop cleanly: %w", len(all), errors.Join(all...))
	}
	return nil
}
