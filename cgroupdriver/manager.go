package cgroupdriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// nodeAllocatableCgroupName is the name of the cgroup holding all pods.
	nodeAllocatableCgroupName = "kubepods"
	// podCgroupPrefix starts the name of every pod cgroup: "pod" + UID.
	podCgroupPrefix = "pod"
	// defaultQoSUpdateInterval is the kubelet's periodicQOSCgroupUpdateInterval.
	defaultQoSUpdateInterval = time.Minute
)

// Options configure a Manager. The zero value is the kubelet's defaults: the
// cgroupfs driver on /sys/fs/cgroup, cgroups per QoS class under "/", CFS
// quota enforced with a 100ms period, no pod pids limit.
type Options struct {
	// CgroupDriver is KubeletConfiguration cgroupDriver: DriverCgroupfs
	// (default) or DriverSystemd. Ignored when Driver is set.
	CgroupDriver string
	// Driver, when set, is used instead of building one from CgroupDriver,
	// FS and SystemdDial.
	Driver Driver
	// FS is the cgroup filesystem the built driver works on.
	FS FSOptions
	// SystemdDial opens the D-Bus connection of the built systemd driver.
	// Default: systemd over the system bus, or directly its private socket
	// when the bus is unavailable and the agent is root.
	SystemdDial func(ctx context.Context) (SystemdConn, error)

	// CgroupsPerQOS is KubeletConfiguration cgroupsPerQOS; nil means true.
	// When false the Manager creates nothing and EnsurePod returns "" (the
	// runtime's default parent), as the kubelet does.
	CgroupsPerQOS *bool
	// CgroupRoot is KubeletConfiguration cgroupRoot in cgroupfs form, the
	// parent of the kubepods cgroup. Default "/".
	CgroupRoot string
	// CPUCFSQuota is KubeletConfiguration cpuCFSQuota; nil means true.
	CPUCFSQuota *bool
	// CPUCFSQuotaPeriod is KubeletConfiguration cpuCFSQuotaPeriod, between
	// 1ms and 1s. Default 100ms.
	CPUCFSQuotaPeriod time.Duration
	// PodPidsLimit is KubeletConfiguration podPidsLimit; <= 0 sets none.
	PodPidsLimit int64

	// NodeAllocatable returns the resources enforced on the kubepods cgroup
	// (cpu, memory and pid; the node's allocatable when
	// enforceNodeAllocatable has "pods", its capacity otherwise). nil leaves
	// the kubepods limits as they are. It must not block.
	NodeAllocatable func() v1.ResourceList
	// ActivePods returns the pods the node runs; the Burstable QoS cgroup's
	// cpu shares are the sum of the CPU requests of the Burstable ones. nil
	// means none. It must not block and the Manager does not modify the
	// returned pods.
	ActivePods func() []*v1.Pod
	// RuntimeCgroupDriver, when set, is asked on Start which driver the
	// container runtime uses (the runtime package's Client.CgroupDriver has
	// this signature); ok false skips the check, and a mismatch with the
	// driver's Name fails Start, naming both drivers, as the kubelet's.
	RuntimeCgroupDriver func(ctx context.Context) (driver runtimeapi.CgroupDriver, ok bool, err error)
	// QoSUpdateInterval is how often Run refreshes the QoS cgroups. Default
	// a minute, the kubelet's periodicQOSCgroupUpdateInterval.
	QoSUpdateInterval time.Duration
	// KillProcess kills a process left in a pod cgroup being removed.
	// Default: SIGKILL, a vanished process is not an error.
	KillProcess func(pid int) error

	// Clock drives Run's refresh timer and times the operations for the
	// metrics. Default clock.RealClock{}.
	Clock clock.Clock
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
}

// NewDriver builds the Driver Options select: o.Driver when set, else the
// driver named by o.CgroupDriver over o.FS. It does not touch the node.
func NewDriver(o Options) (Driver, error) {
	if o.Driver != nil {
		return o.Driver, nil
	}
	switch o.CgroupDriver {
	case "", DriverCgroupfs:
		return newCgroupfs(o.FS)
	case DriverSystemd:
		return newSystemd(systemdOptions{FS: o.FS, Dial: o.SystemdDial})
	}
	return nil, fmt.Errorf("cgroup driver %q: must be %q or %q", o.CgroupDriver, DriverCgroupfs, DriverSystemd)
}

// QOSCgroups names the cgroups of the QoS hierarchy.
type QOSCgroups struct {
	// Guaranteed is the parent of Guaranteed pods: the kubepods cgroup.
	Guaranteed Name
	// Burstable is kubepods/burstable.
	Burstable Name
	// BestEffort is kubepods/besteffort.
	BestEffort Name
}

