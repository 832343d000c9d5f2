package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/e2e/bench"
	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// Limits that bound a hang; they do not judge speed.
const (
	readyTimeout  = 2 * time.Minute
	burstTimeout  = 5 * time.Minute
	deleteTimeout = 3 * time.Minute
	fleetTimeout  = 15 * time.Minute
)

// burstTail is how long after a burst's last pod ran its agent's requests
// still count towards the burst.
const burstTail = 2 * time.Second

// The file systems of -fs.
const (
	fsExt4 = "ext4"
	fsHost = "host"
)

// nodeFSName is the -fs=ext4 file system's mount point under the run's
// directory (short: the nodes' unix sockets live under it), and with
// ".img" its image file's.
const nodeFSName = "nodefs"

// rssSettle is how long after a burst's RSS the settled RSS is read, the
// pods still running.
const rssSettle = 30 * time.Second

// node is one measured node agent process (nodekit's or the kubelet) and
// what was measured of it.
type node struct {
	agent   *cluster.Agent
	nodekit bool // the agent serves nodekit's metrics

	// stopRuntime stops its fake runtime; nil on containerd.
	stopRuntime func()
	criEndpoint string
	// runtimeLog is containerd's log; empty on the fake runtime.
	runtimeLog string
	// cgroup is the agent's cgroup root on containerd (its pods' cgroups
	// are below it); empty on the fake runtime.
	cgroup string

	startToReady time.Duration
	idle         *idleFigures
	burst        *bench.BurstResult
	burstRSS     uint64
	// burstRSSAnon and burstRSSFile split burstRSS as idleFigures'.
	burstRSSAnon, burstRSSFile uint64
	// settledRSS is the RSS with the pods still running rssSettle after
	// burstRSS was read (the agent releases what the burst alone used
	// once it is quiet).
	settledRSS uint64
	// burstRequests are the agent's API requests from the burst's start to
	// burstTail after its last pod ran.
	burstRequests bench.Requests
	// statusPatches are, for a nodekit agent, the API server's own times
	// (its audit log: received → answered) for the agent's pod status
	// PATCHes over the same window, and besidePatches the agent's other
	// requests it received while one of them was under way.
	statusPatches []time.Duration
	besidePatches bench.Requests
	// breakdown is where a nodekit agent's time went over the burst.
	breakdown *breakdown
	// shimCgroups counts the runtime's shims by the cgroup their CPU is
	// charged to, read while the burst's pods ran (containerd only).
	shimCgroups map[string]int
	// runtimeSched is how long nodebench's goroutines (the fake
	// runtime's among them) waited for a core over the burst, on the
	// fakecri node (schedWaitsBetween).
	runtimeSched string
	// runDelays says how long the threads of the agent, nodebench (on the
	// fakecri node: its fake runtime's), kube-apiserver and etcd ran and
	// waited in the kernel's run queues from the burst's start until all
	// its pods ran.
	runDelays string
}

// idleFigures are what an idle window measured of one node.
type idleFigures struct {
	window time.Duration
	rss    uint64
	// rssAnon and rssFile split rss: anonymous (heap, stacks, runtime)
	// and file-backed (the executable's pages, shared libraries).
	rssAnon, rssFile uint64
	cpu              time.Duration
	requests         bench.Requests
	// From nodekit's metrics (zero for the kubelet).
	leaseRenewals, nodeStatusPatches, podStatusPatches float64
}

// fleetFigures are the scale figures.
type fleetFigures struct {
	nodes                int
	credentials, started time.Duration
	allReady             time.Duration
	rssBefore, rssAfter  uint64
	// rssBeforeFile and rssAfterFile are the file-backed parts of
	// rssBefore and rssAfter (the executable's pages mapped).
	rssBeforeFile, rssAfterFile uint64
	// peakRSS is the process's peak RSS (VmHWM) as of all Ready, then
	// as of the end of the hold: what a shard's memory limit must allow.
	peakRSS uint64
	// startPeakRSS is VmHWM as of all Ready (+ -settle), before the hold.
	startPeakRSS uint64
	// After a forced collection: the live heap and RSS.
	heapLive, rssAfterGC uint64
	// The Go runtime's figures before the fleet started and once all were
	// Ready (after the forced collection).
	memBefore, memAfter runtimeMemory
	// The in-use heap by component before and after (perAgent divides).
	heapBefore, heapAfter heapByComponent
	// memLimit is this process's Go memory limit (GOMEMLIMIT or
	// -fleet-memory-max's), MaxInt64 when none; fromBudget says the fleet
	// set it from -fleet-memory-max (not when a lower GOMEMLIMIT was kept).
	memLimit   int64
	fromBudget bool
	// The garbage collector's CPU time (the runtime's estimate) from the
	// first start to all Ready, and over -hold.
	startGCCPU, holdGCCPU time.Duration

	// Over -hold: what the watch saw, this process's CPU time, its RSS at
	// the end.
	hold    *bench.HoldResult
	holdCPU time.Duration
	holdRSS uint64
	// -fleet-pods per node: the figures and RSS with them running.
	pods    *bench.FleetPodsResult
	podsRSS uint64
	podsErr string
}

