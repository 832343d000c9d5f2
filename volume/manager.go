package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/timers"
	"github.com/nodekit/nodekit/ticks"
)

// Defaults and constants of the Manager, the kubelet's where it has them.
const (
	// DefaultResyncPeriod is how often mounted configMap, secret,
	// downwardAPI and projected volumes are rewritten from their sources
	// even when no change was seen (the kubelet's syncFrequency).
	DefaultResyncPeriod = time.Minute
	// DefaultCleanupPeriod is how often volumes of pods nobody knows are
	// looked for on disk (the kubelet's housekeeping period).
	DefaultCleanupPeriod = 2 * time.Second
	// settledCleanupPeriod is how often the disk is looked at once a look
	// found nothing that may become an orphan (every pod directory belongs
	// to a pod the Manager mounts): a pod the Manager forgets brings the
	// next look within CleanupPeriod, so this is only a safety net, and an
	// idle node does not read its pods directory every two seconds.
	settledCleanupPeriod = time.Minute
	// podAttachAndMountTimeout is how long the kubelet waits for a pod's
	// volumes before reporting "Unable to attach or mount volumes".
	podAttachAndMountTimeout = 2*time.Minute + 3*time.Second
	// Failed setups of a volume are retried after 500 ms doubling to
	// 2m2s, the kubelet's operation back-off.
	initialRetryDelay = 500 * time.Millisecond
	maxRetryDelay     = 2*time.Minute + 2*time.Second
	// tokenGCPeriod is how often expired tokens are forgotten.
	tokenGCPeriod = time.Minute
	// eventFailedMount is the reason of mount failure events.
	eventFailedMount = "FailedMount"
)

// Options configures a Manager. RootDir is required.
type Options struct {
	// RootDir is the agent's state directory (the kubelet's --root-dir);
	// pod volumes live in <RootDir>/pods/<uid>/volumes.
	RootDir string
	// Client reads configMaps and secrets (list and watch, get) and
	// requests service-account tokens (serviceaccounts/token create).
	// nil makes volumes that need the API fail to mount.
	Client kubernetes.Interface
	// NodeName names the node in logs.
	NodeName string
	// Plugins are added to the built-in plugins; one with a built-in
	// plugin's Name replaces it.
	Plugins []Plugin
	// Recorder receives the pods' FailedMount events. nil records none.
	Recorder record.EventRecorder
	// Clock paces retries, resyncs and token refreshes (default
	// clock.RealClock{}).
	Clock clock.Clock
	// Align moves the rounds of the resync, the orphans' cleanup and the
	// tokens' cleanup to the node's shared ticks (package ticks; nil waits
	// each period exactly).
	Align ticks.Align
	// Registerer registers volume_manager_total_volumes and
	// storage_operation_duration_seconds; nil registers nothing.
	Registerer prometheus.Registerer
	// Mounter mounts tmpfs and subPath bind mounts and detects mount
	// points (default mount.New(""), which runs mount(8) and reads
	// /proc/self/mountinfo).
	Mounter mount.Interface
	// NodeAllocatable returns the node's allocatable resources: the size
	// of memory-backed volumes and the downward API's default limits. nil
	// means unknown.
	NodeAllocatable func() v1.ResourceList
	// PodKnown reports whether the agent still knows pod uid: it is to
	// run, or it is stopping and UnmountPod will be called, or the runtime
	// still has its containers. The Manager removes the volumes of pods
	// it finds on disk that it did not mount and that PodKnown does not
	// know. nil disables that cleanup (the Manager cannot tell an orphan
	// from a running pod not synced yet after a restart).
	PodKnown func(uid types.UID) bool
	// SourcesReady reports whether the pod lifecycle loop has handled the
	// first update of every pod source (pods.Store.SourcesReady);
	// until then no orphan is removed. nil means ready.
	SourcesReady func() bool
	// ResyncPeriod (default DefaultResyncPeriod) and CleanupPeriod
	// (default DefaultCleanupPeriod) pace Run. The cleanup runs every
	// CleanupPeriod while a pod directory on disk is not one the Manager
	// mounts, and within CleanupPeriod of the Manager forgetting a pod
	// (UnmountPod); otherwise once a minute.
	ResyncPeriod  time.Duration
	CleanupPeriod time.Duration
	// NodeLabels returns the node's labels, against which a
	// PersistentVolume's nodeAffinity is checked before it is mounted. nil
	// (or a nil answer) means no label: a PV with a required node
	// affinity does not mount.
	NodeLabels func() map[string]string
	// TmpfsNoswap says whether tmpfs volumes are mounted with noswap; nil
	// means when the kernel supports it (Linux 6.4 or later, outside a
	// user namespace), as the kubelet.
	TmpfsNoswap *bool
}

var _ Host = (*Manager)(nil)

