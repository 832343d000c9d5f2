package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// options are the command's flags.
type options struct {
	containerd     string // auto, on or off
	series         string // the containerd series: 2 or 1.6
	kubelet        bool
	fakePods       int
	containerdPods int
	csiPods        int
	idle           time.Duration
	settle         time.Duration
	startRuns      int
	nodes          int
	parallel       int
	hold           time.Duration
	fleetPods      int
	fleetMemMax    float64
	fleetStartMem  float64
	fleetSocketCRI bool
	shareServices  bool
	dir            string
	fs             string // fsExt4 or fsHost
	heapProfile    string
	heapComponents bool
	profileDir     string
	profileTime    time.Duration
	idleTrace      string
	jsonOut        string
	compare        string
	compareFrom    string
	quick          bool
	fleetOnly      bool
	agentArgs      []string
	podStarts      []int
}

// quickDefaults replace the defaults of the flags a -quick run does not set
// itself: fakecri only, small bursts, short windows, a tiny fleet.
var quickDefaults = map[string]string{
	"containerd": "off",
	"kubelet":    "false",
	"pods":       "10",
	"idle":       "5s",
	"settle":     "2s",
	"start-runs": "1",
	"nodes":      "3",
	"hold":       "10s",
	"fleet-pods": "2",
}