// benchmark is one run of the command.
type benchmark struct {
	opts     options
	progress io.Writer
	dir      string
	keepDir  bool
	// nodeDir holds the nodes' state: containerd's, every node's
	// (nodes/<name>), the -nodes agents' (fleet); the -fs=ext4 file
	// system, or dir.
	nodeDir  string
	klogFile *os.File

	src      cluster.Source
	cp       *cluster.ControlPlane
	client   kubernetes.Interface
	agentBin string
	// podStarts are the -pod-starts bursts.
	podStarts []podStartsRun
	ctrd      *cluster.Containerd
	cleanups  []func() error // run in reverse order by close
	// cgroups are removed by close after the cleanups, once containerd
	// and every agent are gone.
	cgroups []func() error

	// Results; nil or zero when not measured.
	containerdSkipped string // why containerd figures are missing
	kubeletSkipped    string
	startFake         []time.Duration // Node not pre-registered
	startFakePre      []time.Duration // Node pre-registered
	fake              *node
	ctrdNode          *node
	// ctrdVariants are containerd agents idle beside ctrdNode with one
	// component off, so that the difference is what that component costs
	// an idle node (see variantArgs).
	ctrdVariants   []*node
	kubelet        *node
	csi            *csiFigures
	csiSkipped     string // why the CSI figures are missing with containerd
	fleet          *fleetFigures
	runtimeVersion string

	table bench.Table
}

func newBench(opts options, progress io.Writer) (*benchmark, error) {
	b := &benchmark{opts: opts, progress: progress, dir: opts.dir, keepDir: opts.dir != ""}
	if b.dir == "" {
		var err error
		// A short name: a node's unix sockets live under it (the CSI
		// driver's registration socket is the longest, see csiBurst).
		if b.dir, err = os.MkdirTemp("", "nb-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, err
	}
	// The in-process fleet logs through klog: into a file, not the
	// terminal.
	var err error
	if b.klogFile, err = os.Create(filepath.Join(b.dir, "nodebench-klog.log")); err != nil {
		return nil, err
	}
	fs := flagSetForKlog()
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(name, value); err != nil {
			return nil, err
		}
	}
	klog.SetOutput(b.klogFile)
	return b, nil
}

func (b *benchmark) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "nodebench: "+format+"\n", args...)
}

