// Package cgroupdriver places pods in the cgroup hierarchy a kubelet
// builds, with the cgroupfs or the systemd driver, on cgroup v1 (including
// hybrid hosts) and cgroup v2, so that the container runtime, monitoring and
// the eviction manager find what they expect, and a node switched between
// drivers stays consistent.
//
// # What lives here
//
//   - Name, the driver-independent name of a cgroup (a list of components),
//     with its cgroupfs form (ToCgroupfs, ParseCgroupfs) and its systemd form
//     (ToSystemd, ParseSystemd): {"kubepods", "burstable", "pod12-ab"} is
//     "/kubepods/burstable/pod12-ab" or
//     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_ab.slice",
//     exactly as the kubelet names them.
//   - Driver, with two implementations selected by KubeletConfiguration
//     cgroupDriver and built by NewDriver: the cgroupfs driver writes the
//     cgroup filesystem; the systemd driver asks systemd over D-Bus for one
//     transient slice per cgroup (properties as runc sets them for the
//     kubelet) and then writes the same values to the files.
//   - Manager, the kubelet's QoS and pod hierarchy: kubepods (node
//     allocatable), kubepods/burstable and kubepods/besteffort, and one
//     pod<uid> cgroup per pod under its QoS parent (Guaranteed pods directly
//     under kubepods). EnsurePod creates a pod's cgroup with the kubelet's
//     values (resources.go: resourceConfigForPod) and returns the cgroup
//     parent for its sandbox; RemovePod deletes it once its containers are
//     gone (runc leaves the pod-level directories behind); ListPods finds
//     orphans; Run refreshes the QoS cgroups every minute (BestEffort cpu
//     shares 2, Burstable shares the sum of the Burstable pods' CPU
//     requests).
//   - PodQOS and ComputePodQOS (QoS classes, pod-level resources included)
//     and KubepodsLimits (what the kubepods cgroup enforces); the
//     shares/quota/weight conversions and the check that turns a driver
//     mismatch with the container runtime (CRI RuntimeConfig) into a clear
//     startup error are the package's own.
//   - Metrics: kubelet_cgroup_manager_duration_seconds{operation_type} (the
//     kubelet's, create/update/destroy) and
//     kubelet_cgroup_manager_errors_total{operation_type} (nodekit's).
//
// # Cgroup values
//
// cgroup v1: cpu.shares, cpu.cfs_period_us, cpu.cfs_quota_us,
// memory.limit_in_bytes and pids.max. cgroup v2: cpu.weight (converted from
// shares with the kubelet's linear mapping), cpu.max, memory.max and
// pids.max. A cgroup is created in every mounted v1 hierarchy (as runc and
// so the kubelet do), a new v1 cpuset gets its parent's cpus and mems, and on
// v2 every ancestor enables the controllers the root offers. Hugepage
// limits and the alpha memory QoS (memory.min/low/high) are not managed.
//
// # The filesystem root and fake trees
//
// FSOptions.Root (default /sys/fs/cgroup) is where the hierarchies are
// mounted. The version is detected from it (cgroup.controllers in the root
// means v2) or forced with FSOptions.Version. Tests point the root at a
// directory tree: for v1, one directory per hierarchy ("cpu", "memory",
// "pids" at least; "cpuset" with cpuset.cpus and cpuset.mems to exercise the
// copy); for v2, a root holding cgroup.controllers. When the root is not a
// mounted cgroup filesystem the package emulates the two things the kernel
// does on its own: writing a control file creates it, and removing a cgroup
// removes its control files. On a real cgroup filesystem neither ever
// happens.
//
// The package does not use github.com/opencontainers/cgroups (through which
// the kubelet drives cgroups), because it cannot work on such a root: its
// file access refuses any file that is not on a cgroup filesystem unless the
// process-wide cgroups.TestMode is set, its cgroup v2 manager creates
// cgroups only below the hard-coded /sys/fs/cgroup and detects v2 there, and
// its systemd managers dial D-Bus themselves, which no test can fake (its
// shares-to-weight helper is also runc's quadratic mapping, not the
// kubelet's linear one). The package writes the few files it needs itself,
// with runc's care for the kernel's ordering rules (a CFS period the kernel
// refuses is retried after the quota), and talks to systemd through
// github.com/coreos/go-systemd.
//
// # systemd
//
// No test here runs systemd: the systemd driver's D-Bus side is the
// SystemdConn interface (go-systemd's *dbus.Conn implements it;
// Options.SystemdDial opens one), unit-tested with a fake, and its naming is
// tested exhaustively (including fuzzing ParseSystemd(ToSystemd(x)) == x). The
// driver connects on first use and redials a closed connection once.
//
// # Privileges
//
// Creating cgroups needs root. Root without CAP_SYS_RESOURCE (as on the
// development machine) can create cgroups and write every value above; what
// the kernel refuses, whatever the capabilities, is a CFS quota above the
// parent's (EINVAL) and a memory limit below current usage (EBUSY). Both
// errors name the file and the value.
//
// # Swapping pieces
//
// Without fx, build a Manager with New(Options); Options.Driver takes any
// Driver. With fx, Module provides the Driver (NewDriver over the graph's
// Options) and the *Manager, and runs Manager.Run with the application;
// replace or wrap the driver with fx.Decorate(func(d Driver) Driver {...}).
// The agent wires Options.RuntimeCgroupDriver to the runtime client's
// CgroupDriver method so that Start checks the two drivers agree, and
// Options.ActivePods and Options.NodeAllocatable to its pod manager and node
// status.
//
// The upstream kubelet (KubeletCgroupDriverFromCRI) adopts the runtime's
// driver when the runtime reports one; nodekit refuses to start on a
// mismatch instead, so that the configuration says what the node does.
package cgroupdriver
