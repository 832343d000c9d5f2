package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/fleet"
	"github.com/nodekit/nodekit/e2e/cluster"
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
	// MemoryMax is fleet.Options.MemoryMax: the memory this process may
	// use in all, as a container's memory limit, from which the fleet sets
	// its Go memory limit.
	MemoryMax int64
	// StartMemoryPerNode is fleet.Options.StartMemoryPerNode: the memory
	// limit, in bytes per node, below which the collector does not run
	// while the agents start.
	StartMemoryPerNode int64
	// SocketCRI is fleet.Options.SocketCRI: the agents dial their fake
	// runtimes' sockets instead of calling them in process.
	SocketCRI bool
}

// FleetLabel is the node label, set to FleetOptions.Name, that tells a
// fleet's nodes apart.
const FleetLabel = "nodebench.nodekit.io/fleet"

// Fleet is many nodekit agents in this process (package agent/fleet), each
// the full agent.Module with its own fake runtime, client certificate,
// Prometheus registry and root directory: what an embedder simulating a
// large cluster would run. They share what is cluster-wide when
// FleetOptions.Services is given: one informer on the Services.
type Fleet struct {
	*fleet.Fleet
	// Credentials is how long issuing the nodes' client certificates and
	// kubeconfigs took (sequentially).
	Credentials time.Duration
}

// StartFleet issues the nodes' credentials, then builds and starts their
// agents, opts.Parallel at a time, and returns once every agent's fx
// application started (the nodes turn Ready afterwards: see WatchReady).
// On failure it stops what it started. The caller must Stop the fleet.
func StartFleet(ctx context.Context, opts FleetOptions) (*Fleet, error) {
	if opts.ControlPlane == nil || opts.Nodes <= 0 || opts.Dir == "" || opts.Name == "" {
		return nil, errors.New("start fleet: ControlPlane, Nodes, Dir and Name are required")
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	names, ips, kubeconfigs := make([]string, opts.Nodes), make([]string, opts.Nodes), make([]string, opts.Nodes)
	began := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", opts.Name, i+1)
		ips[i] = opts.ControlPlane.AllocateNodeIP()
		dir := filepath.Join(opts.Dir, names[i])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("start fleet: %w", err)
		}
		var err error
		if kubeconfigs[i], err = opts.ControlPlane.NodeCredentials(names[i], dir); err != nil {
			return nil, fmt.Errorf("start fleet: node %s: %w", names[i], err)
		}
	}
	credentials := time.Since(began)
	fmt.Fprintf(opts.Log, "fleet: %d node certificates and kubeconfigs issued in %s\n", opts.Nodes, credentials.Round(time.Millisecond))
	f, err := fleet.Start(ctx, fleet.Options{
		Names: names, Dir: opts.Dir,
		Kubeconfig: func(i int) string { return kubeconfigs[i] },
		NodeIP:     func(i int) string { return ips[i] },
		Labels:     map[string]string{FleetLabel: opts.Name},
		Images:     opts.Images, Parallel: opts.Parallel, Services: opts.Services, Log: opts.Log,
		MemoryMax: opts.MemoryMax, StartMemoryPerNode: opts.StartMemoryPerNode, SocketCRI: opts.SocketCRI,
	})
	if err != nil {
		return nil, err
	}
	return &Fleet{Fleet: f, Credentials: credentials}, nil
}