// Manager keeps the kubelet's pod cgroup hierarchy: the kubepods cgroup
// (node allocatable), the burstable and besteffort QoS cgroups under it, and
// one cgroup per pod under its QoS parent (Guaranteed pods directly under
// kubepods):
//
//	kubepods/pod<uid>               Guaranteed
//	kubepods/burstable/pod<uid>     Burstable
//	kubepods/besteffort/pod<uid>    BestEffort
//
// All methods are safe for concurrent use; callers serialize the calls for
// one pod (EnsurePod, UpdatePod, RemovePod).
type Manager struct {
	driver      Driver
	perQOS      bool
	qos         QOSCgroups
	podOpts     podResourceOptions
	allocatable func() v1.ResourceList
	activePods  func() []*v1.Pod
	runtimeDrv  func(ctx context.Context) (runtimeapi.CgroupDriver, bool, error)
	interval    time.Duration
	kill        func(pid int) error
	clock       clock.Clock
	metrics     *metrics

	startMu sync.Mutex
	started bool
	qosMu   sync.Mutex
}

// New returns a Manager for o with defaults applied. It validates o but does
// not touch the node: cgroups are created by Start, Run and EnsurePod.
func New(o Options) (*Manager, error) {
	d, err := NewDriver(o)
	if err != nil {
		return nil, err
	}
	period := o.CPUCFSQuotaPeriod
	if period == 0 {
		period = defaultCPUPeriod * time.Microsecond
	}
	if period < time.Millisecond || period > time.Second {
		return nil, fmt.Errorf("cpuCFSQuotaPeriod %v: must be between 1ms and 1s", period)
	}
	cgroupRoot := o.CgroupRoot
	if cgroupRoot == "" {
		cgroupRoot = "/"
	}
	root := ParseCgroupfs(cgroupRoot)
	kubepods, err := newName(root, nodeAllocatableCgroupName)
	if err != nil {
		return nil, fmt.Errorf("cgroupRoot %q: %w", cgroupRoot, err)
	}
	m := &Manager{
		driver: d,
		perQOS: o.CgroupsPerQOS == nil || *o.CgroupsPerQOS,
		qos: QOSCgroups{
			Guaranteed: kubepods,
			Burstable:  append(append(Name{}, kubepods...), strings.ToLower(string(v1.PodQOSBurstable))),
			BestEffort: append(append(Name{}, kubepods...), strings.ToLower(string(v1.PodQOSBestEffort))),
		},
		podOpts: podResourceOptions{
			EnforceCPULimits: o.CPUCFSQuota == nil || *o.CPUCFSQuota,
			CPUPeriod:        uint64(period / time.Microsecond),
			PodPidsLimit:     o.PodPidsLimit,
		},
		allocatable: o.NodeAllocatable,
		activePods:  o.ActivePods,
		runtimeDrv:  o.RuntimeCgroupDriver,
		interval:    o.QoSUpdateInterval,
		kill:        o.KillProcess,
		clock:       o.Clock,
	}
	if m.interval <= 0 {
		m.interval = defaultQoSUpdateInterval
	}
	if m.kill == nil {
		m.kill = killProcess
	}
	if m.clock == nil {
		m.clock = clock.RealClock{}
	}
	if m.metrics, err = newMetrics(o.Registerer); err != nil {
		return nil, err
	}
	return m, nil
}

func killProcess(pid int) error {
	if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill process %d: %w", pid, err)
	}
	return nil
}

// Driver returns the Manager's driver.
func (m *Manager) Driver() Driver { return m.driver }

// QOSCgroups returns the names of the QoS cgroups (whether or not they
// exist yet).
func (m *Manager) QOSCgroups() QOSCgroups { return m.qos }

// Start checks the runtime's cgroup driver (when Options.RuntimeCgroupDriver
// is set) and creates or updates the kubepods, burstable and besteffort
// cgroups with their current values. It may be called again (it redoes the
// work); with CgroupsPerQOS false it only checks the runtime.
func (m *Manager) Start(ctx context.Context) error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	return m.startLocked(ctx)
}

// ensureStarted runs Start unless it has succeeded before.
func (m *Manager) ensureStarted(ctx context.Context) error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	if m.started {
		return nil
	}
	return m.startLocked(ctx)
}

func (m *Manager) startLocked(ctx context.Context) error {
	if m.runtimeDrv != nil {
		drv, ok, err := m.runtimeDrv(ctx)
		if err != nil {
			return fmt.Errorf("cgroup manager: ask the runtime for its cgroup driver: %w", err)
		}
		if err := checkRuntimeDriver(m.driver.Name(), drv, ok); err != nil {
			return err
		}
	}
	if m.perQOS {
		if err := m.updateQoS(ctx, true); err != nil {
			return err
		}
	}
	m.started = true
	return nil
}

