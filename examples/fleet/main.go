// Command fleet runs one shard of simulated nodes (package agent/fleet):
// --nodes complete nodekit agents on fake runtimes in this process, named
// <shard>-0001 … <shard>-<nodes>, where the shard is $POD_NAME (a
// StatefulSet's pod, <set>-<ordinal>) or --shard. Each node requests its
// client certificate with the shard's bootstrap credentials, by default
// the pod's service account; on SIGTERM or SIGINT the shard stops its
// agents and deletes its Node objects. A memory limit on the shard's
// container (resources.limits.memory) becomes its memory budget
// (--memory-max=auto): the Go memory limit is that less the executable's
// pages, so the collector works harder before the kernel would reclaim or
// kill (agent/fleet's Options.MemoryMax).
//
//	fleet --nodes=100                        # in a pod of the StatefulSet
//	fleet manifests --name=fleet --namespace=nodekit-fleet \
//	      --image=nodekit.local/fleet:1 --shards=10 --nodes=1000 | kubectl apply -f -
//
// The manifests are agent/fleet.Deployment's: the ServiceAccount, its RBAC
// (CSR bootstrap, auto-approval of node client certificates, read on
// Services for the shard's one Services informer, delete on the fleet's
// Node objects by name) and the StatefulSet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/fleet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "manifests" {
		err = manifests(os.Args[2:], os.Stdout)
	} else {
		err = run(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// shardOptions are the shard's flags.
type shardOptions struct {
	nodes       int
	shard       string
	fleet       string
	dir         string
	server      string
	bootstrap   string
	nodeIP      string
	parallel    int
	memoryMax   string
	startMem    float64
	taint       bool
	deleteNodes bool
}

func run(ctx context.Context, args []string) error {
	var o shardOptions
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.IntVar(&o.nodes, "nodes", 10, "simulated nodes in this shard")
	fs.StringVar(&o.shard, "shard", os.Getenv("POD_NAME"), "the shard's name, the prefix of its nodes' names (default $POD_NAME)")
	fs.StringVar(&o.fleet, "fleet", "fleet", "the fleet's name: the nodes' "+fleet.Label+" label and their "+fleet.Taint+" taint's value")
	fs.StringVar(&o.dir, "dir", "/var/lib/nodekit-fleet", "the nodes' state (root directories, certificates)")
	fs.StringVar(&o.server, "server", "", "the API server's URL (default: the in-cluster address)")
	fs.StringVar(&o.bootstrap, "bootstrap-kubeconfig", "", "credentials that may request node client certificates (default: the pod's service account)")
	fs.StringVar(&o.nodeIP, "node-ip", os.Getenv("POD_IP"), "every node's address (default $POD_IP)")
	fs.IntVar(&o.parallel, "parallel", 50, "agents started at once")
	fs.Float64Var(&o.startMem, "start-memory-per-node", 0, "while the agents start, run the garbage collector only when this process's Go memory reaches what it holds then plus this many MiB per node: less CPU for a higher peak and more RSS after the start (see agent/fleet's Options.StartMemoryPerNode); 0 leaves GOGC alone")
	fs.StringVar(&o.memoryMax, "memory-max", "auto", "the memory this shard may use in all, as a quantity (1Gi), \"auto\" for this container's memory limit (cgroup memory.max; none when unlimited) or 0 for none: the Go memory limit is set, before the agents start, to this less the executable's read-only mappings, so the collector runs before the process outgrows it (see agent/fleet's Options.MemoryMax); a lower GOMEMLIMIT is kept")
	fs.BoolVar(&o.taint, "taint", true, "register the nodes with the "+fleet.Taint+"=<fleet>:NoSchedule taint")
	fs.BoolVar(&o.deleteNodes, "delete-nodes", true, "delete the shard's Node objects when it stops")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.shard == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("no --shard and no hostname: %w", err)
		}
		o.shard = h
	}
	if o.nodes < 1 {
		return fmt.Errorf("--nodes=%d: want at least 1", o.nodes)
	}
	memoryMax, err := memoryBudget(o.memoryMax)
	if err != nil {
		return err
	}
	if o.startMem < 0 {
		return fmt.Errorf("--start-memory-per-node=%g: want 0 or more", o.startMem)
	}
	logger := klog.Background().WithValues("shard", o.shard)
	ctx = klog.NewContext(ctx, logger)
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	if o.bootstrap == "" {
		if o.bootstrap, err = serviceAccountKubeconfig(o.server, filepath.Join(o.dir, "bootstrap-kubeconfig")); err != nil {
			return err
		}
	}
	client, err := clientFor(o.bootstrap)
	if err != nil {
		return err
	}
	// One informer on the Services for the shard (the service account may
	// read them) instead of one watch per node.
	services, runServices := agent.NewServiceLister(client)
	svcCtx, stopServices := context.WithCancel(ctx)
	servicesDone := make(chan struct{})
	go func() { defer close(servicesDone); runServices(svcCtx) }()
	defer func() { stopServices(); <-servicesDone }()
	names := fleet.NodeNames(o.shard, o.nodes)
	opts := fleet.Options{
		Names: names, Dir: filepath.Join(o.dir, "nodes"),
		BootstrapKubeconfig: o.bootstrap,
		NodeIP:              func(int) string { return o.nodeIP },
		Labels:              map[string]string{fleet.Label: o.fleet, fleet.ShardLabel: o.shard},
		Parallel:            o.parallel,
		MemoryMax:           memoryMax,
		StartMemoryPerNode:  int64(o.startMem * (1 << 20)),
		Services:            services,
		Log:                 os.Stderr,
	}
	if o.taint {
		opts.Taints = []string{fleet.Taint + "=" + o.fleet + ":NoSchedule"}
	}
	f, err := fleet.Start(ctx, opts)
	if err == nil {
		logger.Info("Shard running", "nodes", len(names), "first", names[0], "last", names[len(names)-1], "started", f.Started)
		<-ctx.Done()
		logger.Info("Stopping the shard")
		err = f.Stop()
	}
	if o.deleteNodes {
		err = errors.Join(err, deleteNodes(context.WithoutCancel(ctx), client, names))
	}
	return err
}

