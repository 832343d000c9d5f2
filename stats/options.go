package stats

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/cgroupdriver"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultRootDir    = "/var/lib/kubelet"
	DefaultPodLogsDir = "/var/log/pods"
	DefaultProcRoot   = "/proc"
	DefaultSysRoot    = "/sys"
	DefaultCgroupRoot = "/sys/fs/cgroup"
	// DefaultMaxAge is how long a summary is served from the cache: the
	// eviction manager's monitoring interval, and about as old as the
	// kubelet's cAdvisor samples get (10 s housekeeping).
	DefaultMaxAge = 10 * time.Second
)

// RuntimeStats is what the provider asks the container runtime: the CRI
// RuntimeService's listing and stats calls. cri-api's RuntimeService (and
// so the runtime package's Client.RuntimeService()) implements it. Calls
// must honour ctx and be safe for concurrent use.
type RuntimeStats interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
	ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error)
}

// ImageFsInfoer reports the runtime's image (and container) filesystems:
// the CRI ImageManagerService's ImageFsInfo, which cri-api's
// ImageManagerService implements.
type ImageFsInfoer interface {
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// PodCgroups locates the pod cgroups and the node allocatable (kubepods)
// cgroup. *cgroupdriver.Manager implements it; the provider only reads
// (ListPods lists directories, the others are pure). It must be safe for
// concurrent use.
type PodCgroups interface {
	// ListPods returns the pod cgroups by pod UID.
	ListPods(ctx context.Context) (map[types.UID]cgroupdriver.Name, error)
	// QOSCgroups names the QoS hierarchy; its Guaranteed cgroup is the
	// kubepods cgroup, reported as the "pods" system container.
	QOSCgroups() cgroupdriver.QOSCgroups
	// Driver converts names to paths below the cgroup root (Literal).
	Driver() cgroupdriver.Driver
}

// PodVolumeStats are the usage of one pod's volumes, as the volume manager
// measures them (the kubelet's PodVolumeStats).
type PodVolumeStats struct {
	// Ephemeral volumes (emptyDir on disk, configMap, secret, downwardAPI,
	// projected, generic ephemeral) count towards the pod's ephemeral
	// storage.
	Ephemeral []statsapi.VolumeStats
	// Persistent volumes (PVC-backed) are only listed.
	Persistent []statsapi.VolumeStats
}

// VolumeStatsFunc returns the volume usage of the pod with uid, false when
// it has none measured. It is called for every pod of every summary, so it
// must not block: the volume manager measures in the background (the
// kubelet every minute) and returns its cached values. The provider does
// not modify the returned stats and keeps references to them in the
// summaries it returns, so they must not be modified afterwards either.
type VolumeStatsFunc func(uid types.UID) (PodVolumeStats, bool)

// SystemCgroups name the cgroups reported as system containers besides
// "pods", as cgroupfs paths below the cgroup root (KubeletConfiguration
// kubeletCgroups, systemCgroups and the runtime's cgroup,
// e.g. "/system.slice/containerd.service"). Empty ones are not reported.
type SystemCgroups struct {
	Kubelet string // reported as "kubelet"
	Runtime string // reported as "runtime"
	Misc    string // reported as "misc"
}

// Options configure a Provider.
type Options struct {
	// NodeName is the node's name, reported in NodeStats.
	NodeName string

	// RootDir is the agent's root directory (kubelet --root-dir); its
	// filesystem is the node's nodefs (NodeStats.Fs, the logs' and pods'
	// ephemeral storage), and <RootDir>/pods/<uid>/etc-hosts counts
	// towards a pod's ephemeral storage. Default DefaultRootDir.
	RootDir string
	// PodLogsDir holds the container logs,
	// <PodLogsDir>/<namespace>_<name>_<uid>/<container>/<n>.log
	// (KubeletConfiguration podLogsDir). Default DefaultPodLogsDir.
	PodLogsDir string
	// ProcRoot is procfs (meminfo, stat, loadavg, sys/kernel, 1/net/dev for
	// the node's network, <pid>/net/dev for pods). Default DefaultProcRoot.
	ProcRoot string
	// SysRoot is sysfs (devices/system/cpu/online, for the machine metrics
	// of CadvisorCollector). Default DefaultSysRoot.
	SysRoot string
	// CgroupRoot is where the cgroup hierarchies are mounted; it must be
	// the root the PodCgroups' driver works on. Default DefaultCgroupRoot.
	CgroupRoot string
	// CgroupVersion forces the cgroup version (1 or 2); 0 detects it as
	// cgroupdriver does (cgroup.controllers in the root means v2).
	CgroupVersion int

	// Runtime answers the CRI listing and stats calls; required.
	Runtime RuntimeStats
	// Images answers ImageFsInfo; required.
	Images ImageFsInfoer
	// Cgroups locates the pod cgroups and the kubepods cgroup; optional.
	// Without it there is no "pods" system container (which the eviction
	// manager needs for allocatableMemory.available) and, for a runtime
	// that does not answer ListPodSandboxStats, pod CPU and memory are the
	// sum of their containers' and pods have no network or process stats.
	Cgroups PodCgroups
	// SystemCgroups are the other system containers; optional.
	SystemCgroups SystemCgroups
	// VolumeStats reports pod volume usage; optional (no volume stats).
	VolumeStats VolumeStatsFunc
	// PodStatsFromCRI takes the pod-level stats (and the containers') from
	// the runtime's ListPodSandboxStats even when Cgroups locates the pod
	// cgroups: the kubelet's PodAndContainerStatsFromCRI feature, off by
	// default there too. Without Cgroups, ListPodSandboxStats is always
	// used when the runtime implements it. Off, pods are read from their
	// cgroups and containers from ListContainerStats, as the kubelet does
	// by default: containerd 1.6 answers ListPodSandboxStats by asking
	// every shim for its task, at several times the cost of
	// ListContainerStats (measured here with 10 pods: about 110 ms of
	// containerd CPU and 1 s per call, against 30 ms and 30 ms).
	PodStatsFromCRI bool

	// HasPods, when set, says whether the runtime may hold anything of a
	// pod (a sandbox or a container in any state: a completed pod whose
	// sandbox is stopped is in the summary, as in the kubelet's): a
	// summary computed while it answers false has no pod and asks the
	// runtime nothing about pods, not even ListPodSandbox, so an idle
	// node's round (every 10 s under the eviction manager) makes one CRI
	// call, ImageFsInfo. The agent answers it from the PLEG's record of
	// the runtime (runtime.PLEG.HasPods: its latest relist, events and the
	// agent's own syncs). nil lists the sandboxes every time, as the
	// kubelet does.
	HasPods func() bool

	// MaxAge is how old a summary Summary and CPUAndMemory may return from
	// the cache; a negative value disables the cache. Default
	// DefaultMaxAge.
	MaxAge time.Duration
	// Clock times samples and the cache. Default clock.RealClock{}.
	Clock clock.Clock
}

// withDefaults validates o and fills its zero fields.
func (o Options) withDefaults() (Options, error) {
	if o.Runtime == nil {
		return o, errors.New("stats: Options.Runtime is required")
	}
	if o.Images == nil {
		return o, errors.New("stats: Options.Images is required")
	}
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&o.RootDir, DefaultRootDir)
	def(&o.PodLogsDir, DefaultPodLogsDir)
	def(&o.ProcRoot, DefaultProcRoot)
	def(&o.SysRoot, DefaultSysRoot)
	def(&o.CgroupRoot, DefaultCgroupRoot)
	if o.CgroupVersion != 0 && o.CgroupVersion != 1 && o.CgroupVersion != 2 {
		return o, fmt.Errorf("stats: cgroup version %d: must be 0 (detect), 1 or 2", o.CgroupVersion)
	}
	for name, p := range map[string]string{"kubelet": o.SystemCgroups.Kubelet, "runtime": o.SystemCgroups.Runtime, "misc": o.SystemCgroups.Misc} {
		if p != "" && (p[0] != '/' || path.Clean(p) != p) {
			return o, fmt.Errorf("stats: %s system cgroup %q: must be a clean absolute cgroupfs path", name, p)
		}
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o, nil
}