// Run starts the Manager (see Start) unless EnsurePod already did, and then
// refreshes the QoS cgroups every QoSUpdateInterval, until ctx is done, when
// it returns nil. A failed Start is returned; a failed refresh is logged and
// retried at the next tick, as the kubelet does.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := m.ensureStarted(ctx); err != nil {
		return err
	}
	if !m.perQOS {
		<-ctx.Done()
		return nil
	}
	for {
		timer := m.clock.NewTimer(m.interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
			if err := m.UpdateQoS(ctx); err != nil {
				logger.Error(err, "Failed to update QoS cgroups", "cgroup", m.qos.Guaranteed.String())
			}
		}
	}
}

// UpdateQoS applies the current values to the QoS cgroups: the node
// allocatable to kubepods, minShares to besteffort and the sum of the
// Burstable pods' CPU requests to burstable. The cgroups must exist (Start
// creates them). It is a no-op with CgroupsPerQOS false.
func (m *Manager) UpdateQoS(ctx context.Context) error {
	if !m.perQOS {
		return nil
	}
	return m.updateQoS(ctx, false)
}

func (m *Manager) updateQoS(ctx context.Context, create bool) error {
	m.qosMu.Lock()
	defer m.qosMu.Unlock()
	var kubepods ResourceConfig
	if m.allocatable != nil {
		kubepods = resourceConfigForAllocatable(m.allocatable())
	}
	bestEffortShares := uint64(minShares)
	burstableShares := milliCPUToShares(m.burstableCPURequests())
	apply := m.update
	if create {
		apply = m.create
	}
	// kubepods first: it is the parent of the other two.
	if err := apply(ctx, m.qos.Guaranteed, kubepods); err != nil {
		return fmt.Errorf("node allocatable cgroup: %w", err)
	}
	if err := apply(ctx, m.qos.Burstable, ResourceConfig{CPUShares: &burstableShares}); err != nil {
		return fmt.Errorf("burstable QoS cgroup: %w", err)
	}
	if err := apply(ctx, m.qos.BestEffort, ResourceConfig{CPUShares: &bestEffortShares}); err != nil {
		return fmt.Errorf("besteffort QoS cgroup: %w", err)
	}
	klog.FromContext(ctx).V(4).Info("Updated QoS cgroups", "cgroup", m.qos.Guaranteed.String(), "burstableShares", burstableShares)
	return nil
}

// burstableCPURequests sums the CPU requests, in millicores, of the active
// Burstable pods.
func (m *Manager) burstableCPURequests() int64 {
	if m.activePods == nil {
		return 0
	}
	var sum int64
	for _, pod := range m.activePods() {
		if pod == nil || PodQOS(pod) != v1.PodQOSBurstable {
			continue
		}
		if q, ok := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceCPU]; ok {
			sum += q.MilliValue()
		}
	}
	return sum
}

// PodCgroup returns the Name of pod's cgroup under its QoS parent. It fails
// when the pod has no UID or one that cannot be part of a cgroup name.
func (m *Manager) PodCgroup(pod *v1.Pod) (Name, error) {
	if pod == nil {
		return nil, errors.New("pod cgroup: nil pod")
	}
	var parent Name
	switch PodQOS(pod) {
	case v1.PodQOSGuaranteed:
		parent = m.qos.Guaranteed
	case v1.PodQOSBurstable:
		parent = m.qos.Burstable
	default:
		parent = m.qos.BestEffort
	}
	return podName(parent, pod.UID)
}

func podName(parent Name, uid types.UID) (Name, error) {
	if uid == "" {
		return nil, errors.New("pod cgroup: pod has no UID")
	}
	n, err := newName(parent, podCgroupPrefix+string(uid))
	if err != nil {
		return nil, fmt.Errorf("pod cgroup for UID %q: %w", uid, err)
	}
	return n, nil
}

