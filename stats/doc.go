// Package stats computes the kubelet's stats summary (the
// k8s.io/kubelet/pkg/apis/stats/v1alpha1 Summary served on
// /stats/summary) without cAdvisor: node stats from procfs, statfs and the
// cgroup tree, pod and container stats from the CRI, with the pod cgroups
// where the runtime has no pod-level stats. It also exports the kubelet's
// /metrics/resource and the common /metrics/cadvisor series as Prometheus
// collectors. The eviction manager, the node API server and node status
// read it.
//
// # What the summary holds, and where it comes from
//
//   - Node: CPU (cumulative, and usageNanoCores from two samples), memory
//     (usage, working set = usage − inactive file pages, RSS, page faults,
//     available = MemTotal − working set) and swap of the root cgroup;
//     network of the host's namespace (<ProcRoot>/1/net/dev, without lo,
//     veth*, docker*, nerdctl*; eth0 is the default interface); nodefs, the
//     statfs of Options.RootDir; the runtime's image and container
//     filesystems (used bytes and inodes from CRI ImageFsInfo, capacity from
//     statfs of the reported mount point; the image filesystem stands for
//     the container filesystem when the runtime reports none); rlimit
//     (the smaller of kernel.pid_max and kernel.threads-max, and the tasks
//     counted in /proc/loadavg); the boot time as start time.
//   - System containers: "pods" (the kubepods cgroup, from Options.Cgroups;
//     its availableBytes is its memory limit less its working set, what the
//     eviction manager needs for allocatableMemory.available), and
//     "kubelet", "runtime" and "misc" when Options.SystemCgroups names them.
//   - Pods, from the runtime's sandboxes (the ready one, or else the newest,
//     of each namespace/name) and running containers. By default, as the
//     kubelet does, containers come from ListContainerStats (CPU, memory,
//     writable layer) and each pod's CPU, memory and swap from its cgroup
//     (found with Options.Cgroups), its processes from its containers'
//     cgroups and its network from the namespace of one of its processes;
//     a pod whose cgroup is unknown gets the sums of its containers' CPU
//     and memory. With Options.PodStatsFromCRI, or without Options.Cgroups,
//     pods and containers come from ListPodSandboxStats instead, unless the
//     runtime answers Unimplemented (decided once) or the call fails (for
//     that round: containerd fails the whole call while one sandbox is torn
//     down). containerd 1.6 answers both; its ListPodSandboxStats costs
//     several times the runtime CPU of ListContainerStats.
//   - Per container: rootfs (the runtime's writable layer usage with the
//     capacity of its filesystem) and logs (the files in
//     <PodLogsDir>/<namespace>_<name>_<uid>/<container>/, as du counts
//     them, with the nodefs capacity). Per pod: the volumes of
//     Options.VolumeStats, and ephemeral storage, the sum of the
//     containers' rootfs and logs, the ephemeral volumes, the log files
//     directly in the pod's log directory and <RootDir>/pods/<uid>/etc-hosts.
//   - usageNanoCores of pods and containers is computed from this and the
//     previous sample of the same pod or container (at least a second
//     apart); until there is one, the runtime's own figure is reported.
//
// The summary holds what the kubelet reports on the same host with its
// default configuration, except: containers' CPU and memory are the
// runtime's figures (the kubelet overrides them with cAdvisor's reading of
// the same cgroups); PSI, IO, accelerator and user-defined metrics are not
// reported; the hugepage adjustment of the node's availableBytes (feature
// HugepageAwareEviction) is not made.
//
// # Cost
//
// Nothing runs in the background. Summary and CPUAndMemory compute a
// summary when asked and the cached one is older than Options.MaxAge
// (default 10 s, the eviction manager's interval); concurrent callers
// share one computation. A computation is three CRI calls
// (ListPodSandbox, ListContainers, ListContainerStats; ImageFsInfo too for
// Summary), one statfs per filesystem, a few small files per cgroup and,
// for Summary, one directory read per container log directory; the pod
// cgroups are listed again only when a new pod appears. With no pod the
// listing stops at ListPodSandbox, or before it while Options.HasPods says
// the runtime holds none. The node's own files (procfs, the root cgroup's) are held
// open, one descriptor per path for the whole process, and read again
// from offset 0 each time; a pod's are opened for each read.
//
// # Volume usage
//
// VolumeUsage measures the pods' volumes in the background, the kubelet's
// volume stats calculator: every volumeStatsAggPeriod (1 m by default) it
// walks each volume directory of every active pod under
// <RootDir>/pods/<uid>/volumes (du: allocated blocks, hard links once, and
// inodes) and statfs's its filesystem; its PodVolumeStats is the
// VolumeStatsFunc the summary reads, so the eviction manager sees an
// emptyDir's usage against its sizeLimit at most one period late. The walk
// costs as much I/O as du over the volumes.
//
// # Filesystem roots and tests
//
// Options.ProcRoot, SysRoot, CgroupRoot and RootDir point the provider at
// the host's files; tests point them at directory trees (a v1 tree has one
// directory per hierarchy, cpuacct and memory at least; a v2 tree has
// cgroup.controllers at its root). The cgroup version is detected as the
// cgroupdriver package does.
//
// # Metrics
//
// ResourceMetricsCollector is the kubelet's /metrics/resource collector,
// over CPUAndMemory. CadvisorCollector exports, over Summary, the
// container_* series of /metrics/cadvisor that dashboards use (CPU,
// memory, network, the root filesystem, start times) and the machine_*
// series of the host's facts it is given (CadvisorOptions.Machine, package
// machine's), with cAdvisor's labels. VolumeStatsCollector exports, over
// Summary, the kubelet_volume_stats_* series of /metrics for the volumes
// whose stats name a persistent volume claim. Each goes in the registry
// that serves its endpoint.
//
// # Wiring and swapping
//
// Without fx, call New with Options. With fx, Module provides *Provider
// from the Options in the graph, filling Runtime and Images from the
// graph's cri.RuntimeService and cri.ImageManagerService, Cgroups from
// *cgroupdriver.Manager, VolumeStats from a VolumeStatsFunc and Clock from
// clock.Clock when the Options leave them zero. Consumers declare the
// interface they need (the eviction manager a Summary method, the metrics
// collector CPUAndMemorySource), so an embedder swaps the provider by
// providing another implementation of that interface, or changes its
// inputs with fx.Decorate on Options (for example to wrap the runtime).
package stats