// close runs the cleanups, newest first, and removes the state directory
// unless -dir was given or the run failed.
func (b *benchmark) close(failed bool) error {
	var errs []error
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		if err := b.cleanups[i](); err != nil {
			errs = append(errs, err)
		}
	}
	for _, remove := range b.cgroups {
		if err := remove(); err != nil {
			errs = append(errs, err)
		}
	}
	klog.Flush()
	b.klogFile.Close()
	if failed || len(errs) > 0 || b.keepDir {
		b.logf("state and logs kept in %s", b.dir)
		if b.nodeDir != b.dir {
			b.logf("the nodes' state is in the image %s (mount -o loop %[1]s <dir> to read it)", filepath.Join(b.dir, nodeFSName+".img"))
		}
	} else if err := os.RemoveAll(b.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// onClose registers a cleanup for close.
func (b *benchmark) onClose(f func() error) { b.cleanups = append(b.cleanups, f) }

func (b *benchmark) run(ctx context.Context) error {
	if err := b.mountNodeFS(ctx); err != nil {
		return err
	}
	if err := b.setup(ctx); err != nil {
		return err
	}
	if b.opts.fleetOnly {
		return b.scale(ctx)
	}
	if err := b.startupFakecri(ctx); err != nil {
		return err
	}
	if err := b.nodekitNodes(ctx); err != nil {
		return err
	}
	if err := b.podStartsSweep(ctx); err != nil {
		return err
	}
	if err := b.kubeletAnchor(ctx); err != nil {
		// The anchor is a comparison, not nodekit's figure: report why it
		// is missing and go on.
		b.kubeletSkipped = err.Error()
		b.logf("kubelet anchor failed: %v", err)
	}
	return b.scale(ctx)
}

// mountNodeFS makes the file system -fs asks for under the nodes' state
// and records which it is in the table. The control plane (etcd, the API
// server's audit log) stays in the run's directory: it is not the node's,
// and etcd's fsync on a loop device costs three to four times its fsync on
// the disk under it.
func (b *benchmark) mountNodeFS(ctx context.Context) error {
	b.nodeDir = b.dir
	if b.opts.fs == fsExt4 {
		lfs, err := cluster.NewLoopFS(ctx, filepath.Join(b.dir, nodeFSName+".img"), filepath.Join(b.dir, nodeFSName))
		if err != nil {
			return fmt.Errorf("-fs=%s: %w; -fs=%s measures on the file system of the run's directory instead", fsExt4, err, fsHost)
		}
		b.onClose(lfs.Close)
		b.nodeDir = lfs.Dir
	}
	nodes, err := cluster.DescribeFS(b.nodeDir)
	if err != nil {
		return err
	}
	host, err := cluster.DescribeFS(b.dir)
	if err != nil {
		return err
	}
	if b.opts.fs == fsExt4 {
		b.table.FileSystem = fmt.Sprintf("-fs=%s: the nodes' state on %s, mkfs.ext4's defaults on a %d GiB sparse image; the control plane's on %s",
			fsExt4, nodes, cluster.LoopFSSize>>30, host)
	} else {
		b.table.FileSystem = fmt.Sprintf("-fs=%s: the nodes' state and the control plane's on %s", fsHost, host)
	}
	b.logf("file system: %s", b.table.FileSystem)
	return nil
}

// setup builds what is needed and starts the control plane and, when
// asked for, containerd.
func (b *benchmark) setup(ctx context.Context) error {
	var err error
	if b.src, err = cluster.LocateSource(); err != nil {
		return err
	}
	b.table.Commit = sourceCommit(ctx, b.src.Root)
	b.logf("state in %s", b.dir)
	bins, err := cluster.BuildControlPlane(ctx, cluster.BuildOptions{Source: b.src, Log: b.progress})
	if err != nil {
		return err
	}
	binDir := filepath.Join(b.dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	if b.agentBin, err = cluster.BuildAgent(ctx, b.src, binDir, nil); err != nil {
		return err
	}

	useContainerd := b.opts.containerd == "on"
	if b.opts.containerd == "auto" {
		if err := cluster.CheckContainerdSeries(cluster.ContainerdSeries(b.opts.series)); err != nil {
			b.containerdSkipped = err.Error()
		} else {
			useContainerd = true
		}
	}
	if b.opts.containerd == "off" {
		b.containerdSkipped = "-containerd=off"
	}
	var kubeletBin string
	switch {
	case !b.opts.kubelet:
		b.kubeletSkipped = "-kubelet=false"
	case !useContainerd:
		b.kubeletSkipped = "it runs on containerd, which this run does not use"
	default:
		if kubeletBin, err = cluster.BuildKubelet(ctx, cluster.BuildOptions{Source: b.src, Log: b.progress}); err != nil {
			b.kubeletSkipped = "build: " + err.Error()
		}
	}

	b.cp, err = cluster.StartControlPlane(ctx, cluster.ControlPlaneOptions{
		Binaries: bins, Dir: filepath.Join(b.dir, "controlplane"), NodesDir: filepath.Join(b.nodeDir, "nodes"), Log: b.progress,
	})
	if err != nil {
		return err
	}
	b.onClose(b.cp.Stop)
	// A client whose rate limit never delays a burst.
	cfg := b.cp.AdminConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	if b.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if useContainerd {
		// containerd runs in a cgroup of its own, and its shims, runc and
		// CNI plugins with it: the runtime's part of a burst's CPU.
		removeCgroup, err := cluster.CreateCgroup(b.cgroupName(runtimeCgroup))
		if err != nil {
			return err
		}
		b.cgroups = append(b.cgroups, removeCgroup)
		b.ctrd, err = cluster.StartContainerd(ctx, cluster.ContainerdOptions{
			Source: b.src, Series: cluster.ContainerdSeries(b.opts.series), Dir: filepath.Join(b.nodeDir, "containerd"), Log: b.progress,
			Cgroup: b.cgroupName(runtimeCgroup), Metrics: true,
		})
		if err != nil {
			return err
		}
		b.onClose(func() error { return b.ctrd.Close(context.Background()) })
		name, version, err := b.ctrd.Version(ctx)
		if err != nil {
			return err
		}
		b.runtimeVersion = name + " " + version
	}
	if kubeletBin != "" {
		b.kubelet = &node{criEndpoint: b.ctrd.Endpoint, runtimeLog: b.ctrd.LogPath, cgroup: b.cgroupName("kubelet")}
		b.kubelet.agent, err = b.cp.NewKubelet(cluster.KubeletOptions{
			Binary: kubeletBin, NodeName: "nb-kubelet", RuntimeEndpoint: b.ctrd.Endpoint,
			CgroupRoot: "/" + b.cgroupName("kubelet"),
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// runtimeCgroup names containerd's cgroup (cgroupName) beside the agents'.
const runtimeCgroup = "containerd"

// cgroupName is the cgroup root of one agent of this run, or (with
// runtimeCgroup) containerd's cgroup.
func (b *benchmark) cgroupName(who string) string {
	return fmt.Sprintf("nodebench-%d-%s", os.Getpid(), who)
}

// fakeImages are the images every fake runtime holds: the ones the pods use.
func fakeImages() ([]*runtimeapi.Image, error) {
	img, err := fakecri.NewImage(cluster.BusyboxImage, 2<<20)
	if err != nil {
		return nil, err
	}
	return []*runtimeapi.Image{img}, nil
}

// newFakeNode prepares (does not start) a nodekit agent on its own fake
// runtime.
func (b *benchmark) newFakeNode(name string) (*node, error) {
	images, err := fakeImages()
	if err != nil {
		return nil, err
	}
	cri := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, Images: images})
	sockDir, err := os.MkdirTemp("", "nb")
	if err != nil {
		return nil, err
	}
	endpoint, stop, err := cri.Start(filepath.Join(sockDir, "cri.sock"))
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, err
	}
	n := &node{nodekit: true, criEndpoint: endpoint, stopRuntime: func() { stop(); os.RemoveAll(sockDir) }}
	n.agent, err = b.newNodekitAgent(name, endpoint, "--cgroups-per-qos=false")
	if err != nil {
		n.stopRuntime()
		return nil, err
	}
	return n, nil
}

// newNodekitAgent prepares a nodekit agent process (the harness keeps its
// pod logs in its own directory). Each agent runs its own copy of the
// binary, as an agent on a machine of its own would: agents running one
// file share its page cache, and each fault maps the pages around it that
// the others read in (fault-around), so every agent's file-backed RSS
// would count what the others touched too.
func (b *benchmark) newNodekitAgent(name, endpoint string, extraArgs ...string) (*cluster.Agent, error) {
	bin := filepath.Join(b.dir, "bin", name, filepath.Base(b.agentBin))
	if err := copyExecutable(b.agentBin, bin); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return b.cp.NewAgent(cluster.AgentOptions{
		Binary: bin, NodeName: name, RuntimeEndpoint: endpoint, CgroupDriver: "cgroupfs", ExtraArgs: append(extraArgs, b.opts.agentArgs...),
	})
}

// copyExecutable copies the executable from to the path to (its directory
// made if missing) and writes it out to the disk, so that the copy's page
// cache holds nothing dirty when it runs (a dirty page cannot be dropped
// from the page cache, see internal/memtrim). An existing to is replaced.
func copyExecutable(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	// A new file, not the old one truncated: it gets the executable mode.
	if err := os.Remove(to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	return dst.Close()
}

// stopNode stops the agent and its fake runtime and deletes its Node.
func (b *benchmark) stopNode(ctx context.Context, n *node) error {
	err := n.agent.Stop()
	if n.stopRuntime != nil {
		n.stopRuntime()
	}
	if derr := b.client.CoreV1().Nodes().Delete(ctx, n.agent.Name, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
		err = errors.Join(err, derr)
	}
	return err
}

// timeStart starts n's agent and measures start → Ready.
func (b *benchmark) timeStart(ctx context.Context, n *node) (time.Duration, error) {
	return bench.TimeToReady(ctx, b.client, n.agent.Name, readyTimeout, n.agent.Start)
}

// startupFakecri measures start → Ready on the fake runtime, -start-runs
// times with the Node registered by the agent and as many with the Node
// created by an admin beforehand.
func (b *benchmark) startupFakecri(ctx context.Context) error {
	for _, preRegistered := range []bool{false, true} {
		for i := 1; i <= b.opts.startRuns; i++ {
			name := fmt.Sprintf("nb-start-%d", i)
			if preRegistered {
				name = fmt.Sprintf("nb-start-pre-%d", i)
				_, err := b.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("pre-register node %s: %w", name, err)
				}
			}
			n, err := b.newFakeNode(name)
			if err != nil {
				return err
			}
			d, err := b.timeStart(ctx, n)
			err = errors.Join(err, b.stopNode(context.WithoutCancel(ctx), n))
			if err != nil {
				return err
			}
			b.logf("start → Ready on fakecri (pre-registered %t): %s", preRegistered, bench.FormatDuration(d))
			if preRegistered {
				b.startFakePre = append(b.startFakePre, d)
			} else {
				b.startFake = append(b.startFake, d)
			}
		}
	}
	return nil
}

// nodekitNodes runs a nodekit agent on the fake runtime and, with
// containerd, one on containerd and the variantArgs agents beside it: idle
// figures over one window for all, then, the variants stopped, a pod burst
// on each of the first two.
func (b *benchmark) nodekitNodes(ctx context.Context) (err error) {
	if b.fake, err = b.newFakeNode("nb-fakecri"); err != nil {
		return err
	}
	nodes := []*node{b.fake}
	defer func() {
		for _, n := range nodes {
			err = errors.Join(err, b.stopNode(context.WithoutCancel(ctx), n))
		}
	}()
	if b.fake.startToReady, err = b.timeStart(ctx, b.fake); err != nil {
		return err
	}
	if b.ctrd != nil {
		if b.ctrdNode, err = b.newContainerdNode("nodekit", "nb-containerd"); err != nil {
			return err
		}
		nodes = append(nodes, b.ctrdNode)
		if b.ctrdNode.startToReady, err = b.timeStart(ctx, b.ctrdNode); err != nil {
			return err
		}
		b.logf("start → Ready on containerd: %s", bench.FormatDuration(b.ctrdNode.startToReady))
		for _, v := range variantArgs {
			n, err := b.newContainerdNode(v.name, "nb-"+v.name, v.args...)
			if err != nil {
				return err
			}
			nodes = append(nodes, n)
			if _, err := b.timeStart(ctx, n); err != nil {
				return err
			}
			b.ctrdVariants = append(b.ctrdVariants, n)
		}
	}
	if err := b.idleWindow(ctx, nodes); err != nil {
		return err
	}
	// The variants have been measured: stop them before the bursts.
	for _, n := range b.ctrdVariants {
		nodes = slices.DeleteFunc(nodes, func(m *node) bool { return m == n })
		if err := b.stopNode(ctx, n); err != nil {
			return err
		}
	}
	if err := b.burst(ctx, b.fake, "nodebench-fakecri", b.opts.fakePods); err != nil {
		return err
	}
	if b.ctrdNode != nil {
		if err := b.burst(ctx, b.ctrdNode, "nodebench-nodekit", b.opts.containerdPods); err != nil {
			return err
		}
		if b.opts.csiPods == 0 {
			b.csiSkipped = "-csi-pods=0"
		} else if err := b.csiBurst(ctx, b.ctrdNode); err != nil {
			return err
		}
	}
	return nil
}

// variantArgs are the containerd agents idle beside nb-containerd, each
// with one component off: the difference of its idle CPU from
// nb-containerd's is what the component costs an idle node.
var variantArgs = []struct {
	name, what string
	args       []string
}{
	// The eviction manager never reads the stats (no summary every 10 s:
	// ListPodSandbox, ListContainers, ListContainerStats, ImageFsInfo,
	// cgroup and statfs reads).
	{"noeviction", "eviction off (evictionHard {}, localStorageCapacityIsolation false)", []string{"--eviction-hard=", "--local-storage-capacity-isolation=false"}},
	// No node API on 10250 (its certificate, its listeners).
	{"nonodeapi", "node API off (enableServer false)", []string{"--enable-server=false"}},
}

// newContainerdNode makes (does not start) a nodekit agent named name on
// the benchmark's containerd, in a cgroup root of its own named after who.
func (b *benchmark) newContainerdNode(who, name string, extraArgs ...string) (*node, error) {
	cgroup := b.cgroupName(who)
	removeCgroup, err := cluster.CreateCgroup(cgroup)
	if err != nil {
		return nil, err
	}
	b.cgroups = append(b.cgroups, removeCgroup)
	a, err := b.newNodekitAgent(name, b.ctrd.Endpoint, append([]string{"--cgroup-root=/" + cgroup}, extraArgs...)...)
	if err != nil {
		return nil, err
	}
	return &node{agent: a, nodekit: true, criEndpoint: b.ctrd.Endpoint, runtimeLog: b.ctrd.LogPath, cgroup: cgroup}, nil
}

// idleWindow lets the nodes settle, then measures them over one idle
// window.
func (b *benchmark) idleWindow(ctx context.Context, nodes []*node) error {
	b.logf("idle window: %s to settle, then %s", b.opts.settle, b.opts.idle)
	if err := sleep(ctx, b.opts.settle); err != nil {
		return err
	}
	type sample struct {
		stats   bench.ProcStats
		metrics cluster.Metrics
	}
	// The window's CPU is the agent's alone: its metrics are scraped
	// before the CPU is read at the start and after it at the end, so
	// that serving nodebench's two scrapes (an HTTP request, the metrics'
	// encoding and, the first time since memtrim's release, the page
	// faults of that code) is not counted, as no scrape is for the
	// kubelet beside it.
	take := func(n *node, metricsFirst bool) (sample, error) {
		var s sample
		scrape := func() (err error) {
			if n.nodekit {
				s.metrics, err = n.agent.Metrics(ctx)
			}
			return err
		}
		if metricsFirst {
			if err := scrape(); err != nil {
				return s, err
			}
		}
		stats, err := bench.ReadProcStats(n.agent.PID())
		if err != nil {
			return s, fmt.Errorf("node %s: %w", n.agent.Name, err)
		}
		s.stats = stats
		if !metricsFirst {
			if err := scrape(); err != nil {
				return s, err
			}
		}
		return s, nil
	}
	before := make([]sample, len(nodes))
	from := time.Now()
	for i, n := range nodes {
		var err error
		if before[i], err = take(n, true); err != nil {
			return err
		}
	}
	// With -profile, a CPU profile of each nodekit agent over the window
	// says what wakes it (the profiler adds a request of its own).
	type pending struct {
		n    *node
		done <-chan error
	}
	var idleProfiles []pending
	if b.opts.profileDir != "" {
		for _, n := range nodes {
			if n.nodekit {
				idleProfiles = append(idleProfiles, pending{n, b.profileAgent(ctx, n, fmt.Sprintf("profile?seconds=%d", int(b.opts.idle.Seconds())),
					filepath.Join(b.opts.profileDir, n.agent.Name+".idle.cpu.pprof"))})
			}
		}
	}
	// With -idle-trace, an execution trace of each nodekit agent over the
	// window says what wakes it, goroutine by goroutine.
	if b.opts.idleTrace != "" {
		for _, n := range nodes {
			if n.nodekit {
				idleProfiles = append(idleProfiles, pending{n, b.profileAgent(ctx, n, fmt.Sprintf("trace?seconds=%d", int(b.opts.idle.Seconds())),
					filepath.Join(b.opts.idleTrace, n.agent.Name+".idle.trace"))})
			}
		}
	}
	if err := sleep(ctx, b.opts.idle); err != nil {
		return err
	}
	to := time.Now()
	afters := make([]sample, len(nodes))
	for i, n := range nodes {
		var err error
		if afters[i], err = take(n, false); err != nil {
			return err
		}
	}
	for _, p := range idleProfiles {
		if err := <-p.done; err != nil {
			b.logf("idle profile or trace of %s: %v", p.n.agent.Name, err)
		}
	}
	// The audit log is written as requests complete: give the window's
	// last ones a moment.
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	for i, n := range nodes {
		after := afters[i]
		f := &idleFigures{window: to.Sub(from), rss: after.stats.RSS, rssAnon: after.stats.RSSAnon, rssFile: after.stats.RSSFile,
			cpu: after.stats.CPU - before[i].stats.CPU}
		if n.nodekit {
			delta := func(name string, labels map[string]string) float64 {
				return after.metrics.Sum(name, labels) - before[i].metrics.Sum(name, labels)
			}
			f.leaseRenewals = delta("nodekit_node_lease_renewals_total", nil)
			f.nodeStatusPatches = delta("nodekit_node_status_patches_total", nil)
			f.podStatusPatches = delta("nodekit_pod_status_patches_total", map[string]string{"result": "patched"})
		}
		var err error
		if f.requests, _, err = bench.ReadRequests(b.cp.AuditLog, "system:node:"+n.agent.Name, from, to); err != nil {
			return err
		}
		n.idle = f
		if n.nodekit && b.opts.profileDir != "" {
			b.saveSmaps(n, filepath.Join(b.opts.profileDir, n.agent.Name+".idle.smaps"))
			if err := <-b.profileAgent(ctx, n, "heap", filepath.Join(b.opts.profileDir, n.agent.Name+".idle.heap.pprof")); err != nil {
				b.logf("heap profile of %s: %v", n.agent.Name, err)
			}
		}
		b.logf("idle %s: RSS %s (anonymous %s, file-backed %s), CPU %s over %s, requests: %s", n.agent.Name, bench.FormatMiB(f.rss),
			bench.FormatMiB(f.rssAnon), bench.FormatMiB(f.rssFile), f.cpu, f.window.Round(time.Millisecond), f.requests)
	}
	return nil
}

// burst runs pods at once on n in namespace ns, records the figures and
// RSS with the pods running, then deletes them.
func (b *benchmark) burst(ctx context.Context, n *node, ns string, pods int) error {
	if err := bench.WaitForNamespace(ctx, b.client, ns); err != nil {
		return err
	}
	b.logf("burst: %d pods at once on %s", pods, n.agent.Name)
	var metricsBefore cluster.Metrics
	if n.nodekit {
		var err error
		if metricsBefore, err = n.agent.Metrics(ctx); err != nil {
			return err
		}
	}
	var profile <-chan error
	if n.nodekit && b.opts.profileDir != "" {
		profile = b.profileAgent(ctx, n, fmt.Sprintf("profile?seconds=%d", int(b.opts.profileTime.Seconds())),
			filepath.Join(b.opts.profileDir, n.agent.Name+".cpu.pprof"))
	}
	var machine *bench.CPUSources
	if n.cgroup != "" {
		machine = &bench.CPUSources{
			RuntimeCgroup: "/" + b.cgroupName(runtimeCgroup), PodsCgroup: "/" + n.cgroup,
			ControlPlane: b.cp.PIDs(), RuntimeMetrics: b.ctrd.Metrics,
		}
	}
	// The fake runtime serves from this process: its goroutines' waits
	// for a core are this process's.
	schedBefore := readSchedLatencies()
	delays := b.runDelays(n)
	from := time.Now()
	res, err := bench.RunBurst(ctx, bench.BurstOptions{
		Client: b.client, Namespace: ns, NodeName: n.agent.Name, Pods: pods, Image: cluster.BusyboxImage,
		AgentPID: n.agent.PID(), Machine: machine, CRIEndpoint: n.criEndpoint, RuntimeLog: n.runtimeLog, Timeout: burstTimeout,
	})
	if err != nil {
		return errors.Join(err, bench.DeletePods(context.WithoutCancel(ctx), b.client, ns, deleteTimeout))
	}
	n.burst = res
	n.runDelays = delays.since()
	if n == b.fake {
		n.runtimeSched = schedWaitsBetween(schedBefore, readSchedLatencies())
	}
	if machine != nil {
		if n.shimCgroups, err = b.shimCgroups(); err != nil {
			return errors.Join(err, bench.DeletePods(context.WithoutCancel(ctx), b.client, ns, deleteTimeout))
		}
	}
	// Trailing writes (events, the last status patches) belong to the
	// burst too.
	if err := sleep(ctx, burstTail); err != nil {
		return err
	}
	stats, err := bench.ReadProcStats(n.agent.PID())
	if err != nil {
		return err
	}
	n.burstRSS, n.burstRSSAnon, n.burstRSSFile = stats.RSS, stats.RSSAnon, stats.RSSFile
	if n.nodekit && b.opts.profileDir != "" {
		// What the heap holds with the pods running.
		b.saveSmaps(n, filepath.Join(b.opts.profileDir, n.agent.Name+".pods.smaps"))
		if err := <-b.profileAgent(ctx, n, "heap", filepath.Join(b.opts.profileDir, n.agent.Name+".pods.heap.pprof")); err != nil {
			b.logf("heap profile of %s: %v", n.agent.Name, err)
		}
	}
	if n.nodekit {
		after, err := n.agent.Metrics(ctx)
		if err != nil {
			return err
		}
		n.breakdown = newBreakdown(metricsBefore, after, pods)
		b.logf("burst on %s, breakdown: %s", n.agent.Name, n.breakdown)
	}
	if profile != nil {
		if err := <-profile; err != nil {
			b.logf("CPU profile of %s: %v", n.agent.Name, err)
		}
	}
	to := time.Now()
	var answered []bench.Request
	if n.burstRequests, answered, err = bench.ReadRequests(b.cp.AuditLog, "system:node:"+n.agent.Name, from, to); err != nil {
		return err
	}
	if n.nodekit {
		// For the breakdown's note (reportBreakdown).
		n.statusPatches, n.besidePatches = bench.UnderWay(answered, "patch pods/status")
	}
	// The settled RSS is a figure of the containerd bursts only (the
	// table's row), which spares -quick the wait.
	if n == b.ctrdNode || n == b.kubelet {
		if err := sleep(ctx, rssSettle); err != nil {
			return err
		}
		settled, err := bench.ReadProcStats(n.agent.PID())
		if err != nil {
			return err
		}
		n.settledRSS = settled.RSS
		b.logf("burst on %s: RSS %s later %s (anonymous %s, file-backed %s)", n.agent.Name, rssSettle, bench.FormatMiB(settled.RSS),
			bench.FormatMiB(settled.RSSAnon), bench.FormatMiB(settled.RSSFile))
	}
	b.logf("burst on %s: create → Running %s, bound → Running %s, agent CPU %s, RSS %s (anonymous %s, file-backed %s)", n.agent.Name,
		bench.Summarize(res.CreateToRunning), bench.Summarize(res.BoundToRunning), res.AgentCPU, bench.FormatMiB(stats.RSS),
		bench.FormatMiB(stats.RSSAnon), bench.FormatMiB(stats.RSSFile))
	if res.Machine != nil {
		b.logf("burst on %s: the machine's CPU over it: %s", n.agent.Name, res.Machine)
	}
	return bench.DeletePods(ctx, b.client, ns, deleteTimeout)
}

// shimCgroups counts containerd's shims by the cgroup their CPU is
// charged to: a shim outside containerd's would escape the runtime's part
// of the machine's CPU.
func (b *benchmark) shimCgroups() (map[string]int, error) {
	shims, err := b.ctrd.Shims()
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for id, pid := range shims {
		cgroup, err := bench.CPUCgroup(pid)
		if err != nil {
			return nil, fmt.Errorf("shim %s: %w", id, err)
		}
		counts[cgroup]++
	}
	return counts, nil
}

// podStartsSweep runs the containerd burst again on a fresh nodekit agent
// for each -pod-starts value of --max-parallel-pod-starts (after the main
// containerd agent stopped: two agents on one runtime kill each other's
// pods).
func (b *benchmark) podStartsSweep(ctx context.Context) error {
	if b.ctrd == nil {
		return nil
	}
	for i, limit := range b.opts.podStarts {
		n, err := b.newContainerdNode(fmt.Sprintf("starts%d", i), fmt.Sprintf("nb-starts-%d", i), fmt.Sprintf("--max-parallel-pod-starts=%d", limit))
		if err != nil {
			return err
		}
		if _, err := b.timeStart(ctx, n); err != nil {
			return errors.Join(err, b.stopNode(context.WithoutCancel(ctx), n))
		}
		b.logf("pod starts sweep: --max-parallel-pod-starts=%d", limit)
		err = b.burst(ctx, n, fmt.Sprintf("nodebench-starts-%d", i), b.opts.containerdPods)
		if err = errors.Join(err, b.stopNode(context.WithoutCancel(ctx), n)); err != nil {
			return err
		}
		b.podStarts = append(b.podStarts, podStartsRun{limit: limit, burst: n.burst})
	}
	return nil
}

// podStartsRun is one -pod-starts burst.
type podStartsRun struct {
	limit int
	burst *bench.BurstResult
}

// kubeletAnchor runs the upstream kubelet on containerd after nodekit's
// agent there stopped (two agents on one runtime kill each other's pods)
// and measures it the same way.
func (b *benchmark) kubeletAnchor(ctx context.Context) (err error) {
	if b.kubelet == nil {
		return nil
	}
	saved, err := cluster.SaveKernelTunables()
	if err != nil {
		return err
	}
	defer func() {
		if rerr := saved.Restore(); rerr != nil {
			b.logf("%v", rerr)
			err = errors.Join(err, rerr)
		}
	}()
	removeCgroup, err := cluster.CreateCgroup(b.cgroupName("kubelet"))
	if err != nil {
		return err
	}
	b.cgroups = append(b.cgroups, removeCgroup)
	k := b.kubelet
	// The kubelet links every container's log into /var/log/containers
	// (a fixed path) and creates the directory; remove what it leaves.
	_, statErr := os.Stat(cluster.ContainerLogLinks)
	defer func() {
		if cerr := cluster.RemoveLogLinks("_"+kubeletNamespace+"_", statErr != nil); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	defer func() {
		// The kubelet may exit non-zero on SIGTERM; only a kill is an
		// error worth reporting.
		if serr := b.stopNode(context.WithoutCancel(ctx), k); cluster.StopTimedOut(serr) {
			err = errors.Join(err, serr)
		}
		err = errors.Join(err, cluster.UnmountUnder(k.agent.Dir))
	}()
	if k.startToReady, err = b.timeStart(ctx, k); err != nil {
		return fmt.Errorf("%w\n--- last lines of %s:\n%s", err, k.agent.LogPath, cluster.LogTail(k.agent.LogPath, 20))
	}
	b.logf("kubelet start → Ready on containerd: %s", bench.FormatDuration(k.startToReady))
	if err := b.idleWindow(ctx, []*node{k}); err != nil {
		return err
	}
	return b.burst(ctx, k, kubeletNamespace, b.opts.containerdPods)
}

// kubeletNamespace holds the kubelet's pods.
const kubeletNamespace = "nodebench-kubelet"

// scale runs -nodes agents in this process and measures time to all Ready
// and this process's RSS.
func (b *benchmark) scale(ctx context.Context) (err error) {
	if b.opts.nodes == 0 {
		return nil
	}
	images, err := fakeImages()
	if err != nil {
		return err
	}
	// Measure from a collected heap so the figure is the fleet's, and
	// return what the harness freed to the system first: a shard's
	// process holds no garbage of a harness, and the fleet's pages count
	// in its growth rather than reusing them unseen.
	debug.FreeOSMemory()
	var heapBefore heapByComponent
	if b.opts.heapComponents {
		heapBefore = readHeapByComponent()
	}
	memBefore := readRuntimeMemory()
	before, err := bench.ReadProcStats(os.Getpid())
	if err != nil {
		return err
	}
	stopProfile := func() {}
	if b.opts.profileDir != "" {
		if stopProfile, err = startCPUProfile(filepath.Join(b.opts.profileDir, "fleet.start.cpu.pprof")); err != nil {
			return err
		}
	}
	defer func() { stopProfile() }()
	name := "nb-fleet"
	watch, err := bench.WatchReady(ctx, b.client, bench.FleetLabel+"="+name)
	if err != nil {
		return err
	}
	defer watch.Stop()
	b.logf("scale: %d agents in this process", b.opts.nodes)
	var services agent.ServiceLister
	if b.opts.shareServices {
		// One informer on the Services for the whole fleet, with the
		// admin's client, run until the fleet is gone.
		var run func(context.Context)
		services, run = agent.NewServiceLister(b.client)
		svcCtx, stopServices := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); run(svcCtx) }()
		defer func() { stopServices(); <-done }()
	}
	gcStart := gcCPU()
	began := time.Now()
	fleet, err := bench.StartFleet(ctx, bench.FleetOptions{
		ControlPlane: b.cp, Nodes: b.opts.nodes, Dir: filepath.Join(b.nodeDir, "fleet"), Name: name,
		Images: images, Parallel: b.opts.parallel, Services: services, Log: b.progress,
		MemoryMax:          int64(b.opts.fleetMemMax * (1 << 20)),
		StartMemoryPerNode: int64(b.opts.fleetStartMem * (1 << 20)),
		SocketCRI:          b.opts.fleetSocketCRI,
	})
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, fleet.Stop())
		derr := b.client.CoreV1().Nodes().DeleteCollection(context.WithoutCancel(ctx), metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: bench.FleetLabel + "=" + name})
		err = errors.Join(err, derr)
	}()
	waitCtx, cancel := context.WithTimeout(ctx, fleetTimeout)
	defer cancel()
	// Certificates are issued before the first agent starts: time to all
	// Ready counts from then.
	readyAt, err := watch.Wait(waitCtx, b.opts.nodes)
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	stopProfile()
	stopProfile = func() {}
	f := &fleetFigures{
		nodes: b.opts.nodes, credentials: fleet.Credentials, started: fleet.Started,
		allReady: readyAt.Sub(began) - fleet.Credentials, rssBefore: before.RSS, rssBeforeFile: before.RSSFile,
		memBefore: memBefore, heapBefore: heapBefore, memLimit: debug.SetMemoryLimit(-1), fromBudget: fleet.MemoryLimit != 0,
		startGCCPU: gcCPU() - gcStart,
	}
	b.fleet = f
	b.logf("scale: all %d nodes Ready %s after the first agent started", f.nodes, bench.FormatDuration(f.allReady))
	if err := sleep(ctx, b.opts.settle); err != nil {
		return err
	}
	after, err := bench.ReadProcStats(os.Getpid())
	if err != nil {
		return err
	}
	f.rssAfter, f.rssAfterFile, f.peakRSS, f.startPeakRSS = after.RSS, after.RSSFile, after.PeakRSS, after.PeakRSS
	// How much of that is live: the heap after a collection, and RSS once
	// the freed memory went back to the system.
	debug.FreeOSMemory()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	f.heapLive = mem.HeapAlloc
	if after, err = bench.ReadProcStats(os.Getpid()); err != nil {
		return err
	}
	f.rssAfterGC = after.RSS
	if b.opts.heapComponents {
		f.heapAfter = readHeapByComponent()
		b.logf("scale: heap per agent by component: %s", formatComponents(f.heapAfter.perAgent(f.heapBefore, f.nodes)))
	}
	f.memAfter = readRuntimeMemory()
	heapProfiles := []string{b.opts.heapProfile}
	if b.opts.profileDir != "" {
		heapProfiles = append(heapProfiles, filepath.Join(b.opts.profileDir, "fleet.heap.pprof"))
	}
	for _, path := range heapProfiles {
		if path == "" {
			continue
		}
		if err := writeHeapProfile(path); err != nil {
			return err
		}
		b.logf("scale: heap profile written to %s", path)
	}

	// Every node must stay Ready, idle, for -hold.
	b.logf("scale: holding %d nodes Ready for %s", f.nodes, b.opts.hold)
	if b.opts.profileDir != "" {
		if stopProfile, err = startCPUProfile(filepath.Join(b.opts.profileDir, "fleet.idle.cpu.pprof")); err != nil {
			return err
		}
	}
	cpuFrom, err := bench.ReadProcStats(os.Getpid())
	if err != nil {
		return err
	}
	gcFrom := gcCPU()
	hold, holdErr := watch.Hold(ctx, b.opts.hold)
	cpuTo, err := bench.ReadProcStats(os.Getpid())
	if err != nil {
		return err
	}
	stopProfile()
	stopProfile = func() {}
	f.hold, f.holdCPU, f.holdRSS, f.holdGCCPU = &hold, cpuTo.CPU-cpuFrom.CPU, cpuTo.RSS, gcCPU()-gcFrom
	// The peak over the whole run: the heap regrows over the hold after
	// the start's memory was released.
	f.peakRSS = max(f.peakRSS, cpuTo.PeakRSS)
	b.logf("scale: held %s: fewest Ready at once %d of %d, %d nodes lost Ready at least once; CPU %s (%.1f %% of a core, %.4f %% per node), RSS %s",
		hold.Held.Round(time.Second), hold.MinReady, f.nodes, len(hold.Lost), f.holdCPU,
		cpuPercent(f.holdCPU, hold.Held), cpuPercent(f.holdCPU, hold.Held)/float64(f.nodes), bench.FormatMiB(cpuTo.RSS))
	if holdErr != nil {
		return fmt.Errorf("scale: %w", holdErr)
	}

	if b.opts.fleetPods == 0 {
		return nil
	}
	const ns = "nodebench-fleet"
	if err := bench.WaitForNamespace(ctx, b.client, ns); err != nil {
		return err
	}
	b.logf("scale: %d pods per node on %d nodes", b.opts.fleetPods, f.nodes)
	res, err := bench.RunFleetPods(ctx, bench.FleetPodsOptions{
		Client: b.client, Namespace: ns, Nodes: fleet.Names, PerNode: b.opts.fleetPods, Image: cluster.BusyboxImage,
		Parallel: 100, Timeout: fleetTimeout,
	})
	if err != nil {
		// Report what was measured so far; the pods are removed all the same.
		f.podsErr = err.Error()
		b.logf("scale: %v", err)
		return errors.Join(err, bench.DeletePods(context.WithoutCancel(ctx), b.client, ns, fleetTimeout))
	}
	f.pods = res
	if after, err = bench.ReadProcStats(os.Getpid()); err != nil {
		return err
	}
	f.podsRSS = after.RSS
	b.logf("scale: %d pods created in %s, all Running %s after the first create; RSS %s",
		res.Pods, bench.FormatDuration(res.Created), bench.FormatDuration(res.AllRunning), bench.FormatMiB(f.podsRSS))
	return bench.DeletePods(ctx, b.client, ns, fleetTimeout)
}

// startCPUProfile profiles this process into path until the returned func
// is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("CPU profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("write heap profile %s: %w", path, err)
	}
	return f.Close()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cpuPercent is CPU time over a window as a percentage of one core.
func cpuPercent(cpu, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / window.Seconds()
}

// machine describes where the figures come from.
func machine() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d CPUs, Linux %s, %s", runtime.NumCPU(), strings.TrimSpace(string(kernel)), runtime.Version()) +
		", cgroup " + cgroupVersion()
}

// sourceCommit describes the checkout at root as `git describe --always
// --dirty` does (the commit, "-dirty" with uncommitted changes), or says
// why it cannot.
func sourceCommit(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return fmt.Sprintf("unknown (git describe in %s: %v)", root, err)
	}
	return strings.TrimSpace(string(out))
}

func cgroupVersion() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "v2"
	}
	return "v1"
}

func flagSetForKlog() *flag.FlagSet {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
}