// Manager sets up the volumes of the node's pods and tears them down, as
// the kubelet's volume manager does for the volume kinds that need no
// storage driver. See the package documentation.
//
// Its methods are safe for concurrent use. Calls for one pod are
// serialized.
type Manager struct {
	opts     Options
	clock    clock.Clock
	mounter  mount.Interface
	podsDir  string
	plugins  []Plugin
	byName   map[string]Plugin
	objects  *objectCache
	tokens   *tokenManager
	metrics  *metrics
	recorder record.EventRecorder
	kick     chan struct{}
	// forgot wakes Run when a pod is forgotten: its directory is to be
	// cleaned up within CleanupPeriod.
	forgot chan struct{}
	synced atomic.Bool

	mu sync.Mutex
	// pods is the desired state: the pods MountPod was called for and
	// UnmountPod was not (and orphans being cleaned up).
	pods map[types.UID]*podState
	// found are volumes found on disk at start that no MountPod has set
	// up again: pod UID → volume name → plugin name.
	found map[types.UID]map[string]string
	// foundInUse are the unique names of the found volumes reported in
	// status.volumesInUse while they are found (DiskInUseReporter).
	foundInUse map[types.UID]map[string]v1.UniqueVolumeName
	// dirty are the pods whose remountable volumes are to be set up again.
	dirty map[types.UID]bool
	// orphanErrs are the last cleanup errors of orphaned pods, so a
	// repeated error is logged once.
	orphanErrs map[types.UID]string
}

// podState is the Manager's record of one pod. Its fields are guarded by
// Manager.mu; lock serializes the pod's setups and teardowns.
type podState struct {
	lock sync.Mutex

	pod     *v1.Pod
	volumes map[string]*volumeState
	refs    []objectKey
	// removed is set, under lock, once the pod's entry left Manager.pods.
	removed bool
	// failingSince is when MountPod first failed since its last success;
	// lastSummary when it last recorded "Unable to attach or mount".
	failingSince time.Time
	lastSummary  time.Time
}

// volumeState is one volume of a pod. Its fields are guarded by
// Manager.mu.
type volumeState struct {
	spec v1.Volume
	// plugin is nil for a claim not resolved yet.
	plugin Plugin
	// name is the volume's spec name (VolumeContext.Name): the pod
	// volume's, or the PV's once a claim is resolved.
	name string
	// pv and pvc are the resolved claim's, readOnly the pod's
	// persistentVolumeClaim.readOnly.
	pv       *v1.PersistentVolume
	pvc      *v1.PersistentVolumeClaim
	readOnly bool
	mounted  bool
	out      Mounted
	// err is the last setup's error; no setup is tried before notBefore.
	err       error
	notBefore time.Time
	delay     time.Duration
}