func parseFlags(args []string, output io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("nodebench", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.containerd, "containerd", "auto", "run the containerd figures: on, off, or auto (when this machine can run containerd)")
	fs.StringVar(&o.series, "containerd-series", string(cluster.DefaultContainerdSeries()), "the containerd the containerd figures run on: 2 (built from the pinned Go modules) or 1.6 (Debian's package); default $"+cluster.ContainerdSeriesEnv+" or "+string(cluster.DefaultContainerdSeries()))
	fs.BoolVar(&o.kubelet, "kubelet", true, "measure the upstream kubelet on the same containerd as the anchor (needs containerd)")
	fs.IntVar(&o.fakePods, "pods", 100, "pods created at once on the fake runtime")
	fs.IntVar(&o.containerdPods, "containerd-pods", 30, "pods created at once on containerd (nodekit and kubelet)")
	fs.IntVar(&o.csiPods, "csi-pods", 5, "pods created at once on containerd, each with a volume of the e2e CSI driver (static PV and claim): bound → volume published → Running (0 skips)")
	fs.DurationVar(&o.idle, "idle", time.Minute, "idle window for CPU and API traffic")
	fs.DurationVar(&o.settle, "settle", 10*time.Second, "wait after a node turned Ready before its idle window")
	fs.IntVar(&o.startRuns, "start-runs", 3, "start → Ready runs per case on the fake runtime (the median is reported)")
	fs.IntVar(&o.nodes, "nodes", 100, "agents to run in this one process on the fake runtime (0 skips the scale figures)")
	fs.IntVar(&o.parallel, "parallel", 50, "how many of the -nodes agents start at once")
	fs.DurationVar(&o.hold, "hold", 5*time.Minute, "how long the -nodes agents must stay Ready once all were; their idle CPU is measured over it")
	fs.BoolVar(&o.shareServices, "share-services", true, "the -nodes agents share one informer on the Services (agent.ServiceLister) instead of one watch each")
	fs.Float64Var(&o.fleetStartMem, "fleet-start-memory", 0, "while the -nodes agents start, the garbage collector runs only when this process's Go memory reaches what it held before plus this many MiB per node, instead of each time the heap doubled (agent/fleet's Options.StartMemoryPerNode; 0 leaves GOGC alone)")
	fs.Float64Var(&o.fleetMemMax, "fleet-memory-max", 1024, "the -nodes agents' process runs as a fleet shard in a container with this memory limit, in MiB (the target: 1 GiB for 1,000 nodes): its Go memory limit is this less the executable's read-only mappings, set before the agents start (agent/fleet's Options.MemoryMax; 0 sets none)")
	fs.BoolVar(&o.fleetSocketCRI, "fleet-socket-cri", false, "the -nodes agents dial their fake runtimes over unix sockets (cri-client over gRPC, as on containerd) instead of calling them in process (agent/fleet's Options.SocketCRI)")
	fs.IntVar(&o.fleetPods, "fleet-pods", 10, "pods per node created on the -nodes agents after -hold (0 skips them)")
	fs.BoolVar(&o.heapComponents, "heap-by-component", false, "sample this process's heap every 32 KiB (Go's default: 512 KiB) and report the -nodes agents' heap per node by component; the sampling costs their start ~3 % of its CPU")
	fs.StringVar(&o.heapProfile, "heap-profile", "", "write a heap profile (pprof) of this process once the -nodes agents are all Ready")
	fs.StringVar(&o.profileDir, "profile", "", "write a CPU profile (pprof) of each nodekit agent over its burst (<node>.cpu.pprof) a CPU profile over its idle window (<node>.idle.cpu.pprof; the profiler adds to the idle CPU figure) and a heap profile at the end of it (<node>.idle.heap.pprof) into this directory, from the agent's /debug/pprof; and of this process with the -nodes agents, a CPU profile from their start to all Ready (fleet.start.cpu.pprof) and over -hold (fleet.idle.cpu.pprof) and a heap profile once all were Ready (fleet.heap.pprof)")
	fs.StringVar(&o.idleTrace, "idle-trace", "", "write a Go execution trace of each nodekit agent over its idle window (<node>.idle.trace, from the agent's /debug/pprof/trace; read it with go tool trace) into this directory: every wake-up of the agent, by goroutine (the tracer adds to the idle CPU figure)")
	fs.DurationVar(&o.profileTime, "profile-time", 10*time.Second, "how long each -profile CPU profile runs, from the burst's start")
	fs.StringVar(&o.jsonOut, "json", "", "also write the table as JSON to this file")
	fs.StringVar(&o.compare, "compare", "", "print the change of every figure against this earlier -json table")
	fs.StringVar(&o.compareFrom, "from", "", "with -compare: compare this -json table instead of running the benchmark")
	fs.StringVar(&o.fs, "fs", fsExt4, "the file system under the nodes' state (every agent's and the kubelet's root and pod logs, containerd's root and state, the -nodes agents'): "+fsExt4+" (a journaled ext4 of mkfs.ext4's defaults on a sparse image, loop-mounted under the run's directory; needs root, a loop device and mkfs.ext4) or "+fsHost+" (the run's directory's own)")
	fs.StringVar(&o.dir, "dir", "", "keep all state and logs in this directory (default: a temporary one, removed unless the run fails)")
	fs.Func("pod-starts", "also run the containerd burst on a fresh nodekit agent with each of these --max-parallel-pod-starts values (comma separated, e.g. 1,2,4,8,-1)", func(s string) error {
		o.podStarts = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("-pod-starts: %q is not a number", f)
			}
			o.podStarts = append(o.podStarts, v)
		}
		return nil
	})
	fs.Func("agent-args", "extra flags for every nodekit agent process, separated by spaces (e.g. -agent-args=--max-parallel-pod-starts=2)", func(s string) error {
		o.agentArgs = strings.Fields(s)
		return nil
	})
	fs.BoolVar(&o.fleetOnly, "fleet-only", false, "measure only the -nodes agents in this process (no fakecri or containerd node, no kubelet): the scale figures alone")
	fs.BoolVar(&o.quick, "quick", false, "a small run on the fake runtime only (defaults: "+quickSummary()+"); flags given explicitly still apply")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, value := range quickDefaults {
			if !set[name] {
				if err := fs.Set(name, value); err != nil {
					return options{}, err
				}
			}
		}
	}
	if o.fleetOnly {
		o.containerd, o.kubelet, o.podStarts = "off", false, nil
	}
	switch {
	case o.fs != fsExt4 && o.fs != fsHost:
		return options{}, fmt.Errorf("-fs=%s: want %s or %s", o.fs, fsExt4, fsHost)
	case o.containerd != "auto" && o.containerd != "on" && o.containerd != "off":
		return options{}, fmt.Errorf("-containerd=%s: want auto, on or off", o.containerd)
	case o.series != string(cluster.ContainerdSeries2) && o.series != string(cluster.ContainerdSeries16):
		return options{}, fmt.Errorf("-containerd-series=%s: want %s or %s", o.series, cluster.ContainerdSeries2, cluster.ContainerdSeries16)
	case o.fakePods < 1 || o.containerdPods < 1:
		return options{}, fmt.Errorf("-pods and -containerd-pods must be at least 1")
	case o.csiPods < 0:
		return options{}, fmt.Errorf("-csi-pods=%d: must not be negative", o.csiPods)
	case o.idle < time.Second:
		return options{}, fmt.Errorf("-idle=%s: want at least 1s", o.idle)
	case o.settle < 0:
		return options{}, fmt.Errorf("-settle=%s: must not be negative", o.settle)
	case o.startRuns < 1:
		return options{}, fmt.Errorf("-start-runs must be at least 1")
	case o.hold < time.Second || o.fleetPods < 0 || o.fleetMemMax < 0 || o.fleetStartMem < 0:
		return options{}, fmt.Errorf("-hold must be at least 1s and -fleet-pods, -fleet-memory-max and -fleet-start-memory not negative")
	case o.fleetOnly && o.nodes == 0:
		return options{}, fmt.Errorf("-fleet-only needs -nodes")
	case o.nodes < 0 || o.parallel < 1:
		return options{}, fmt.Errorf("-nodes must not be negative and -parallel must be at least 1")
	case o.compareFrom != "" && o.compare == "":
		return options{}, fmt.Errorf("-from needs -compare")
	case o.profileTime < time.Second:
		return options{}, fmt.Errorf("-profile-time=%s: want at least 1s", o.profileTime)
	}
	return o, nil
}

// quickSummary lists quickDefaults as flags, sorted.
func quickSummary() string {
	names := make([]string, 0, len(quickDefaults))
	for name := range quickDefaults {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		names[i] = "-" + name + "=" + quickDefaults[name]
	}
	return strings.Join(names, " ")
}
