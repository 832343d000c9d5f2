// Command nodebench measures nodekit node agents against a real control
// plane (package cluster) and prints a table of the figures side by side with
// the project's targets, the upstream kubelet measured in the same run, and
// the anchors of the project brief:
//
//   - pod startup: pods created at once (100 on the fake runtime, 30 on
//     containerd), create → Running and bound → Running as a watching client
//     sees them (p50/p90/p99), the same less the runtime's own time, and the
//     agent's CPU time over the burst;
//   - CSI volumes on containerd: -csi-pods pods at once, each mounting its
//     own static PV of the e2e CSI driver (package csidriver, run in this
//     process and registered through the agent's plugins_registry): pod
//     bound → the driver's NodePublishVolume returned → Running, p50/p99
//     (nodekit only);
//   - node startup: process start → Ready=True seen by a watch, with the
//     Node registered by the agent and pre-registered by an admin;
//   - memory and idle CPU: VmRSS idle and with the pods running, the
//     agent's CPU time over an idle window (its CPU-time clock, to the
//     nanosecond: utime+stime cut to 10 ms steps could not tell 31 ms a
//     minute from 39 ms);
//   - idle API traffic per node, from kube-apiserver's audit log (Lease
//     updates, node status writes, pod status patches, everything);
//   - scale: N complete agents in this one process on the fake runtime (-nodes),
//     each with its own client certificate: time to all Ready, the process's
//     RSS, RSS / live heap / goroutines and their stacks per node, with
//     -heap-by-component the heap per node by component (fx graph,
//     clientsets, connections, informers, event recorder, metrics, nodekit's
//     packages, ...; from the in-process heap profile), then every node held Ready for -hold (any node seen not Ready
//     is reported) with the process's idle CPU per node over that window
//     against kwok's, then -fleet-pods pods per node bound at once and the time
//     until all run. GOMEMLIMIT/GOGC in nodebench's environment apply to the
//     fleet (the table notes a memory limit).
//
// Usage (needs root for containerd and the kubelet; the control plane is
// built and cached on first use, as for the e2e tests):
//
//	go -C e2e run ./cmd/nodebench                 # a few minutes: fakecri, containerd, kubelet, 100 in-process nodes
//	go -C e2e run ./cmd/nodebench -nodes=1000     # the scale target (holds 5 min, then 10 pods per node)
//	go -C e2e run ./cmd/nodebench -quick          # fakecri only, small: about a minute
//	go -C e2e run ./cmd/nodebench -fleet-only -nodes=1000 -fleet-pods=0   # the scale figures alone
//	go -C e2e run ./cmd/nodebench -containerd-series=1.6   # the containerd figures on Debian's 1.6 instead of 2
//	go -C e2e run ./cmd/nodebench -json new.json -compare old.json   # the change of every figure
//	go -C e2e run ./cmd/nodebench -compare old.json -from new.json   # the same, without running
//	go -C e2e run ./cmd/nodebench -profile /tmp/prof # CPU profiles of the agents over their bursts
//	go -C e2e run ./cmd/nodebench -fs=host        # the nodes' state on the run directory's file system
//
// For each nodekit burst it also prints where the agent's time went, from
// the agent's metrics over the burst: its internal latency of each pod's
// start (nodekit_pod_start_internal_duration_seconds: seen → the agent
// sent the status PATCH showing the containers started, the figure judged
// against the target; the PATCH's round trip, the API server's time, apart
// from nodekit_pod_start_status_patch_duration_seconds), its share as its
// watch sees it
// (nodekit_pod_start_agent_duration_seconds: seen → its watch shows the
// containers started), the pod worker syncs, the status writes and how
// long a change waited for its write, and the CRI calls by operation with
// their summed time.
//
// The nodes' state (every agent's and the kubelet's root and pod logs
// directories, containerd's root and state, the -nodes agents') is on a
// file system of nodebench's own by default (-fs=ext4): a sparse image
// file formatted by mkfs.ext4 with its defaults, its journal included, as
// under a production node's /var/lib, loop-mounted under the run's
// directory and unmounted (its loop device freed) when nodebench exits,
// on an error or a signal too. What a new file costs differs between file
// systems (ext4 without a journal, as this project's VM's root, scans the
// inodes deleted in the last minute for each one), and the figures with
// it. The control plane stays in the run's directory. -fs=host keeps the
// nodes' state there too; without root, a loop device or mkfs.ext4,
// -fs=ext4 fails and says so. The table says which file system held what.
//
// The table goes to stdout, progress to stderr. Every process's log stays in
// -dir when given, else in a temporary directory removed at the end (kept
// when the run fails). A figure that misses its target prints FAIL but does
// not fail the command: it reports, it does not test.
//
// The kubelet anchor runs k8s.io/kubernetes/cmd/kubelet (built from the
// version e2e/tools pins, cached) on the same containerd after the nodekit
// agent stopped. While it runs it sets the kernel tunables it requires
// (vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
// kernel.panic_on_oops, kernel.keys.root_max*); nodebench restores their
// previous values when it stops. -kubelet=false skips it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	goruntime "runtime"
	"strings"
	"syscall"

	"github.com/nodekit/nodekit/e2e/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodebench:", err)
		os.Exit(1)
	}
}

// run parses args, runs the benchmark and writes the table to out and
// progress to progress.
func run(ctx context.Context, args []string, out, progress io.Writer) error {
	opts, err := parseFlags(args, progress)
	if err != nil {
		return err
	}
	if opts.heapComponents {
		goruntime.MemProfileRate = memProfileRate
	}
	if opts.compareFrom != "" {
		return compareTables(out, opts.compare, opts.compareFrom)
	}
	b, err := newBench(opts, progress)
	if err != nil {
		return err
	}
	b.table.Command = strings.Join(append([]string{"nodebench"}, args...), " ")
	runErr := b.run(ctx)
	b.report()
	if err := b.table.Write(out); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if opts.jsonOut != "" {
		runErr = errors.Join(runErr, b.table.WriteJSON(opts.jsonOut))
	}
	if opts.compare != "" {
		old, err := bench.ReadTable(opts.compare)
		if err == nil {
			fmt.Fprintln(out)
			err = bench.Compare(out, old, &b.table)
		}
		runErr = errors.Join(runErr, err)
	}
	return errors.Join(runErr, b.close(runErr != nil))
}

// compareTables prints the change from the table in oldPath to the one in
// curPath.
func compareTables(out io.Writer, oldPath, curPath string) error {
	old, err := bench.ReadTable(oldPath)
	if err != nil {
		return err
	}
	cur, err := bench.ReadTable(curPath)
	if err != nil {
		return err
	}
	return bench.Compare(out, old, cur)
}