// New checks opts, applies defaults and builds the Manager. It does no
// I/O; Run starts the watches and the reconciler.
func New(opts Options) (*Manager, error) {
	if opts.RootDir == "" {
		return nil, errors.New("volume manager: RootDir is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Mounter == nil {
		opts.Mounter = mount.New("")
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = DefaultResyncPeriod
	}
	if opts.CleanupPeriod <= 0 {
		opts.CleanupPeriod = DefaultCleanupPeriod
	}
	m := &Manager{
		opts:     opts,
		clock:    opts.Clock,
		mounter:  opts.Mounter,
		podsDir:  filepath.Join(opts.RootDir, "pods"),
		byName:   map[string]Plugin{},
		tokens:   newTokenManager(opts.Client, opts.Clock),
		recorder: opts.Recorder,
		kick:     make(chan struct{}, 1),
		forgot:   make(chan struct{}, 1),
		pods:     map[types.UID]*podState{},
		found:    map[types.UID]map[string]string{},

		foundInUse: map[types.UID]map[string]v1.UniqueVolumeName{},
		dirty:      map[types.UID]bool{},

		orphanErrs: map[types.UID]string{},
	}
	m.objects = newObjectCache(opts.Client, opts.Clock, m.objectChanged)
	noswap := tmpfsNoswap(opts.TmpfsNoswap)
	builtin := []Plugin{
		&emptyDirPlugin{noswap: noswap},
		hostPathPlugin{},
		localPlugin{},
		&configMapPlugin{atomicVolume{medium: v1.StorageMediumDefault, noswap: noswap}},
		&secretPlugin{atomicVolume{medium: v1.StorageMediumMemory, noswap: noswap}},
		&downwardAPIPlugin{atomicVolume{medium: v1.StorageMediumMemory, noswap: noswap}},
		&projectedPlugin{atomicVolume{medium: v1.StorageMediumMemory, noswap: noswap}},
		imagePlugin{},
	}
	custom := map[string]bool{}
	for _, p := range opts.Plugins {
		if p == nil {
			continue
		}
		if custom[p.Name()] {
			return nil, fmt.Errorf("volume manager: two plugins named %q", p.Name())
		}
		custom[p.Name()] = true
	}
	for _, p := range builtin {
		if !custom[p.Name()] {
			m.plugins = append(m.plugins, p)
		}
	}
	for _, p := range opts.Plugins {
		if p != nil {
			m.plugins = append(m.plugins, p)
		}
	}
	for _, p := range m.plugins {
		m.byName[p.Name()] = p
	}
	var err error
	if m.metrics, err = newMetrics(opts.Registerer, m); err != nil {
		return nil, fmt.Errorf("volume manager: register metrics: %w", err)
	}
	return m, nil
}

// MountPod sets up every volume of pod that one of its containers mounts
// and returns them by volume name, for the runtime to mount; it must be
// called before the pod's containers are created, on every sync of the
// pod. It blocks until the volumes are set up or one fails.
//
// It is idempotent and cheap for a pod whose volumes are set up: no I/O,
// the mounted volumes are returned at once; a change of the pod (its
// labels, say) makes Run rewrite its downwardAPI and projected volumes in
// the background. A volume that failed is retried after a back-off (500 ms
// doubling to 2m2s, reset when a configMap or secret it uses changes);
// until then MountPod returns its last error at once.
//
// On failure it returns nil and a *MountError in the kubelet's words
// naming every volume not mounted and why, e.g.
//
//	unmounted volumes=[config data], unattached volumes=[], failed to process volumes=[data]:
//	MountVolume.SetUp failed for volume "config" : configmap "app" not found; failed to get
//	Plugin from volumeSpec for volume "data" err=no volume plugin matched: persistentVolumeClaim
//	volumes are not supported by this node agent
//
// and records FailedMount Warning events on the pod: "MountVolume.SetUp
// failed for volume ..." for each failed setup, and "Unable to attach or
// mount volumes: <the error>" when a volume has no plugin (at once) or the
// pod has waited for its volumes for 2m3s, as the kubelet (then at most
// every 2m3s). The returned map is the caller's.
func (m *Manager) MountPod(ctx context.Context, pod *v1.Pod) (map[string]Mounted, error) {
	ps := m.lockPod(pod.UID, true)
	defer ps.lock.Unlock()
	logger := klog.FromContext(ctx)

	used := usedVolumes(pod)
	refs := podReferences(pod)
	m.mu.Lock()
	oldRefs := ps.refs
	changed := ps.pod != nil && !samePodContent(ps.pod, pod)
	ps.pod = pod
	ps.refs = refs
	m.mu.Unlock()
	for _, k := range refs {
		m.objects.addReference(k, pod.UID)
	}
	for _, k := range oldRefs {
		m.objects.deleteReference(k, pod.UID)
	}

	result := map[string]Mounted{}
	var unmounted, unattached, unprocessed, causes []string
	// noPlugin is set when a volume can never mount on this node: the
	// summary event is recorded at once.
	noPlugin := false
	// retryAt is the earliest back-off end of the failed volumes.
	var retryAt time.Time
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if !used[vol.Name] {
			continue
		}
		m.mu.Lock()
		vs := ps.volumes[vol.Name]
		if vs == nil {
			vs = &volumeState{spec: *vol, name: vol.Name}
			if !isClaim(vol) {
				plugin, err := m.findPlugin(vol)
				if err != nil {
					m.mu.Unlock()
					unmounted = append(unmounted, vol.Name)
					unprocessed = append(unprocessed, vol.Name)
					causes = append(causes, err.Error())
					noPlugin = true
					continue
				}
				vs.plugin = plugin
			}
			ps.volumes[vol.Name] = vs
		}
		if vs.mounted {
			if _, ok := vs.plugin.(Remounter); ok && changed {
				m.dirty[pod.UID] = true
				m.kickLocked()
			}
			result[vol.Name] = vs.out
			m.mu.Unlock()
			continue
		}
		if vs.err != nil && m.clock.Now().Before(vs.notBefore) {
			unmounted = append(unmounted, vol.Name)
			if vs.plugin == nil {
				unprocessed = append(unprocessed, vol.Name)
			}
			if ua := (*UnattachedError)(nil); errors.As(vs.err, &ua) {
				unattached = append(unattached, vol.Name)
			}
			causes = append(causes, vs.err.Error())
			retryAt = timers.Earliest(retryAt, vs.notBefore)
			m.mu.Unlock()
			continue
		}
		if vs.plugin == nil {
			m.mu.Unlock()
			c, err := m.resolveClaim(ctx, pod, vol)
			if err != nil && ctx.Err() != nil {
				return nil, fmt.Errorf("mount volumes of pod %s/%s: %w", pod.Namespace, pod.Name, ctx.Err())
			}
			m.mu.Lock()
			if err != nil {
				// The kubelet's populator retries a claim it could not
				// process on its next pass, with no event but the
				// summary after the pod's timeout.
				var unsupported *unsupportedError
				if errors.As(err, &unsupported) {
					noPlugin = true
				} else {
					vs.err = err
					vs.delay = min(max(2*vs.delay, initialRetryDelay), maxClaimRetryDelay)
					vs.notBefore = m.clock.Now().Add(vs.delay)
					retryAt = timers.Earliest(retryAt, vs.notBefore)
				}
				m.mu.Unlock()
				logger.V(2).Info("Error processing volume", "pod", klog.KObj(pod), "volume", vol.Name, "err", err)
				unmounted = append(unmounted, vol.Name)
				unprocessed = append(unprocessed, vol.Name)
				causes = append(causes, err.Error())
				continue
			}
			vs.plugin, vs.name, vs.pv, vs.pvc, vs.readOnly = c.plugin, c.pv.Name, c.pv, c.pvc, c.readOnly
			vs.err, vs.delay = nil, 0
		}
		vc := m.stateContext(pod.UID, vs)
		vc.Pod = pod
		plugin := vs.plugin
		m.mu.Unlock()

		out, err := m.setUp(ctx, vc, plugin)
		if err != nil && ctx.Err() != nil {
			// The caller gave up (shutdown): not the volume's failure.
			return nil, fmt.Errorf("mount volumes of pod %s/%s: %w", pod.Namespace, pod.Name, ctx.Err())
		}
		m.mu.Lock()
		if err != nil {
			msg := fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", vs.name, err)
			ua := (*UnattachedError)(nil)
			isUnattached := errors.As(err, &ua)
			if op := (*OperationError)(nil); errors.As(err, &op) {
				msg = op.Error()
			} else if isUnattached {
				msg = ua.Error()
			}
			if isUnattached {
				vs.err = &UnattachedError{Message: msg}
			} else {
				vs.err = errors.New(msg)
			}
			vs.delay = min(max(2*vs.delay, initialRetryDelay), maxRetryDelay)
			vs.notBefore = m.clock.Now().Add(vs.delay)
			retryAt = timers.Earliest(retryAt, vs.notBefore)
			m.mu.Unlock()
			unmounted = append(unmounted, vol.Name)
			causes = append(causes, msg)
			if isUnattached {
				// Waiting for the attach/detach controller is no
				// failure of the volume: logged, not an event.
				logger.V(2).Info("Volume not attached yet", "pod", klog.KObj(pod), "volume", vol.Name, "reason", msg)
				unattached = append(unattached, vol.Name)
				continue
			}
			logger.Error(err, "MountVolume.SetUp failed", "pod", klog.KObj(pod), "volume", vol.Name)
			m.event(pod, msg)
			continue
		}
		vs.mounted, vs.out, vs.err, vs.delay = true, out, nil, 0
		if f := m.found[pod.UID]; f != nil {
			delete(f, vs.name)
		}
		m.mu.Unlock()
		logger.V(3).Info("MountVolume.SetUp succeeded", "pod", klog.KObj(pod), "volume", vs.name)
		result[vol.Name] = out
	}

	if len(unmounted) == 0 {
		m.mu.Lock()
		ps.failingSince, ps.lastSummary = time.Time{}, time.Time{}
		m.mu.Unlock()
		return result, nil
	}
	slices.Sort(unmounted)
	slices.Sort(unprocessed)
	slices.Sort(unattached)
	if unattached == nil {
		unattached = []string{}
	}
	err := &MountError{retryAt: retryAt, msg: fmt.Sprintf("unmounted volumes=%v, unattached volumes=%v, failed to process volumes=%v: %s",
		unmounted, unattached, unprocessed, strings.Join(causes, "; "))}
	now := m.clock.Now()
	m.mu.Lock()
	if ps.failingSince.IsZero() {
		ps.failingSince = now
	}
	summary := false
	if ps.lastSummary.IsZero() {
		summary = noPlugin || now.Sub(ps.failingSince) >= podAttachAndMountTimeout
	} else {
		summary = now.Sub(ps.lastSummary) >= podAttachAndMountTimeout
	}
	if summary {
		ps.lastSummary = now
	}
	m.mu.Unlock()
	if summary {
		m.event(pod, "Unable to attach or mount volumes: "+err.Error())
	}
	return nil, err
}

