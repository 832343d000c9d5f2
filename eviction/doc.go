// Package eviction is the kubelet's node-pressure eviction manager: it
// watches eviction signals, reports the MemoryPressure, DiskPressure and
// PIDPressure node conditions, rejects pods at admission under pressure,
// reclaims node-level resources and evicts pods, as the kubelet v1.37 does
// (pkg/kubelet/eviction).
//
// # Signals
//
// A Signal reads one quantity from the stats summary
// (k8s.io/kubelet/pkg/apis/stats/v1alpha1), names the resource it starves
// and the node condition it sets, and says how to rank pods and what to
// reclaim before evicting. The built-in signals are the kubelet's:
//
//   - memory.available: Node.Memory.AvailableBytes, out of AvailableBytes +
//     WorkingSetBytes;
//   - allocatableMemory.available: the "pods" system container's memory the
//     same way (Options.PodsMemoryLimit minus its working set when the stats
//     lack AvailableBytes); it has a threshold only when
//     enforceNodeAllocatable holds "pods";
//   - nodefs.available / nodefs.inodesFree: Node.Fs;
//   - imagefs.available / imagefs.inodesFree: Node.Runtime.ImageFs;
//   - containerfs.available / containerfs.inodesFree:
//     Node.Runtime.ContainerFs; their thresholds are derived from nodefs's
//     or imagefs's by the disk layout, never configured;
//   - pid.available: Rlimit.MaxPID − Rlimit.NumOfRunningProcesses.
//
// The disk layout (DiskLayout: is the image filesystem dedicated, are
// writable layers split from it) decides the containerfs thresholds, which
// of a pod's uses count for each disk signal and which reclaim runs. It
// comes from Options.DiskLayout, or is inferred from the first summary that
// has the filesystems' stats (InferDiskLayout).
//
// # Thresholds
//
// ParseThresholds reads evictionHard, evictionSoft,
// evictionSoftGracePeriod and evictionMinimumReclaim ("100Mi" or "10%")
// with the kubelet's validation and errors. Unset evictionHard means
// DefaultHard (memory.available<100Mi, nodefs.available<10%,
// nodefs.inodesFree<5%, imagefs.available<15%, imagefs.inodesFree<5%); a
// set one is used alone unless mergeDefaultEvictionSettings.
//
// # The loop
//
// Run makes one pass every MonitoringInterval (10 s): observe every
// signal; find the thresholds met, plus those met before whose minimum
// reclaim is not yet achieved; report the conditions of the thresholds met
// (a condition stays true for PressureTransitionPeriod, 5 m, after its
// signal clears); keep the thresholds whose soft grace period has passed and
// whose stats are newer than the last pass's; enforce local storage limits
// (emptyDir sizeLimit, pod and container ephemeral-storage limits: evict
// every offender with a 1 s grace period); then take the first threshold
// (memory first), run its node-level reclaim (unused containers and images)
// and re-measure, and if any threshold is still met rank the pods and evict
// the first that is not critical (static, mirror, or priority ≥
// 2000000000): one pod per pass, grace 1 s for a hard threshold,
// min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds) for a soft
// one. The evicted pod's status is phase Failed, reason Evicted, the
// kubelet's message ("The node was low on resource: memory. Threshold
// quantity: 100Mi, available: 50Mi. Container x was using 120Mi, request is
// 0, has larger consumption of memory. ") and a DisruptionTarget condition
// (reason TerminationByKubelet); an Evicted event goes to the pod and an
// EvictionThresholdMet event to the node. After an eviction Run waits for
// the pod's cleanup (PodCleanedUp, 30 s at most) before the next pass.
//
// Ranking: memory signals by "uses more than it requested", then priority,
// then use above request; disk signals the same over the pod's disk use on
// that filesystem; pid.available by priority, then process count.
//
// With Options.KernelMemcgNotification on cgroup v1, memory thresholds are
// also armed in the kernel (cgroup.event_control on memory.usage_in_bytes),
// so a crossing starts a pass at once. cgroup v2 has no such notification;
// the option is then logged and ignored, as the kubelet does.
//
// # Conditions and admission
//
// The Manager sets the conditions in a Pressure (Options.Pressure; the
// Manager embeds it), which readers take instead of the Manager: the pod
// loop admits pods by it while the Manager evicts through the loop.
// IsUnderMemoryPressure, IsUnderDiskPressure and IsUnderPIDPressure are the
// node status setters' pressure funcs (status.PressureFuncs). Admit is the
// kubelet's eviction admit handler: no pressure or a critical pod admits;
// MemoryPressure alone rejects BestEffort pods that do not tolerate
// node.kubernetes.io/memory-pressure:NoSchedule; any other pressure rejects
// every pod, with reason Evicted and "The node had condition:
// [DiskPressure]. ".
//
// # Metrics
//
// Registered on Options.Registerer, as the kubelet's:
// kubelet_evictions{eviction_signal} (counter; local storage evictions
// count as emptydirfs.limit, ephemeralpodfs.limit and
// ephemeralcontainerfs.limit) and
// kubelet_eviction_stats_age_seconds{eviction_signal} (histogram: age of the
// stats an eviction acted on).
//
// # Swapping pieces
//
// Without fx, build a Manager with New and call Run. With fx, Module
// provides the *Manager from the eviction.Options in the graph and runs it;
// the loop's funcs may come from the graph as SummaryFunc, ActivePodsFunc,
// KillPodFunc and PodCleanedUpFunc. An embedder adds a signal (say, GPU
// memory, see Example_customSignal) with Options.Signals or, with fx,
// AsSignal, replaces a built-in one by giving a Signal of the same Name
// (e.g. a memory.available from another source), names it in the thresholds
// like any other, and reads its condition with UnderPressure. RankByUsage
// builds the kubelet's ranking for any usage. An agent without eviction
// leaves Module out and gives status no pressure funcs.
package eviction
