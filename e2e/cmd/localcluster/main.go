// Command localcluster brings up the e2e harness's cluster on this machine
// for a person to use: a real control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) on 127.0.0.1 and nodekit node
// agents (examples/nodeagent) on containerd or on the in-process fake
// runtime, every node on its own loopback address.
//
//	go -C e2e run ./cmd/localcluster up                  # one node, containerd if possible
//	go -C e2e run ./cmd/localcluster up -nodes=3 -runtime=fakecri
//	go -C e2e run ./cmd/localcluster build               # only build/cache the control plane, kubeadm, containerd 2 and metrics-server
//
// up prints the admin kubeconfig, the images the nodes hold (no registry is
// reachable from them) and a first kubectl run that works with them, and
// runs until Ctrl-C (SIGINT) or SIGTERM,
// then stops everything and removes its state (unless -dir was given).
// Binaries are cached in $NODEKIT_CACHE (default ~/.cache/nodekit).
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
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

const usage = `usage: localcluster <command> [flags]

commands:
  build   build (or reuse from the cache) etcd, kube-apiserver,
          kube-controller-manager, kube-scheduler, kubectl (statically
          linked, as released: kubeadm init's images hold them too),
          kubeadm, containerd 2, runc, crictl and metrics-server (the e2e
          suite's resource metrics pipeline); print their paths
  up      start a control plane and node agents, print how to reach them,
          and run until interrupted

flags of up:
`

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		upFlags(io.Discard).PrintDefaults()
		return errors.New("no command")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "build":
		bins, err := cluster.BuildControlPlane(ctx, cluster.BuildOptions{Log: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Printf("etcd %s\n%s\n%s\n%s\n%s\n", bins.Etcd, bins.KubeAPIServer, bins.KubeControllerManager, bins.KubeScheduler, bins.Kubectl)
		kubeadm, err := cluster.BuildKubeadm(ctx, cluster.BuildOptions{Log: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Println(kubeadm)
		ctrd, err := cluster.BuildContainerd2(ctx, cluster.BuildOptions{Log: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Printf("containerd %s\n%s\n%s\n%s\nrunc %s\n%s\ncrictl %s\n%s\n", ctrd.Version, ctrd.Containerd, ctrd.Shim, ctrd.Ctr, ctrd.RuncVersion, ctrd.Runc, ctrd.CrictlVersion, ctrd.Crictl)
		metricsServer, err := cluster.BuildMetricsServer(ctx, cluster.BuildOptions{Log: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Println(metricsServer)
		return nil
	case "up":
		opts := &upOptions{}
		fs := upFlags(os.Stderr)
		fs.IntVar(&opts.nodes, "nodes", 1, "number of node agents")
		fs.StringVar(&opts.runtime, "runtime", "auto", "container runtime of the nodes: containerd, fakecri, none (control plane only) or auto (containerd when this machine can run it, else fakecri)")
		fs.StringVar(&opts.series, "containerd-series", string(cluster.DefaultContainerdSeries()), "with -runtime=containerd: 2 (built from the pinned Go modules) or 1.6 (Debian's package)")
		fs.StringVar(&opts.dir, "dir", "", "keep all state (certificates, kubeconfigs, logs) in this directory instead of a temporary one")
		fs.DurationVar(&opts.grace, "node-monitor-grace-period", 20*time.Second, "kube-controller-manager's --node-monitor-grace-period")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return up(ctx, opts)
	default:
		fmt.Fprint(os.Stderr, usage)
		upFlags(io.Discard).PrintDefaults()
		return fmt.Errorf("unknown command %q", args[0])
	}
}

func upFlags(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(out)
	return fs
}

type upOptions struct {
	nodes   int
	runtime string
	series  string
	dir     string
	grace   time.Duration
}

func up(ctx context.Context, opts *upOptions) (err error) {
	switch opts.runtime {
	case "auto":
		opts.runtime = "containerd"
		if cerr := cluster.CheckContainerdSeries(cluster.ContainerdSeries(opts.series)); cerr != nil {
			fmt.Fprintf(os.Stderr, "using the fake runtime: %v\n", cerr)
			opts.runtime = "fakecri"
		}
	case "containerd", "fakecri", "none":
	default:
		return fmt.Errorf("-runtime=%s: want auto, containerd, fakecri or none", opts.runtime)
	}
	dir := opts.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "nodekit-local-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	src, err := cluster.LocateSource()
	if err != nil {
		return err
	}
	bins, err := cluster.BuildControlPlane(ctx, cluster.BuildOptions{Source: src, Log: os.Stderr})
	if err != nil {
		return err
	}
	cp, err := cluster.StartControlPlane(ctx, cluster.ControlPlaneOptions{
		Binaries: bins, Dir: filepath.Join(dir, "controlplane"), NodeMonitorGracePeriod: opts.grace, Log: os.Stderr,
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cp.Stop()) }()

	var agents []*cluster.Agent
	images := map[string][]string{} // node → the images its runtime holds
	defer func() {
		for _, a := range agents {
			err = errors.Join(err, a.Stop())
		}
	}()
	if opts.runtime != "none" && opts.nodes > 0 {
		binDir := filepath.Join(dir, "bin")
		if err := os.MkdirAll(binDir, 0o755); err != nil {
			return err
		}
		agentBin, err := cluster.BuildAgent(ctx, src, binDir, os.Stderr)
		if err != nil {
			return err
		}
		for i := 1; i <= opts.nodes; i++ {
			name := fmt.Sprintf("node-%d", i)
			endpoint, closeRuntime, err := startRuntime(ctx, opts.runtime, cluster.ContainerdSeries(opts.series), src, filepath.Join(dir, name))
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, closeRuntime()) }()
			a, err := cp.NewAgent(cluster.AgentOptions{Binary: agentBin, NodeName: name, RuntimeEndpoint: endpoint, CgroupDriver: "cgroupfs"})
			if err != nil {
				return err
			}
			if err := a.Start(ctx); err != nil {
				return err
			}
			agents = append(agents, a)
			fmt.Printf("node %s: InternalIP %s, runtime %s (%s)\n  log %s\n", a.Name, a.IP, opts.runtime, endpoint, a.LogPath)
			if images[a.Name], err = listImages(ctx, endpoint); err != nil {
				return err
			}
		}
	}
	fmt.Printf("\nnodekit local cluster is up (%s). In another shell:\n\n", cp.Server)
	fmt.Printf("  export KUBECONFIG=%s\n  export PATH=%s:$PATH\n  kubectl get nodes -o wide\n\n", cp.AdminKubeconfig, filepath.Dir(bins.Kubectl))
	printFirstSteps(os.Stdout, opts.runtime, images)
	fmt.Printf("control-plane logs: %s\nPress Ctrl-C to stop.\n", filepath.Join(cp.Dir, "logs"))
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "\nstopping")
	return nil
}

// startRuntime starts a runtime for one node (kind; series for
// containerd) with its state under dir and
// returns its CRI endpoint and how to tear it down.
func startRuntime(ctx context.Context, kind string, series cluster.ContainerdSeries, src cluster.Source, dir string) (string, func() error, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	if kind == "containerd" {
		c, err := cluster.StartContainerd(ctx, cluster.ContainerdOptions{Source: src, Series: series, Dir: filepath.Join(dir, "containerd"), Log: os.Stderr})
		if err != nil {
			return "", nil, err
		}
		return c.Endpoint, func() error { return c.Close(context.Background()) }, nil
	}
	fake := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
	// The images a containerd node holds, so the same pods run here.
	for _, ref := range []string{cluster.BusyboxImage, cluster.PauseImage} {
		img, err := fakecri.NewImage(ref, 2<<20)
		if err != nil {
			return "", nil, err
		}
		fake.AddImage(img)
	}
	endpoint, stop, err := fake.Start(filepath.Join(dir, "fakecri.sock"))
	if err != nil {
		return "", nil, err
	}
	return endpoint, func() error { stop(); return nil }, nil
}

// listImages returns the image references the CRI runtime at endpoint
// holds, sorted.
func listImages(ctx context.Context, endpoint string) ([]string, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list the images of %s: %w", endpoint, err)
	}
	var refs []string
	for _, img := range resp.Images {
		refs = append(refs, img.RepoTags...)
	}
	sort.Strings(refs)
	return refs, nil
}

// printFirstSteps tells a newcomer what runs at once: the nodes reach no
// registry, so a pod must use an image they hold.
func printFirstSteps(w io.Writer, runtime string, images map[string][]string) {
	if len(images) == 0 {
		return
	}
	nodes := make([]string, 0, len(images))
	for n := range images {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	fmt.Fprintln(w, "No image registry is reachable from the nodes: pods must use the images they hold")
	fmt.Fprintln(w, "(any other image ends in ImagePullBackOff):")
	for _, n := range nodes {
		fmt.Fprintf(w, "  %s: %s\n", n, strings.Join(images[n], ", "))
	}
	fmt.Fprintf(w, "\nA first pod:\n\n  kubectl run hello --image=%s -- sh -c 'echo hello from $(hostname); exec sleep 3600'\n", cluster.BusyboxImage)
	fmt.Fprintln(w, "  kubectl get pod hello -o wide")
	if runtime == "fakecri" {
		fmt.Fprintln(w, "\n(The nodes run on the fake runtime: their containers are simulated.)")
	}
	fmt.Fprintln(w)
}
