// Command conformance runs upstream Kubernetes' own end-to-end tests
// (e2e.test from the pinned k8s.io/kubernetes) against a node run by
// nodekit's agent and against one run by the upstream kubelet, one after
// the other, on a local control plane and containerd, and writes a markdown
// table: each test, the kubelet's result, nodekit's, and for a failure the
// first line of its reason. It needs root and the harness's packages
// (hack/install-deps.sh). The test images are served by a registry of its
// own on loopback; the first build downloads Debian's busybox source
// package with apt-get (the busybox images' sh is upstream's ash), nothing
// else is fetched.
//
//	go -C e2e run ./cmd/conformance                                  # [sig-node] [Conformance], both agents
//	go -C e2e run ./cmd/conformance -focus='\[NodeConformance\]' -procs=2 -out=table.md
//	go -C e2e run ./cmd/conformance -agents=nodekit -focus='Pods should get a host IP'
//	go -C e2e run ./cmd/conformance -build -agents=nodekit           # only build/cache e2e.test, ginkgo, agnhost, ash
//
// Binaries are cached in $NODEKIT_CACHE (default ~/.cache/nodekit). Hold
// /tmp/nodekit-e2e.lock (flock) when other e2e runs share the machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/e2e/conformance"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

func run(args []string) (err error) {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	focus := fs.String("focus", conformance.SigNodeConformance, "ginkgo --focus: the tests to run")
	skip := fs.String("skip", "", "ginkgo --skip: tests of the focus not to run")
	agents := fs.String("agents", "nodekit,kubelet", "comma-separated node agents to run against, in order: nodekit, kubelet")
	procs := fs.Int("procs", 1, "parallel ginkgo processes ([Serial] tests run alone either way)")
	timeout := fs.Duration("timeout", 2*time.Hour, "bound of each agent's tests (ginkgo --timeout: the specs left are not run; ginkgo still running 3 min past it is killed)")
	dir := fs.String("dir", "", "keep state, logs and reports in this directory (default: a temporary one, kept when a test fails)")
	out := fs.String("out", "", "write the markdown table to this file instead of stdout")
	fromJUnit := fs.String("junit", "", "write the table from existing JUnit reports instead of running: agent=path,... (e.g. nodekit=DIR/nodekit/report/junit_01.xml,kubelet=...); several reports of one agent (a focus run in chunks) are merged, a test in a later one taking its result")
	buildOnly := fs.Bool("build", false, "only build (or find in the cache) e2e.test, ginkgo, agnhost, nnp and upstream's ash, and the kubelet when -agents has it, and print their paths")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *buildOnly {
		start := time.Now()
		bins, err := cluster.BuildConformance(ctx, cluster.BuildOptions{Log: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Printf("%s\n%s\n%s\n%s\n%s\n", bins.E2ETest, bins.Ginkgo, bins.Agnhost, bins.Nonewprivs, bins.Ash)
		if strings.Contains(*agents, string(conformance.Kubelet)) {
			kubelet, err := cluster.BuildKubelet(ctx, cluster.BuildOptions{Log: os.Stderr})
			if err != nil {
				return err
			}
			fmt.Println(kubelet)
		}
		fmt.Fprintf(os.Stderr, "ready in %s\n", time.Since(start).Round(time.Second))
		return nil
	}
	if *fromJUnit != "" {
		report := &conformance.Report{Focus: *focus, Skip: *skip}
		for _, spec := range strings.Split(*fromJUnit, ",") {
			agent, path, ok := strings.Cut(spec, "=")
			if !ok {
				return fmt.Errorf("-junit: %q is not agent=path", spec)
			}
			res, err := conformance.ReadResult(conformance.Agent(agent), path)
			if err != nil {
				return err
			}
			if earlier := report.Result(res.Agent); earlier != nil {
				earlier.Merge(res)
				continue
			}
			report.Results = append(report.Results, res)
		}
		return writeTable(report, *out)
	}
	opts := conformance.Options{Focus: *focus, Skip: *skip, Procs: *procs, Timeout: *timeout, Dir: *dir, Log: os.Stderr}
	for _, a := range strings.Split(*agents, ",") {
		opts.Agents = append(opts.Agents, conformance.Agent(strings.TrimSpace(a)))
	}
	if opts.Dir == "" {
		if opts.Dir, err = os.MkdirTemp("", "nodekit-conformance-"); err != nil {
			return err
		}
	}
	report, err := conformance.Run(ctx, opts)
	keep := *dir != "" || err != nil
	if report != nil {
		for _, r := range report.Results {
			keep = keep || r.Count(conformance.Failed) > 0
		}
		err = errors.Join(err, writeTable(report, *out))
	}
	if keep {
		fmt.Fprintf(os.Stderr, "conformance: state, logs and JUnit reports kept in %s\n", opts.Dir)
	} else {
		err = errors.Join(err, os.RemoveAll(opts.Dir))
	}
	return err
}

// writeTable writes the report's markdown to path, or to stdout if empty.
func writeTable(report *conformance.Report, path string) (err error) {
	var w io.Writer = os.Stdout
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		w = f
	}
	return report.WriteMarkdown(w)
}