// memoryBudget is --memory-max in bytes: "auto" reads this process's
// container memory limit, 0 when it has none.
func memoryBudget(flag string) (int64, error) {
	if flag == "auto" {
		self, err := os.ReadFile("/proc/self/cgroup")
		if os.IsNotExist(err) {
			return 0, nil
		}
		if err == nil {
			var limit int64
			if limit, err = containerMemoryLimit("/sys/fs/cgroup", self); err == nil {
				return limit, nil
			}
		}
		return 0, fmt.Errorf("--memory-max=auto: %w (give the container's memory limit, or 0 for none)", err)
	}
	q, err := resource.ParseQuantity(flag)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("--memory-max=%s: want auto, 0 or a quantity of memory such as 1Gi", flag)
	}
	return q.Value(), nil
}

// serviceAccountKubeconfig writes a kubeconfig with the pod's service
// account token (re-read when the kubelet rotates it) and the cluster's CA
// to path, for server or the in-cluster address.
func serviceAccountKubeconfig(server, path string) (string, error) {
	in, err := rest.InClusterConfig()
	if err != nil && server == "" {
		return "", fmt.Errorf("bootstrap credentials: no --bootstrap-kubeconfig and not in a pod: %w", err)
	}
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	if server == "" {
		server = in.Host
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: filepath.Join(dir, "ca.crt")}
	cfg.AuthInfos["shard"] = &clientcmdapi.AuthInfo{TokenFile: filepath.Join(dir, "token")}
	cfg.Contexts["shard"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "shard"}
	cfg.CurrentContext = "shard"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("bootstrap credentials: %w", err)
	}
	return path, nil
}

// clientFor returns a client with the credentials of kubeconfig.
func clientFor(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("shard credentials: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("shard credentials: %w", err)
	}
	return client, nil
}

// deleteNodes deletes the shard's Node objects with the shard's own
// credentials (a node may not delete itself), retrying for a minute.
func deleteNodes(ctx context.Context, client kubernetes.Interface, names []string) error {
	var errs []error
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			if err == nil || apierrors.IsNotFound(err) {
				return true, nil
			}
			if apierrors.IsForbidden(err) {
				return false, err
			}
			klog.FromContext(ctx).Info("Cannot delete a node, retrying", "node", name, "err", err)
			return false, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("delete node %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// manifests prints fleet.Deployment's objects as a YAML stream.
func manifests(args []string, out io.Writer) error {
	var o fleet.DeployOptions
	var extra string
	fs := flag.NewFlagSet("fleet manifests", flag.ContinueOnError)
	fs.StringVar(&o.Name, "name", "fleet", "the StatefulSet's (and the fleet's) name")
	fs.StringVar(&o.Namespace, "namespace", "nodekit-fleet", "the StatefulSet's namespace")
	fs.StringVar(&o.Image, "image", "", "the image holding this command as its entrypoint (required)")
	fs.IntVar(&o.Shards, "shards", 1, "the StatefulSet's replicas")
	fs.IntVar(&o.NodesPerShard, "nodes", 100, "simulated nodes per shard")
	fs.BoolVar(&o.HostNetwork, "host-network", false, "run the shards in their host's network namespace")
	fs.StringVar(&extra, "args", "", "more flags for the shards, separated by spaces (such as --server=https://…)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Args = strings.Fields(extra)
	objs, err := fleet.Deployment(o)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "---\n%s", data); err != nil {
			return err
		}
	}
	return nil
}