// EnsurePod creates pod's cgroup with the pod's values (cpu shares from
// its CPU requests, a CFS quota and a memory limit from its limits when
// every container has one, the pod pids limit: the kubelet's
// ResourceConfigForPod)
// (and the QoS hierarchy first, when Start has not run yet) and returns the
// cgroup parent to give the container runtime for the pod's sandbox: the
// driver's literal form (a cgroupfs path or an expanded systemd slice). An
// existing pod cgroup is left as it is, as the kubelet does (UpdatePod
// changes its values). With CgroupsPerQOS false it returns "" and creates
// nothing. pod is not modified.
func (m *Manager) EnsurePod(ctx context.Context, pod *v1.Pod) (string, error) {
	if !m.perQOS {
		return "", nil
	}
	name, err := m.PodCgroup(pod)
	if err != nil {
		return "", err
	}
	if err := m.ensureStarted(ctx); err != nil {
		return "", fmt.Errorf("ensure cgroup of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	exists, err := m.driver.Exists(ctx, name)
	if err != nil {
		return "", fmt.Errorf("ensure cgroup of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if !exists {
		rc := resourceConfigForPod(pod, m.podOpts)
		if err := m.create(ctx, name, rc); err != nil {
			return "", fmt.Errorf("create cgroup of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		// The kubelet logs no pod cgroup's creation; at 4 here, the
		// arguments formatted only then (one line per pod start at --v=2
		// was ~0.4 % of a burst's CPU).
		if logger := klog.FromContext(ctx).V(4); logger.Enabled() {
			logger.Info("Created pod cgroup", "pod", klog.KObj(pod), "podUID", pod.UID, "cgroup", name.String(), "resources", rc.String())
		}
	}
	return m.driver.Literal(name), nil
}

// UpdatePod applies the pod's values (see EnsurePod) to its existing
// cgroup (after an in-place resize, for example). It is a no-op with
// CgroupsPerQOS false. pod is not modified.
func (m *Manager) UpdatePod(ctx context.Context, pod *v1.Pod) error {
	if !m.perQOS {
		return nil
	}
	name, err := m.PodCgroup(pod)
	if err != nil {
		return err
	}
	if err := m.update(ctx, name, resourceConfigForPod(pod, m.podOpts)); err != nil {
		return fmt.Errorf("update cgroup of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// RemovePod removes the cgroup of the pod with uid, under whichever QoS
// parent it is, with every cgroup a runtime left below it. Call it once the
// pod's containers are gone: a process still found there is killed first,
// and while killed processes are still exiting the removal fails (wrapping
// unix.EBUSY) and should be retried. A pod without a cgroup is not an
// error. It is a no-op with CgroupsPerQOS false.
func (m *Manager) RemovePod(ctx context.Context, uid types.UID) error {
	if !m.perQOS {
		return nil
	}
	logger := klog.FromContext(ctx)
	var errs []error
	for _, parent := range []Name{m.qos.Guaranteed, m.qos.Burstable, m.qos.BestEffort} {
		name, err := podName(parent, uid)
		if err != nil {
			return err
		}
		children, err := m.driver.Children(ctx, parent)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !containsName(children, name) {
			continue
		}
		if err := m.killAll(ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := m.destroy(ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		logger.V(2).Info("Removed pod cgroup", "podUID", uid, "cgroup", name.String())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove cgroup of pod %s: %w", uid, err)
	}
	return nil
}

// killAll kills the processes left in name.
func (m *Manager) killAll(ctx context.Context, name Name) error {
	pids, err := m.driver.Pids(ctx, name)
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		klog.FromContext(ctx).V(3).Info("Killing process left in pod cgroup", "cgroup", name.String(), "pid", pid)
		if err := m.kill(pid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func containsName(list []Name, n Name) bool {
	for _, l := range list {
		if l.Equal(n) {
			return true
		}
	}
	return false
}

// ListPods returns the pods that have a cgroup in the hierarchy, by UID, so
// that the cgroups of pods the node no longer runs can be removed (on
// startup, for example). With CgroupsPerQOS false it returns an empty map.
// The map is the caller's.
func (m *Manager) ListPods(ctx context.Context) (map[types.UID]Name, error) {
	pods := map[types.UID]Name{}
	if !m.perQOS {
		return pods, nil
	}
	for _, parent := range []Name{m.qos.Guaranteed, m.qos.Burstable, m.qos.BestEffort} {
		children, err := m.driver.Children(ctx, parent)
		if err != nil {
			return nil, fmt.Errorf("list pod cgroups under %s: %w", parent, err)
		}
		for _, c := range children {
			uid, ok := strings.CutPrefix(c[len(c)-1], podCgroupPrefix)
			if !ok || uid == "" {
				continue
			}
			pods[types.UID(uid)] = c
		}
	}
	return pods, nil
}

// create, update and destroy call the driver and record the metrics.
func (m *Manager) create(ctx context.Context, name Name, r ResourceConfig) error {
	start := m.clock.Now()
	err := m.driver.Create(ctx, name, r)
	m.metrics.observe(opCreate, start, m.clock.Now(), err)
	return err
}

func (m *Manager) update(ctx context.Context, name Name, r ResourceConfig) error {
	start := m.clock.Now()
	err := m.driver.Update(ctx, name, r)
	m.metrics.observe(opUpdate, start, m.clock.Now(), err)
	return err
}

func (m *Manager) destroy(ctx context.Context, name Name) error {
	start := m.clock.Now()
	err := m.driver.Destroy(ctx, name)
	m.metrics.observe(opDestroy, start, m.clock.Now(), err)
	return err
}