// MountError is MountPod's error: which volumes are not mounted and why,
// and when the next try may succeed.
type MountError struct {
	msg     string
	retryAt time.Time
}

// Error returns the kubelet's message.
func (e *MountError) Error() string { return e.msg }

// RetryAt returns the earliest time a failed volume is set up again (its
// back-off ends): a caller syncing the pod sooner gets the same error, one
// syncing later may succeed, as the kubelet's reconciler retries each
// volume on its own back-off. It is zero when no volume will be retried
// by itself (a volume without a plugin).
func (e *MountError) RetryAt() time.Time { return e.retryAt }

// UnmountPod tears down every volume of pod uid, which must have no
// container left running: subPath bind mounts are unmounted, tmpfs
// volumes unmounted, the volumes' directories removed (never through a
// mount point), and the pod's configMap and secret watches and tokens
// released. It tears down what it finds on disk as well, so it works for
// a pod the Manager did not mount since it started. It leaves the pod's
// directory itself (and the runtime's files in it). It is idempotent; on
// error the pod stays known and the call can be repeated.
func (m *Manager) UnmountPod(ctx context.Context, uid types.UID) error {
	ps := m.lockPod(uid, true)
	defer ps.lock.Unlock()
	if err := m.tearDownPod(ctx, uid, ps); err != nil {
		return fmt.Errorf("unmount volumes of pod %s: %w", uid, err)
	}
	m.forgetPod(uid, ps)
	return nil
}

// lockPod returns the pod's state locked. A missing state is created when
// create is set; otherwise lockPod returns nil for a pod the Manager does
// not mount (or forgot while lockPod waited for its lock).
func (m *Manager) lockPod(uid types.UID, create bool) *podState {
	for {
		m.mu.Lock()
		ps := m.pods[uid]
		if ps == nil && create {
			ps = &podState{volumes: map[string]*volumeState{}}
			m.pods[uid] = ps
		}
		m.mu.Unlock()
		if ps == nil {
			return nil
		}
		ps.lock.Lock()
		m.mu.Lock()
		removed := ps.removed
		m.mu.Unlock()
		if !removed {
			return ps
		}
		ps.lock.Unlock()
		if !create {
			return nil
		}
	}
}

