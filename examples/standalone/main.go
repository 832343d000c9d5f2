// Command standalone runs a nodekit agent without a cluster: the static pods
// of a manifest directory on the in-process fake runtime (runtime/fakecri),
// printing their states as they change. It needs neither root nor an API
// server, so it is the quickest way to watch the agent work:
//
//	go run ./examples/standalone --pod-manifest-path=examples/manifests 2>/tmp/nodekit.log
//
// prints a table of the pods (phase, ready containers, restarts) each time it
// changes, and stops on Ctrl-C; the agent's log goes to stderr. Edit, add or
// remove a file in the directory and watch the table follow.
//
// Every kubelet flag nodekit takes works here too. With
// --container-runtime-endpoint the pods run on that runtime instead, e.g. on
// a containerd that no other node's kubelet uses (it needs root, and the
// images must be pullable or present):
//
//	sudo go run ./examples/standalone --pod-manifest-path=examples/manifests \
//	    --container-runtime-endpoint=unix:///run/containerd/containerd.sock
//
// Without --kubeconfig the agent is standalone (agent.Standalone): it runs
// the static pods only, and keeps their statuses locally. Unless given, the
// agent's state goes to a temporary directory (--root-dir), the healthz
// port is off, and on the fake runtime cgroups are left alone
// (--cgroups-per-qos=false) and the kubelet API listens on a free loopback
// port with anonymous requests allowed (AlwaysAllow), so /pods shows the
// pods and their statuses: a node without an API server cannot run Webhook
// authorization, so with the secure defaults (a real runtime) it serves no
// kubelet API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/status/podstatus"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func run(args []string, out io.Writer) int {
	dir, err := os.MkdirTemp("", "nodekit-standalone-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	// Defaults a standalone demo needs, before the user's flags (which win).
	defaults := []string{"--root-dir=" + filepath.Join(dir, "root"), "--healthz-port=0",
		"--container-logs-dir=" + filepath.Join(dir, "container-logs")}
	if !hasFlag(args, "container-runtime-endpoint") {
		fake := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, PullAny: true})
		endpoint, stop, err := fake.Start(filepath.Join(dir, "fakecri.sock"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "start the fake runtime:", err)
			return 1
		}
		defer stop()
		defaults = append(defaults, "--container-runtime-endpoint="+endpoint, "--cgroups-per-qos=false")
		fmt.Fprintf(out, "Running on the in-process fake runtime (%s): containers are simulated.\n", endpoint)
		// The kubelet API on a free loopback port, open to local requests:
		// with no API server, Webhook authorization cannot run and the
		// secure defaults would serve nothing. Simulated containers only;
		// on a real runtime the secure defaults stay.
		if !hasFlag(args, "port") {
			port, err := freePort()
			if err != nil {
				fmt.Fprintln(os.Stderr, "find a port for the kubelet API:", err)
				return 1
			}
			defaults = append(defaults, "--address=127.0.0.1", "--port="+port, "--anonymous-auth=true", "--authorization-mode=AlwaysAllow")
		}
	}
	cfg, err := agent.ParseFlags(klog.Background(), append(defaults, args...))
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if errors.Is(err, agent.ErrVersion) {
		fmt.Fprintln(out, agent.VersionLine())
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		return 2
	}
	if !hasFlag(args, "config") {
		cfg.Kubelet.PodLogsDir = filepath.Join(dir, "pod-logs")
	}
	if cfg.KubeconfigPath != "" {
		fmt.Fprintln(out, "A --kubeconfig was given: the agent registers with that API server.")
	}
	if cfg.Kubelet.StaticPodPath == "" && cfg.Kubelet.StaticPodURL == "" {
		fmt.Fprintln(out, "No --pod-manifest-path or --manifest-url: there are no pods to run. Try --pod-manifest-path=examples/manifests.")
	}

	app := agent.New(cfg, fx.Invoke(func(lc fx.Lifecycle, store *pods.Store, statuses podstatus.Interface) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				go func() {
					defer close(done)
					printPods(ctx, out, store, statuses)
				}()
				return nil
			},
			OnStop: func(context.Context) error {
				cancel()
				<-done
				return nil
			},
		})
	}))
	if err := app.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		return 1
	}
	startCtx, cancel := context.WithTimeout(context.Background(), app.StartTimeout())
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		return 1
	}
	fmt.Fprintf(out, "Node %s is running standalone; Ctrl-C stops it.\n", cfg.NodeName)
	if cfg.Kubelet.Authorization.Mode == "AlwaysAllow" && cfg.ServerEnabled() {
		fmt.Fprintf(out, "Its kubelet API lists the pods: curl -sk https://%s/pods\n", net.JoinHostPort(cfg.Kubelet.Address, strconv.Itoa(int(cfg.Kubelet.Port))))
	}
	sig := <-app.Wait()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), app.StopTimeout())
	defer cancelStop()
	if err := app.Stop(stopCtx); err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		return 1
	}
	return sig.ExitCode
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// hasFlag reports whether args set the flag name (--name or --name=...).
func hasFlag(args []string, name string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		a = strings.TrimLeft(a, "-")
		return a == name || strings.HasPrefix(a, name+"=")
	})
}

// printPods prints a table of the active pods whenever it changes, until
// ctx is done.
func printPods(ctx context.Context, out io.Writer, store *pods.Store, statuses podstatus.Interface) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	last := ""
	for {
		if table := podTable(store, statuses); table != last {
			fmt.Fprintf(out, "\n[%5.1fs]\n%s", time.Since(start).Seconds(), table)
			last = table
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// podTable renders the active pods as kubectl get pods does.
func podTable(store *pods.Store, statuses podstatus.Interface) string {
	active := store.Active()
	slices.SortFunc(active, func(a, b *v1.Pod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tNAME\tSTATUS\tREADY\tRESTARTS")
	if len(active) == 0 {
		fmt.Fprintln(w, "(no pods)\t\t\t\t")
	}
	for _, p := range active {
		phase, ready, restarts := "Pending", 0, int32(0)
		st, ok := statuses.GetPodStatus(p.UID)
		if ok {
			phase = string(st.Phase)
			for _, c := range st.ContainerStatuses {
				if c.Ready {
					ready++
				}
				restarts += c.RestartCount
				if waiting := c.State.Waiting; waiting != nil && waiting.Reason != "" && waiting.Reason != "ContainerCreating" {
					phase = waiting.Reason
				}
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d/%d\t%d\n", p.Namespace, p.Name, phase, ready, len(p.Spec.Containers), restarts)
	}
	w.Flush()
	return b.String()
}
