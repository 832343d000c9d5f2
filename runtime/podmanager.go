package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nodekit/nodekit/podstate"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// Defaults of PodManagerOptions, the kubelet's.
const (
	DefaultPodLogsDir          = "/var/log/pods"
	DefaultContainerLogsDir    = "/var/log/containers"
	DefaultPodsDir             = "/var/lib/kubelet/pods"
	DefaultSeccompProfileRoot  = "/var/lib/kubelet/seccomp"
	DefaultHostsFile           = "/etc/hosts"
	DefaultContainerBackOff    = 10 * time.Second
	DefaultMaxContainerBackOff = 300 * time.Second
	DefaultImageBackOff        = 10 * time.Second
	DefaultMaxImageBackOff     = 300 * time.Second
	DefaultCPUCFSQuotaPeriod   = 100 * time.Millisecond
	// MinimumGracePeriodSeconds is the shortest time a container is given
	// to stop, whatever its pod asks for.
	MinimumGracePeriodSeconds = 2
)

// PodManagerOptions configures a PodManager. Runtime and Images are
// required; everything else has the kubelet's default or is optional.
type PodManagerOptions struct {
	// Runtime and Images are the CRI services, typically a Client's
	// RuntimeService() and ImageService().
	Runtime cri.RuntimeService
	Images  cri.ImageManagerService
	// RuntimeName is the runtime's name, the type in API container IDs
	// ("containerd://<id>"). Empty means asked from the runtime's Version
	// the first time it is needed.
	RuntimeName string

	// NodeName is the node's name (spec.nodeName in events' sources is the
	// recorder's business; this is for logs). NodeIPs are the node's IPs:
	// the IPs of hostNetwork pods and the downward API's status.hostIP(s).
	NodeName string
	NodeIPs  []net.IP

	// PodLogsDir is where container logs go:
	// <PodLogsDir>/<namespace>_<name>_<uid>/<container>/<restartCount>.log
	// (default DefaultPodLogsDir).
	PodLogsDir string
	// ContainerLogsDir is where the link to each started container's log
	// file goes, <pod>_<namespace>_<container>-<containerID>.log
	// ([ContainerLogLink]), as the kubelet's /var/log/containers, which
	// log shippers read (default DefaultContainerLogsDir, made when
	// missing).
	ContainerLogsDir string
	// PodsDir holds the per-pod files the agent makes: the pod's
	// /etc/hosts (<PodsDir>/<uid>/etc-hosts) and the containers'
	// termination message files (<PodsDir>/<uid>/containers/<name>/), next
	// to the volumes the volume manager sets up there (default
	// DefaultPodsDir).
	PodsDir string
	// HostsFile is the node's hosts file, copied for hostNetwork pods
	// (default DefaultHostsFile; a file that cannot be read is treated as
	// empty).
	HostsFile string

	// ClusterDNS, ClusterDomain and ResolverConfig are the kubelet's
	// clusterDNS, clusterDomain and resolvConf settings for the sandbox DNS
	// configuration. An empty ResolverConfig means no host resolver file
	// (the kubelet's resolvConf: ""), not its default path.
	ClusterDNS     []net.IP
	ClusterDomain  string
	ResolverConfig string

	// CgroupParent returns the cgroup a pod's sandbox is created under,
	// creating it if needed (cgroupdriver's Manager.EnsurePod). nil leaves
	// the choice to the runtime.
	CgroupParent func(ctx context.Context, pod *v1.Pod) (string, error)
	// UpdatePodCgroup sets a pod's cgroup to the values of pod's resources
	// (cgroupdriver's Manager.UpdatePod), for in-place resize: SyncPod
	// calls it before resizing the containers when the pod grows, after
	// when it shrinks, once for memory and once for cpu, with the pod's
	// containers at the values actuated by then. nil leaves the pod's
	// cgroup as created.
	UpdatePodCgroup func(ctx context.Context, pod *v1.Pod) error
	// CgroupVersion returns the node's cgroup version (cgroupdriver's
	// Driver.Version fits); on 2 container resources carry the settings the
	// kubelet adds on a unified hierarchy (memory.oom.group=1 so an OOM kills
	// the whole container, memory.high=max). It is asked once, when the
	// first container is configured; nil means version 1.
	CgroupVersion func() (int, error)
	// QOSClass classifies a pod for its containers' OOM score adjustment
	// (cgroupdriver.PodQOS fits). nil uses pod.Status.QOSClass, and
	// Burstable when that is empty.
	QOSClass func(*v1.Pod) v1.PodQOSClass
	// MemoryCapacity is the node's memory in bytes, for the OOM score of
	// Burstable containers. Zero means read from /proc/meminfo.
	MemoryCapacity int64
	// Swap is the containers' swap (memorySwap.swapBehavior, see
	// SwapOptions); nil leaves swap out of the CRI config, to the
	// runtime's default.
	Swap *SwapOptions
	// CPUCFSQuota enforces CPU limits with CFS quota (default true);
	// CPUCFSQuotaPeriod is the quota period (default 100ms).
	CPUCFSQuota       *bool
	CPUCFSQuotaPeriod time.Duration
	// SeccompDefault gives containers without a seccomp profile the
	// runtime's default profile instead of none; SeccompProfileRoot is where
	// Localhost profiles live (default DefaultSeccompProfileRoot).
	SeccompDefault     bool
	SeccompProfileRoot string
	// RuntimeHandler resolves a pod's runtimeClassName to a CRI runtime
	// handler. nil makes pods that name a runtime class fail to start.
	RuntimeHandler func(ctx context.Context, runtimeClassName string) (string, error)

	// ContainerBackOff paces restarts of crashing containers
	// (CrashLoopBackOff); nil means 10s doubling to MaxContainerBackOff on
	// Clock, reset after a container ran for twice that. ImageBackOff
	// paces failed image pulls (ImagePullBackOff); nil means 10s doubling
	// to 5m.
	ContainerBackOff *flowcontrol.Backoff
	ImageBackOff     *flowcontrol.Backoff
	// MaxContainerBackOff caps the default ContainerBackOff (the kubelet's
	// crashLoopBackOff.maxContainerRestartPeriod); a cap under 10s is also
	// the first delay, as the kubelet's. 0 means DefaultMaxContainerBackOff.
	// Ignored when ContainerBackOff is set.
	MaxContainerBackOff time.Duration
	// MaxParallelImagePulls bounds concurrent image pulls: 0 or 1 pulls one
	// image at a time (the kubelet's serializeImagePulls default), n > 1 at
	// most n, a negative value any number.
	MaxParallelImagePulls int
	// MaxParallelPodStarts bounds how many pods create their sandbox and
	// start their containers at once (nodekit's own setting; the kubelet
	// starts every pod at once). A free turn goes to the pod bound to the
	// node earliest, so under a burst the first pods run while later ones
	// wait, instead of all of them finishing together at the end; a pod
	// gives its turn up while it pulls an image. Syncs that only stop
	// containers take no turn. 0 means DefaultMaxParallelPodStarts(), a
	// negative value no bound. With a Registerer, how long each turn was
	// waited for is the histogram nodekit_pod_start_turn_wait_seconds.
	MaxParallelPodStarts int
	// ImagePulls, when set, records which credentials pulled each image
	// and decides whether a pod may use an image present on the node
	// (KubeletEnsureSecretPulledImages; imagepull.Manager). nil uses a
	// present image for any pod, as the kubelet with the gate off.
	ImagePulls ImagePullManager
	// RegistryPullQPS and RegistryBurst rate-limit image pulls (the
	// kubelet's registryPullQPS and registryBurst); zero QPS means no limit.
	RegistryPullQPS float32
	RegistryBurst   int

	// ConfigMaps and Secrets fetch what containers' env and envFrom refer
	// to; Services lists the cluster's services for the service link
	// variables (KUBERNETES_SERVICE_HOST...). nil sources make containers
	// that need them wait with CreateContainerConfigError (Services: no
	// service variables).
	ConfigMaps func(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	Secrets    func(ctx context.Context, namespace, name string) (*v1.Secret, error)
	Services   func() ([]*v1.Service, error)
	// Allocatable returns the node's allocatable resources, which the
	// downward API reports for limits a container does not set.
	Allocatable func() v1.ResourceList
	// HTTPClient runs httpGet lifecycle hooks (default: a client that skips
	// TLS verification, as the kubelet's).
	HTTPClient *http.Client

	// ContainerGC is the policy GarbageCollect applies; nil means
	// DefaultContainerGCPolicy().
	ContainerGC *ContainerGCPolicy

	// Recorder receives the kubelet's events (Pulling, Created, Started,
	// Killing, BackOff, FailedCreatePodSandBox...). nil records nothing.
	Recorder record.EventRecorder
	// Clock paces back-offs, grace periods and hooks (default
	// clock.RealClock{}).
	Clock clock.Clock
	// Registerer registers kubelet_started_pods_total and friends; nil
	// registers nothing.
	Registerer prometheus.Registerer

	// ContainerConfigHook, when set, completes each container's CRI config
	// just before the container is created: the device manager adds the
	// envs, mounts, device nodes, annotations and CDI devices its plugins
	// allocated. An error fails the start with CreateContainerConfigError,
	// and the container is retried with back-off.
	ContainerConfigHook func(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error
	// ImageMounts records the images each container created mounts as
	// image volumes, for the image garbage collector (give both the same
	// one: ImageGCOptions.ImageMounts); nil records nothing (the image
	// GC then asks the runtime once per container).
	ImageMounts *ImageMounts

	// DynamicResources, when set, prepares a pod's ResourceClaims before
	// its sandbox is created (a failure records the kubelet's
	// FailedPrepareDynamicResources event and fails the sync: nothing of
	// the pod starts), adds their CDI devices to its containers' configs
	// (before ContainerConfigHook), and has them released by the Backend's
	// KillPod once the pod's containers stopped.
	DynamicResources DynamicResources

	// UserNamespaces, when set, gives each pod's sandbox and containers
	// their user namespace (*userns.Manager is one): the node's for most
	// pods, one of the pod's own for hostUsers: false, whose mappings also
	// idmap every mount of its containers, as the kubelet; the Backend
	// releases a pod's mappings once its containers stopped. A pod it
	// refuses (its runtime handler has no user namespaces) fails its
	// sandbox with FailedCreatePodSandBox. nil sends no user namespace
	// (the runtime's default, the node's) and fails the sandbox of a pod
	// with hostUsers: false.
	UserNamespaces UserNamespaces
}

// UserNamespaces is what pod syncing needs of the user namespace manager
// (*userns.Manager is one), as the kubelet's runtime helper.
type UserNamespaces interface {
	// PodUserNamespace returns the user namespace of pod's sandbox and
	// containers on runtime handler handler ("" is the default handler),
	// or why the pod cannot have it.
	PodUserNamespace(ctx context.Context, pod *v1.Pod, handler string) (*runtimeapi.UserNamespace, error)
	// Release frees pod uid's mappings; its containers are stopped.
	Release(ctx context.Context, uid types.UID)
}

// DynamicResources is what pod syncing needs of Dynamic Resource
// Allocation (*dra.Manager is one), as the kubelet's runtime helper.
// PrepareResources and UnprepareResources are called for one pod at a
// time and may be called again for the same pod; ApplyContainerConfig
// completes a container's CRI config from what PrepareResources prepared.
type DynamicResources interface {
	PrepareResources(ctx context.Context, pod *v1.Pod) error
	UnprepareResources(ctx context.Context, pod *v1.Pod) error
	ApplyContainerConfig(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error
}

// PodManager runs pods on a CRI runtime with the kubelet's semantics: it
// reads a pod's runtime status (GetPodStatus), brings the runtime in line
// with the pod's spec (SyncPod), stops pods (KillPod), finds the pods the
// runtime has (ListPods) and removes what is no longer needed (RemovePod,
// GarbageCollect).
//
// Calls for one pod must not overlap (the agent's pod worker serializes
// them); calls for different pods may run concurrently.
type PodManager struct {
	opts     PodManagerOptions
	gc       ContainerGCPolicy
	rs       cri.RuntimeService
	recorder record.EventRecorder
	clock    clock.Clock
	backOff  *flowcontrol.Backoff
	images   *imageManager
	starts   *startQueue // nil: no bound
	http     *http.Client
	metrics  *podMetrics
	cfsQuota bool

	mu          sync.Mutex
	runtimeName string
	reasons     map[types.UID]map[string]podstate.ContainerWaiting
	// actuated are, by container ID, the resources an in-place resize
	// applied to a running container since it was created (its
	// annotation records those it was created with).
	actuated map[string]*v1.ResourceRequirements
	// resizeErrors are, by pod, why its last in-place resize failed.
	resizeErrors map[types.UID]string
	// podLevel are, by pod, the pod-level resources its cgroup was last
	// given (at its sandbox's creation, then by in-place resizes); a pod
	// with pod-level resources missing here (the agent restarted) has its
	// cgroup set again at its next sync.
	podLevel map[types.UID]*v1.ResourceRequirements

	// machine holds the node facts container configs need, read once on
	// first use.
	machineOnce sync.Once
	machine     machineFacts
	machineErr  error
}

// machineFacts are the node facts container configs depend on.
type machineFacts struct {
	memoryCapacity int64
	cgroupV2       bool
	// swapController and swapCapacity are read with Swap set only.
	swapController bool
	swapCapacity   int64
}

// NewPodManager returns a PodManager for opts, applying defaults. It does
// no I/O: the node's memory (when MemoryCapacity is zero) and cgroup
// version are read when the first container is configured.
func NewPodManager(opts PodManagerOptions) (*PodManager, error) {
	if opts.Runtime == nil || opts.Images == nil {
		return nil, errors.New("pod manager: the CRI runtime and image services are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PodLogsDir == "" {
		opts.PodLogsDir = DefaultPodLogsDir
	}
	if opts.ContainerLogsDir == "" {
		opts.ContainerLogsDir = DefaultContainerLogsDir
	}
	if opts.PodsDir == "" {
		opts.PodsDir = DefaultPodsDir
	}
	if opts.HostsFile == "" {
		opts.HostsFile = DefaultHostsFile
	}
	if opts.SeccompProfileRoot == "" {
		opts.SeccompProfileRoot = DefaultSeccompProfileRoot
	}
	if opts.CPUCFSQuotaPeriod == 0 {
		opts.CPUCFSQuotaPeriod = DefaultCPUCFSQuotaPeriod
	}
	if opts.CPUCFSQuotaPeriod < time.Millisecond || opts.CPUCFSQuotaPeriod > time.Second {
		return nil, fmt.Errorf("pod manager: CPU CFS quota period %v is not within [1ms, 1s]", opts.CPUCFSQuotaPeriod)
	}
	if opts.MemoryCapacity < 0 {
		return nil, fmt.Errorf("pod manager: memory capacity %d is negative", opts.MemoryCapacity)
	}
	if opts.Swap != nil {
		if err := opts.Swap.validate(); err != nil {
			return nil, err
		}
	}
	if opts.ContainerBackOff == nil {
		limit := cmp.Or(opts.MaxContainerBackOff, DefaultMaxContainerBackOff)
		opts.ContainerBackOff = flowcontrol.NewFakeBackOff(min(DefaultContainerBackOff, limit), limit, opts.Clock)
	}
	if opts.ImageBackOff == nil {
		opts.ImageBackOff = flowcontrol.NewFakeBackOff(DefaultImageBackOff, DefaultMaxImageBackOff, opts.Clock)
	}
	recorder := opts.Recorder
	if recorder == nil {
		recorder = &record.FakeRecorder{}
	}
	httpClient := opts.HTTPClient
	if httpClient == nil {
		httpClient = defaultHookClient()
	}
	pm, err := newPodMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	m := &PodManager{
		opts:         opts,
		rs:           opts.Runtime,
		recorder:     recorder,
		clock:        opts.Clock,
		backOff:      opts.ContainerBackOff,
		http:         httpClient,
		metrics:      pm,
		cfsQuota:     opts.CPUCFSQuota == nil || *opts.CPUCFSQuota,
		runtimeName:  opts.RuntimeName,
		gc:           DefaultContainerGCPolicy(),
		reasons:      map[types.UID]map[string]podstate.ContainerWaiting{},
		actuated:     map[string]*v1.ResourceRequirements{},
		resizeErrors: map[types.UID]string{},
		podLevel:     map[types.UID]*v1.ResourceRequirements{},
	}
	if opts.ContainerGC != nil {
		m.gc = *opts.ContainerGC
	}
	if opts.MaxParallelPodStarts == 0 {
		opts.MaxParallelPodStarts = DefaultMaxParallelPodStarts()
	}
	m.opts.MaxParallelPodStarts = opts.MaxParallelPodStarts
	m.starts = newStartQueue(opts.MaxParallelPodStarts)
	m.images = newImageManager(opts.Images, opts.ImagePulls, recorder, opts.ImageBackOff, opts.Clock, opts.MaxParallelImagePulls, opts.RegistryPullQPS, opts.RegistryBurst)
	return m, nil
}

// machineFacts reads the node facts on first use and returns them.
func (m *PodManager) machineFacts() (machineFacts, error) {
	m.machineOnce.Do(func() {
		m.machine.memoryCapacity = m.opts.MemoryCapacity
		if m.machine.memoryCapacity == 0 {
			mem, err := readMeminfo("/proc/meminfo", "MemTotal")
			if err != nil {
				m.machineErr = fmt.Errorf("node memory capacity: %w", err)
				return
			}
			m.machine.memoryCapacity = mem
		}
		if m.opts.CgroupVersion != nil {
			v, err := m.opts.CgroupVersion()
			if err != nil {
				m.machineErr = fmt.Errorf("node cgroup version: %w", err)
				return
			}
			m.machine.cgroupV2 = v == 2
		}
		if m.opts.Swap != nil {
			if m.machine.swapController, m.machine.swapCapacity, m.machineErr = m.opts.Swap.swapFacts(m.machine.cgroupV2); m.machineErr != nil {
				return
			}
		}
	})
	return m.machine, m.machineErr
}

// runtimeType returns the runtime's name for container IDs, asking the
// runtime once if it was not configured.
func (m *PodManager) runtimeType(ctx context.Context) string {
	m.mu.Lock()
	name := m.runtimeName
	m.mu.Unlock()
	if name != "" {
		return name
	}
	resp, err := m.rs.Version(ctx, kubeRuntimeAPIVersion)
	if err != nil || resp.GetRuntimeName() == "" {
		return ""
	}
	m.mu.Lock()
	m.runtimeName = resp.GetRuntimeName()
	m.mu.Unlock()
	return resp.GetRuntimeName()
}

// ProbeResults gives SyncPod the liveness and startup verdicts it acts on:
// a running container whose liveness or startup probe failed is killed and
// restarted, and a sidecar (restartable init container) with a startup
// probe counts as started only once that probe succeeded. Keys are runtime
// container IDs (ContainerStatus.ID). Implementations must be safe for
// concurrent use and must not block. A nil ProbeResults means the node runs
// no probes: nothing is killed for probes and startup probes count as
// passed.
type ProbeResults interface {
	Liveness(containerID string) podstate.ProbeResult
	Startup(containerID string) podstate.ProbeResult
}

// SyncResult is the outcome of one SyncPod.
type SyncResult struct {
	// Waiting says why the pod's containers that should run do not, by
	// container name (init and regular): the reason of each container's
	// latest failed start (ErrImagePull, CrashLoopBackOff, ...), kept
	// across syncs until the container starts. The status generator turns
	// it into containers' Waiting states. The map belongs to the caller.
	Waiting map[string]podstate.ContainerWaiting
	// RetryAt, when not zero, is the earliest time a back-off that held a
	// container back ends: the pod worker should sync the pod again then.
	RetryAt time.Time
	// Err joins what went wrong in this sync (nil when everything that had
	// to happen did). errors.Is finds the Err* reasons in it, e.g.
	// ErrCrashLoopBackOff while a container backs off.
	Err error
	// Idle is set when the sync found nothing to do on the runtime: no
	// container or sandbox to kill, create or start. The pod's runtime
	// status is then as the sync found it.
	Idle bool
	// Status, when set, is the pod's runtime status read after the sync,
	// as GetPodStatus would read it: the runtime had nothing of the pod
	// and the sync created its sandbox and containers without an error,
	// so it read them by their IDs (one PodSandboxStatus, one
	// ContainerStatus each) without GetPodStatus's lists of the pod's
	// sandboxes and containers. nil otherwise. The caller owns it.
	Status *podstate.PodStatus
}

// podDesc is the kubelet's format.Pod: name_namespace(uid).
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// setReason records the outcome of a start attempt of container name: a
// failure is kept, a success forgets the previous failure.
func (m *PodManager) setReason(uid types.UID, name string, w *podstate.ContainerWaiting) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w == nil {
		if r := m.reasons[uid]; r != nil {
			delete(r, name)
			if len(r) == 0 {
				delete(m.reasons, uid)
			}
		}
		return
	}
	if m.reasons[uid] == nil {
		m.reasons[uid] = map[string]podstate.ContainerWaiting{}
	}
	m.reasons[uid][name] = *w
}

// waiting returns a copy of the recorded reasons of pod uid.
func (m *PodManager) waiting(uid types.UID) map[string]podstate.ContainerWaiting {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]podstate.ContainerWaiting, len(m.reasons[uid]))
	for k, v := range m.reasons[uid] {
		out[k] = v
	}
	return out
}

// forget drops what the PodManager remembers of pod uid.
// ImagePullTime returns how long the successful image pulls of the pod
// with uid took so far, waiting for a pull slot included (0 when its images
// were present), until RemovePod. The kubelet subtracts it from a pod's
// start time for kubelet_pod_start_sli_duration_seconds. Safe for
// concurrent use.
func (m *PodManager) ImagePullTime(uid types.UID) time.Duration { return m.images.pulled(uid) }

func (m *PodManager) forget(uid types.UID) {
	m.mu.Lock()
	delete(m.reasons, uid)
	delete(m.resizeErrors, uid)
	delete(m.podLevel, uid)
	m.mu.Unlock()
	m.images.forget(uid)
}