// forgetPod removes the pod from the desired state; ps must be locked.
func (m *Manager) forgetPod(uid types.UID, ps *podState) {
	m.mu.Lock()
	refs := ps.refs
	ps.removed = true
	delete(m.pods, uid)
	delete(m.found, uid)
	delete(m.foundInUse, uid)
	delete(m.dirty, uid)
	m.mu.Unlock()
	select {
	case m.forgot <- struct{}{}:
	default:
	}
	for _, k := range refs {
		m.objects.deleteReference(k, uid)
	}
	m.tokens.deletePod(uid)
}

// setUp runs the plugin's SetUp for one volume of pod vc.Pod, after the
// node affinity check of a PV.
func (m *Manager) setUp(ctx context.Context, vc *VolumeContext, plugin Plugin) (Mounted, error) {
	pod := vc.Pod
	if sc := pod.Spec.SecurityContext; sc != nil {
		vc.FSGroup = sc.FSGroup
	}
	vc.FSUser = fsUserFrom(pod)
	if vc.PV != nil {
		if err := m.checkNodeAffinity(vc.PV); err != nil {
			return Mounted{}, &OperationError{fmt.Sprintf("MountVolume.NodeAffinity check failed for volume %q : %v", vc.Name, err)}
		}
	}
	if err := m.makePodDirs(pod.UID); err != nil {
		return Mounted{}, err
	}
	start := m.clock.Now()
	out, err := plugin.SetUp(ctx, vc)
	m.metrics.observe(plugin.Name(), opMount, err, m.clock.Since(start))
	return out, err
}

// stateContext returns the context of volume vs of pod uid, Pod unset;
// m.mu is held.
func (m *Manager) stateContext(uid types.UID, vs *volumeState) *VolumeContext {
	vc := m.volumeContext(uid, vs.name, vs.plugin)
	spec := vs.spec
	vc.Volume, vc.PV, vc.PVC, vc.ReadOnly = &spec, vs.pv, vs.pvc, vs.readOnly
	return vc
}

// makePodDirs creates the pod's directory and its volumes and plugins
// directories 0750, as the kubelet's makePodDataDirs, before a plugin
// creates a volume's path beneath them with its own (wider) mode.
func (m *Manager) makePodDirs(uid types.UID) error {
	podDir := filepath.Join(m.podsDir, string(uid))
	for _, dir := range []string{podDir, filepath.Join(podDir, "volumes"), filepath.Join(podDir, "plugins")} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create the directory of pod %s: %w", uid, err)
		}
	}
	return nil
}

// volumeContext returns the context of a volume without pod and spec.
func (m *Manager) volumeContext(uid types.UID, name string, plugin Plugin) *VolumeContext {
	esc := escapePluginName(plugin.Name())
	podDir := filepath.Join(m.podsDir, string(uid))
	return &VolumeContext{
		PodUID:    uid,
		Name:      name,
		Path:      filepath.Join(podDir, "volumes", esc, name),
		PluginDir: filepath.Join(podDir, "plugins", esc),
		Host:      m,
	}
}

// findPlugin returns the one plugin supporting vol.
func (m *Manager) findPlugin(vol *v1.Volume) (Plugin, error) {
	var matched []Plugin
	for _, p := range m.plugins {
		if p.CanSupport(vol) {
			matched = append(matched, p)
		}
	}
	switch len(matched) {
	case 1:
		return matched[0], nil
	case 0:
		return nil, fmt.Errorf("failed to get Plugin from volumeSpec for volume %q err=no volume plugin matched: %s volumes are not supported by this node agent",
			vol.Name, volumeKind(vol))
	}
	names := make([]string, len(matched))
	for i, p := range matched {
		names[i] = p.Name()
	}
	return nil, fmt.Errorf("failed to get Plugin from volumeSpec for volume %q err=multiple volume plugins matched: %s",
		vol.Name, strings.Join(names, ","))
}

// Run runs the reconciler until ctx is done: it starts the configMap and
// secret watches, records the volumes it finds on disk, then rewrites
// remountable volumes when their sources change and every ResyncPeriod,
// refreshing tokens, and every CleanupPeriod tears down the volumes of
// pods nobody knows (see Options.PodKnown). It returns nil when ctx is
// done.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	m.objects.start(ctx)
	defer m.objects.stop()
	if err := m.reconstruct(); err != nil {
		logger.Error(err, "Failed to read the pods' volumes from disk")
	}
	m.reconstructInUse(ctx)
	m.synced.Store(true)
	if m.opts.PodKnown == nil {
		logger.Info("Volumes of pods the agent does not know are not cleaned up: no PodKnown function")
	}
	cleanupPeriod := func(pending bool) time.Duration {
		if pending {
			return m.opts.CleanupPeriod
		}
		return max(settledCleanupPeriod, m.opts.CleanupPeriod)
	}
	period := cleanupPeriod(m.cleanupOrphans(ctx))

	resync := m.clock.NewTimer(m.opts.Align.Wait(m.opts.ResyncPeriod))
	defer resync.Stop()
	cleanup := m.clock.NewTimer(m.opts.Align.Wait(period))
	defer cleanup.Stop()
	tokenGC := m.clock.NewTimer(m.opts.Align.Wait(tokenGCPeriod))
	defer tokenGC.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.kick:
			m.remountDirty(ctx)
		case <-resync.C():
			// The next resync is armed first: a period counts from the
			// start of a resync, and whoever sees this one's work (a
			// remount) knows the next is already waiting.
			resync.Reset(m.opts.Align.Wait(m.opts.ResyncPeriod))
			m.mu.Lock()
			for uid := range m.pods {
				m.dirty[uid] = true
			}
			m.mu.Unlock()
			m.remountDirty(ctx)
			m.expandClaims(ctx)
		case <-m.forgot:
			if period != m.opts.CleanupPeriod {
				period = m.opts.CleanupPeriod
				timers.Stop(cleanup)
				cleanup.Reset(m.opts.Align.Wait(period))
			}
		case <-cleanup.C():
			period = cleanupPeriod(m.cleanupOrphans(ctx))
			cleanup.Reset(m.opts.Align.Wait(period))
		case <-tokenGC.C():
			m.tokens.cleanup()
			tokenGC.Reset(m.opts.Align.Wait(tokenGCPeriod))
		}
	}
}

// kickLocked wakes Run; m.mu must be held.
func (m *Manager) kickLocked() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// objectChanged marks the pods referencing a changed configMap or secret
// for a remount and lets their failed volumes be retried at once.
func (m *Manager) objectChanged(key objectKey) {
	uids := m.objects.referencedBy(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, uid := range uids {
		ps := m.pods[uid]
		if ps == nil {
			continue
		}
		// Only the volumes the object feeds are tried again at once; the
		// others keep their back-off.
		for _, vs := range ps.volumes {
			if volumeReads(&vs.spec.VolumeSource, key) {
				vs.notBefore = time.Time{}
			}
		}
		m.dirty[uid] = true
	}
	if len(uids) > 0 {
		m.kickLocked()
	}
}

// remountDirty sets up again the mounted remountable volumes of the pods
// marked dirty.
func (m *Manager) remountDirty(ctx context.Context) {
	m.mu.Lock()
	uids := make([]types.UID, 0, len(m.dirty))
	for uid := range m.dirty {
		uids = append(uids, uid)
	}
	clear(m.dirty)
	m.mu.Unlock()
	for _, uid := range uids {
		if ctx.Err() != nil {
			return
		}
		m.remountPod(ctx, uid)
	}
}

func (m *Manager) remountPod(ctx context.Context, uid types.UID) {
	m.mu.Lock()
	ps := m.pods[uid]
	m.mu.Unlock()
	if ps == nil {
		return
	}
	ps.lock.Lock()
	defer ps.lock.Unlock()
	m.mu.Lock()
	pod := ps.pod
	type job struct {
		vc     *VolumeContext
		plugin Plugin
	}
	var jobs []job
	if !ps.removed && pod != nil {
		for _, vs := range ps.volumes {
			if !vs.mounted {
				continue
			}
			vc := m.stateContext(uid, vs)
			vc.Pod = pod
			if r, ok := vs.plugin.(Remounter); ok && r.RequiresRemount(vc) {
				jobs = append(jobs, job{vc, vs.plugin})
			}
		}
	}
	m.mu.Unlock()
	for _, j := range jobs {
		vc := j.vc
		if _, err := m.setUp(ctx, vc, j.plugin); err != nil && ctx.Err() == nil {
			msg := fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", vc.Name, err)
			klog.FromContext(ctx).Error(err, "Remount failed", "pod", klog.KObj(pod), "volume", vc.Name)
			m.event(pod, msg)
		}
	}
}

// event records a FailedMount Warning on pod.
func (m *Manager) event(pod *v1.Pod, msg string) {
	if m.recorder != nil {
		m.recorder.Event(pod, v1.EventTypeWarning, eventFailedMount, msg)
	}
}

// VolumesInUse returns the unique names of the volumes the node reports in
// status.volumesInUse: those of plugins implementing InUseReporter that a
// pod of the node wants, mounted or not yet (waiting for their attachment,
// failing), until they are torn down, and those found on disk at start
// that a DiskInUseReporter names, until a pod mounts them again or they are
// torn down, as the kubelet reports its desired and actual state's
// attachable volumes: the attach/detach controller detaches none of them. The kubelet reports attachable volumes only, so
// with the built-in plugins the list is empty. The slice is the caller's,
// sorted.
func (m *Manager) VolumesInUse() []v1.UniqueVolumeName {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []v1.UniqueVolumeName
	for _, ps := range m.pods {
		for _, vs := range ps.volumes {
			if r, ok := vs.plugin.(InUseReporter); ok && ps.pod != nil {
				vc := m.stateContext(ps.pod.UID, vs)
				vc.Pod = ps.pod
				if n, ok := r.VolumeInUseName(vc); ok {
					out = append(out, n)
				}
			}
		}
	}
	for uid, vols := range m.foundInUse {
		for name, unique := range vols {
			if _, ok := m.found[uid][name]; ok {
				out = append(out, unique)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// reconstructInUse names the found volumes of DiskInUseReporter plugins,
// for VolumesInUse.
func (m *Manager) reconstructInUse(ctx context.Context) {
	type job struct {
		uid     types.UID
		name    string
		plugin  DiskInUseReporter
		dirName string
	}
	var jobs []job
	m.mu.Lock()
	for uid, vols := range m.found {
		for name, pluginName := range vols {
			if r, ok := m.byName[pluginName].(DiskInUseReporter); ok {
				jobs = append(jobs, job{uid, name, r, escapePluginName(pluginName)})
			}
		}
	}
	m.mu.Unlock()
	for _, j := range jobs {
		unique, ok := j.plugin.VolumeInUseNameOnDisk(ctx, filepath.Join(m.podsDir, string(j.uid), "volumes", j.dirName, j.name))
		if !ok {
			continue
		}
		m.mu.Lock()
		if m.foundInUse[j.uid] == nil {
			m.foundInUse[j.uid] = map[string]v1.UniqueVolumeName{}
		}
		m.foundInUse[j.uid][j.name] = unique
		m.mu.Unlock()
	}
}

// ReconcilerSynced reports whether Run has read the volumes on disk, the
// kubelet's ReconcilerStatesHasBeenSynced: the node status reports
// volumesInUse only once it is true.
func (m *Manager) ReconcilerSynced() bool { return m.synced.Load() }

// PodVolume is a mounted volume of a pod.
type PodVolume struct {
	// Name is the volume's name and Plugin its plugin's.
	Name   string
	Plugin string
	// Mounted is what MountPod returned for it.
	Mounted Mounted
	// SizeLimit is an emptyDir's sizeLimit, nil when unset or not an
	// emptyDir. The eviction manager evicts a pod whose emptyDir holds
	// more; a memory-backed emptyDir's tmpfs is mounted with this size or
	// less (the pod's memory limit, the node's allocatable memory).
	SizeLimit *resource.Quantity
	// Memory tells a tmpfs-backed volume (emptyDir medium Memory, secret,
	// downwardAPI, projected), whose usage counts as the pod's memory.
	Memory bool
	// PVC and PV are a claim-backed volume's claim and PersistentVolume
	// as resolved when it was mounted, nil for other volumes. They are
	// shared: do not modify them.
	PVC *v1.PersistentVolumeClaim
	PV  *v1.PersistentVolume
}

// PodVolumes returns the mounted volumes of pod uid, sorted by name: what
// the Manager set up for it, as an embedder's or a test's view. The
// Manager does not measure volumes: in the agent the pods' volume usage
// comes from stats.VolumeUsage alone, which walks the same
// <root>/pods/<uid>/volumes layout. The slice is the caller's.
func (m *Manager) PodVolumes(uid types.UID) []PodVolume {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps := m.pods[uid]
	if ps == nil {
		return nil
	}
	var out []PodVolume
	for name, vs := range ps.volumes {
		if !vs.mounted {
			continue
		}
		pv := PodVolume{Name: name, Plugin: vs.plugin.Name(), Mounted: vs.out, PVC: vs.pvc, PV: vs.pv}
		switch {
		case vs.spec.EmptyDir != nil:
			if vs.spec.EmptyDir.SizeLimit != nil {
				q := vs.spec.EmptyDir.SizeLimit.DeepCopy()
				pv.SizeLimit = &q
			}
			pv.Memory = vs.spec.EmptyDir.Medium == v1.StorageMediumMemory
		case vs.spec.Secret != nil, vs.spec.DownwardAPI != nil, vs.spec.Projected != nil:
			pv.Memory = true
		}
		out = append(out, pv)
	}
	slices.SortFunc(out, func(a, b PodVolume) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// volumeCounts returns the number of volumes by state and plugin, for
// volume_manager_total_volumes.
func (m *Manager) volumeCounts() map[string]map[string]int {
	counts := map[string]map[string]int{stateDesired: {}, stateActual: {}}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ps := range m.pods {
		if ps.pod == nil {
			continue
		}
		used := usedVolumes(ps.pod)
		for i := range ps.pod.Spec.Volumes {
			vol := &ps.pod.Spec.Volumes[i]
			if !used[vol.Name] {
				continue
			}
			plugin := pluginNameNotAvailable
			if vs := ps.volumes[vol.Name]; vs != nil && vs.plugin != nil {
				plugin = vs.plugin.Name()
				if vs.mounted {
					counts[stateActual][plugin]++
				}
			}
			counts[stateDesired][plugin]++
		}
	}
	for _, vols := range m.found {
		for _, plugin := range vols {
			counts[stateActual][plugin]++
		}
	}
	return counts
}

// Mounter returns Options.Mounter (Host).
func (m *Manager) Mounter() mount.Interface { return m.mounter }

// ConfigMap returns a configMap: from the Manager's watch when a pod it
// mounts references it (in a volume, env or envFrom), otherwise with a GET.
// A missing configMap is an error for which apierrors.IsNotFound is true
// (`configmap "x" not found`). The object is shared: do not modify it.
// The runtime can resolve containers' env with it (Host).
func (m *Manager) ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	o, err := m.objects.get(ctx, objectKey{kind: kindConfigMap, namespace: namespace, name: name})
	if err != nil {
		return nil, err
	}
	return o.(*v1.ConfigMap), nil
}

// Secret is ConfigMap for secrets (volumes, env, envFrom and
// imagePullSecrets references are watched).
func (m *Manager) Secret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	o, err := m.objects.get(ctx, objectKey{kind: kindSecret, namespace: namespace, name: name})
	if err != nil {
		return nil, err
	}
	return o.(*v1.Secret), nil
}

// ServiceAccountToken returns a token for tr of service account
// namespace/name, cached and refreshed at 80 % of its life or after 24 h
// (Host). The object is shared: do not modify it.
func (m *Manager) ServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return m.tokens.get(ctx, namespace, name, tr)
}

// NodeAllocatable returns Options.NodeAllocatable's answer, nil when it is
// not set (Host).
func (m *Manager) NodeAllocatable() v1.ResourceList {
	if m.opts.NodeAllocatable == nil {
		return nil
	}
	return m.opts.NodeAllocatable()
}

// SubPath resolves a subPath volume mount of a pod this Manager mounts; see
// the package function SubPath.
func (m *Manager) SubPath(ctx context.Context, s SubPathSpec) (string, error) {
	return SubPath(ctx, m.mounter, m.podsDir, s)
}

// usedVolumes returns the names of the volumes the pod's containers mount
// or use as block devices; the kubelet ignores the others.
func usedVolumes(pod *v1.Pod) map[string]bool {
	used := map[string]bool{}
	visitContainers(pod, func(c *v1.Container) bool {
		for _, vm := range c.VolumeMounts {
			used[vm.Name] = true
		}
		for _, vd := range c.VolumeDevices {
			used[vd.Name] = true
		}
		return true
	})
	return used
}

// podReferences returns the configMaps and secrets the pod references, as
// the kubelet's managers register them.
func podReferences(pod *v1.Pod) []objectKey {
	set := map[objectKey]bool{}
	add := func(kind objectKind, name string) {
		if name != "" {
			set[objectKey{kind: kind, namespace: pod.Namespace, name: name}] = true
		}
	}
	for _, s := range pod.Spec.ImagePullSecrets {
		add(kindSecret, s.Name)
	}
	for i := range pod.Spec.Volumes {
		volumeObjects(&pod.Spec.Volumes[i].VolumeSource, add)
	}
	visitContainers(pod, func(c *v1.Container) bool {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				add(kindConfigMap, e.ConfigMapRef.Name)
			}
			if e.SecretRef != nil {
				add(kindSecret, e.SecretRef.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if e.ValueFrom.ConfigMapKeyRef != nil {
				add(kindConfigMap, e.ValueFrom.ConfigMapKeyRef.Name)
			}
			if e.ValueFrom.SecretKeyRef != nil {
				add(kindSecret, e.ValueFrom.SecretKeyRef.Name)
			}
		}
		return true
	})
	out := make([]objectKey, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	return out
}

// volumeObjects calls add with the kind and name of every configMap and
// secret the volume's content comes from.
func volumeObjects(src *v1.VolumeSource, add func(kind objectKind, name string)) {
	switch {
	case src.ConfigMap != nil:
		add(kindConfigMap, src.ConfigMap.Name)
	case src.Secret != nil:
		add(kindSecret, src.Secret.SecretName)
	case src.Projected != nil:
		for _, s := range src.Projected.Sources {
			if s.ConfigMap != nil {
				add(kindConfigMap, s.ConfigMap.Name)
			}
			if s.Secret != nil {
				add(kindSecret, s.Secret.Name)
			}
		}
	}
}

// volumeReads reports whether the volume's content comes from the object
// key (of the volume's pod's namespace).
func volumeReads(src *v1.VolumeSource, key objectKey) bool {
	reads := false
	volumeObjects(src, func(kind objectKind, name string) {
		reads = reads || (kind == key.kind && name == key.name)
	})
	return reads
}

// samePodContent reports whether two versions of a pod have the same
// content: the same resourceVersion, or for pods without one (static
// pods) the same metadata and spec.
func samePodContent(a, b *v1.Pod) bool {
	if a.ResourceVersion != "" && b.ResourceVersion != "" {
		return a.ResourceVersion == b.ResourceVersion
	}
	return reflect.DeepEqual(a.ObjectMeta, b.ObjectMeta) && reflect.DeepEqual(a.Spec, b.Spec)
}

// fsUserFrom returns the user every container of the pod runs as, nil
// when one sets none or two differ (the kubelet's FsUserFrom).
func fsUserFrom(pod *v1.Pod) *int64 {
	var user *int64
	visitContainers(pod, func(c *v1.Container) bool {
		var u *int64
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			u = c.SecurityContext.RunAsUser
		} else if pod.Spec.SecurityContext != nil {
			u = pod.Spec.SecurityContext.RunAsUser
		}
		if u == nil || (user != nil && *user != *u) {
			user = nil
			return false
		}
		if user == nil {
			user = u
		}
		return true
	})
	return user
}
