package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/status/podstatus"
)

// PodCgroups removes the cgroup of a pod that is gone;
// *cgroupdriver.Manager is one.
type PodCgroups interface {
	RemovePod(ctx context.Context, uid types.UID) error
}

// SecretGetter returns a secret by namespace and name, typically from a
// watch-based cache; used for image pull secrets.
type SecretGetter func(ctx context.Context, namespace, name string) (*v1.Secret, error)

// BackendOptions configures a Backend. Pods and PLEG are required; the
// Backend hands the PLEG what each sync found (PLEG.Observe), so the PLEG
// may have SyncsObserved set.
type BackendOptions struct {
	// Pods syncs pods on the runtime; PLEG watches it and keeps the pod
	// cache every status is read from.
	Pods *PodManager
	PLEG *PLEG
	// Cgroups, when set, has a pod's cgroup removed once the pod is gone.
	Cgroups PodCgroups
	// PullSecrets fetches a pod's imagePullSecrets; nil means none.
	PullSecrets SecretGetter
	// Probes are the liveness and startup results SyncPod acts on; nil
	// means no prober.
	Probes ProbeResults
	// Volumes sets up the pods' volumes before their containers start and
	// tears them down after they stopped. nil means no volume manager:
	// only pods that mount no volume can start.
	Volumes VolumeManager
	// Clock stamps the pod cache entries the Backend writes (default
	// clock.RealClock{}).
	Clock clock.Clock
}

// Backend runs pods on a CRI runtime for the pod lifecycle loop: it is the
// pods.Runtime of a kubelet-like node. A pod's status comes from the PLEG's
// cache (the sync waits for a status newer than its previous sync, as the
// kubelet's pod workers do, instead of asking the runtime again), and each
// SyncPod or KillPod that changed something writes the pod's fresh status
// into the cache, so the status reported right after it shows what it did.
// Safe for concurrent use; calls for one pod must not overlap.
type Backend struct {
	opts  BackendOptions
	pm    *PodManager
	cache *PodCache
	clock clock.Clock

	mu sync.Mutex
	// lastSync is, by pod, when the previous status read began: the next
	// one waits for a cache entry newer than that, as the kubelet's pod
	// workers wait for a status newer than their last sync.
	lastSync map[types.UID]time.Time
	// prevSync is, by pod, the lastSync the latest read waited for: an idle
	// sync puts it back, so the read after it takes the status the sync
	// found instead of waiting for the PLEG.
	prevSync map[types.UID]time.Time
	// restartingAll holds the pods whose status PodStatus last generated
	// has the AllContainersRestarting condition True: their next SyncPod
	// restarts all their containers (SyncInput.RestartAllContainers), as
	// the kubelet's syncPod reads that condition from the status it just
	// generated.
	restartingAll map[types.UID]bool
}

var (
	_ pods.Runtime          = (*Backend)(nil)
	_ pods.GarbageCollector = (*Backend)(nil)
	_ pods.ImagePullTimer   = (*Backend)(nil)
)

// ImagePullTime is PodManager.ImagePullTime.
func (b *Backend) ImagePullTime(uid types.UID) time.Duration { return b.pm.ImagePullTime(uid) }

// SupportedNodeFeatures are the node features of the CRI path
// (pods.CRIFeatures): the node declares those whose gates are on.
func (b *Backend) SupportedNodeFeatures() []string { return pods.CRIFeatures() }

// NewBackend returns a Backend. It does no I/O.
func NewBackend(opts BackendOptions) (*Backend, error) {
	if opts.Pods == nil || opts.PLEG == nil {
		return nil, errors.New("CRI backend: Pods and PLEG are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Backend{opts: opts, pm: opts.Pods, cache: opts.PLEG.Cache(), clock: opts.Clock, lastSync: map[types.UID]time.Time{}, prevSync: map[types.UID]time.Time{},
		restartingAll: map[types.UID]bool{}}, nil
}

// runtimeStatus returns the pod's runtime status from the cache, newer than
// the previous read.
func (b *Backend) runtimeStatus(ctx context.Context, uid types.UID) (*podstate.PodStatus, error) {
	b.mu.Lock()
	since := b.lastSync[uid]
	b.mu.Unlock()
	start := b.clock.Now()
	st, err := b.cache.GetNewerThan(ctx, uid, since)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.lastSync[uid], b.prevSync[uid] = start, since
	b.mu.Unlock()
	return st, nil
}

// refresh reads the pod's status from the runtime into the cache and hands
// it to the PLEG (PLEG.Observe: a PLEG with SyncsObserved reads the
// runtime's created and started events no more); when the read fails, the
// PLEG reads the pod.
func (b *Backend) refresh(ctx context.Context, pod *v1.Pod) {
	at := b.clock.Now()
	st, err := b.pm.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot refresh the pod's runtime status; the PLEG will", "pod", klog.KObj(pod), "err", err)
		b.opts.PLEG.Reinspect(pod.UID, pod.Name, pod.Namespace)
		return
	}
	b.cache.Set(pod.UID, st, nil, at)
	b.opts.PLEG.Observe(st)
}

// PodStatus generates the pod's API status from the cached runtime status,
// the reasons its containers wait (back-offs, image pull errors), why its
// last in-place resize failed (PodManager.ResizeError) and the pod-level
// resources its cgroup was given (PodManager.PodLevelActuated), unless
// opts gives them. Whether that status has the AllContainersRestarting
// condition True decides whether the next SyncPod restarts all the pod's
// containers.
func (b *Backend) PodStatus(ctx context.Context, pod *v1.Pod, opts podstatus.GenerateOptions) (v1.PodStatus, error) {
	rs, err := b.runtimeStatus(ctx, pod.UID)
	if err != nil {
		return v1.PodStatus{}, fmt.Errorf("status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if opts.ResizeError == "" {
		opts.ResizeError = b.pm.ResizeError(pod.UID)
	}
	if opts.PodLevelActuated == nil {
		opts.PodLevelActuated, _ = b.pm.PodLevelActuated(pod.UID)
	}
	st := podstatus.Generate(pod, rs, b.pm.waiting(pod.UID), opts)
	b.mu.Lock()
	if podstatus.AllContainersRestarting(&st) {
		b.restartingAll[pod.UID] = true
	} else {
		delete(b.restartingAll, pod.UID)
	}
	b.mu.Unlock()
	return st, nil
}

// SyncPod mounts the pod's volumes (VolumeManager.MountPod), then runs
// PodManager.SyncPod on the latest cached runtime status (at least as new
// as the one PodStatus read) with the pod's pull secrets and volumes, then,
// unless the sync found nothing to do, refreshes the cache: with the
// status the sync put together itself when it created a new pod
// (SyncResult.Status), else by reading the pod from the runtime. When the
// volumes cannot be mounted nothing is started (the pod stays
// ContainerCreating; the volume manager recorded FailedMount) and the error
// makes the loop retry after its back-off, or when the volume manager says
// it tries the volumes again (VolumeManager.MountPod), if sooner.
//
// When the status PodStatus last generated has the AllContainersRestarting
// condition True, the sync restarts all the pod's containers in place
// (SyncInput.RestartAllContainers). When that status does not, but the
// newer cached status shows a container whose exit matched a
// RestartAllContainers rule, the sync does nothing and asks to run again at
// once, so that the status reports the exit (and the condition) before the
// containers go, as the kubelet decides from the status it reports.
func (b *Backend) SyncPod(ctx context.Context, pod *v1.Pod) pods.SyncResult {
	rs, err := b.cache.Get(pod.UID)
	if err != nil {
		return pods.SyncResult{Err: fmt.Errorf("sync pod %s/%s: %w", pod.Namespace, pod.Name, err)}
	}
	b.mu.Lock()
	restartAll := b.restartingAll[pod.UID]
	b.mu.Unlock()
	if !restartAll && podstate.AllContainersCouldRestart(&pod.Spec) && podstate.ShouldAllContainersRestart(pod, rs, nil) {
		klog.FromContext(ctx).V(3).Info("A container exited with a RestartAllContainers rule since the pod's status was generated; reporting it first", "pod", klog.KObj(pod))
		b.keepStatus(pod.UID)
		return pods.SyncResult{RetryAt: b.clock.Now()}
	}
	in := SyncInput{Probes: b.opts.Probes, RestartAllContainers: restartAll}
	if v := b.opts.Volumes; v != nil {
		mounted, err := v.MountPod(ctx, pod)
		if err != nil {
			res := pods.SyncResult{Err: fmt.Errorf("sync pod %s/%s: %w", pod.Namespace, pod.Name, err)}
			var retry interface{ RetryAt() time.Time }
			if errors.As(err, &retry) {
				res.RetryAt = retry.RetryAt()
			}
			return res
		}
		in.Volumes = PodVolumes{Mounted: mounted, SubPath: v.SubPath}
	}
	in.PullSecrets = b.pullSecrets(ctx, pod)
	res := b.pm.SyncPod(ctx, pod, rs, in)
	// A sync that acted on nothing leaves the cached status as it is (the
	// PLEG brings any change meanwhile): no need to read the pod again.
	switch {
	case res.Idle:
		b.keepStatus(pod.UID)
	case res.Status != nil:
		// The sync read all there is of the pod itself.
		b.cache.Set(pod.UID, res.Status, nil, res.Status.TimeStamp)
		b.opts.PLEG.Observe(res.Status)
	default:
		b.refresh(ctx, pod)
	}
	return pods.SyncResult{RetryAt: res.RetryAt, Err: res.Err}
}

// keepStatus lets the next status read of the pod take the cached status
// without waiting for a newer one: the sync changed nothing.
func (b *Backend) keepStatus(uid types.UID) {
	b.mu.Lock()
	if prev, ok := b.prevSync[uid]; ok {
		b.lastSync[uid] = prev
	}
	b.mu.Unlock()
}

// KillPod stops what runs of the pod, as read from the runtime now, then
// releases its resource claims (PodManagerOptions.DynamicResources),
// tears down its volumes (VolumeManager.UnmountPod) and releases its user
// namespace mappings (PodManagerOptions.UserNamespaces) and returns that
// error: the pod loop calls KillPod again (the containers are stopped by
// then) and neither sets the pod's final status nor lets the API object go
// before the volumes are unmounted, as the kubelet's SyncTerminatedPod
// waits for the unmount. A pod without a spec (an orphan from RuntimePods)
// is stopped with the grace periods recorded on its containers.
func (b *Backend) KillPod(ctx context.Context, pod *v1.Pod, gracePeriodOverride *int64) error {
	rs, err := b.pm.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return err
	}
	running := rs.RunningPod()
	if !running.IsRunning() {
		b.cache.Set(pod.UID, rs, nil, rs.TimeStamp)
		return b.releaseStopped(ctx, pod)
	}
	spec := pod
	if len(pod.Spec.Containers) == 0 {
		spec = nil
	}
	if err := b.pm.KillPod(ctx, spec, running, gracePeriodOverride); err != nil {
		return err
	}
	b.refresh(ctx, pod)
	return b.releaseStopped(ctx, pod)
}

// releaseStopped releases the dynamic resources of a pod KillPod stopped
// (as the kubelet, after its containers stopped and before its final
// status), then tears down its volumes.
func (b *Backend) releaseStopped(ctx context.Context, pod *v1.Pod) error {
	if dr := b.pm.opts.DynamicResources; dr != nil {
		if err := dr.UnprepareResources(ctx, pod); err != nil {
			return fmt.Errorf("pod %s/%s stopped, but its resource claims are not released: %w", pod.Namespace, pod.Name, err)
		}
	}
	return b.unmountStopped(ctx, pod)
}

// unmountStopped tears down the volumes of a pod KillPod stopped, then
// releases its user namespace mappings, as the kubelet's
// SyncTerminatedPod.
func (b *Backend) unmountStopped(ctx context.Context, pod *v1.Pod) error {
	if err := b.unmount(ctx, pod.UID); err != nil {
		return fmt.Errorf("pod %s/%s stopped, but its volumes are not torn down: %w", pod.Namespace, pod.Name, err)
	}
	b.releaseUserNamespace(ctx, pod.UID)
	return nil
}

// releaseUserNamespace frees pod uid's user namespace mappings
// (PodManagerOptions.UserNamespaces), if it has any.
func (b *Backend) releaseUserNamespace(ctx context.Context, uid types.UID) {
	if u := b.pm.opts.UserNamespaces; u != nil {
		u.Release(ctx, uid)
	}
}

// unmount tears down the volumes of a pod whose containers are stopped.
func (b *Backend) unmount(ctx context.Context, uid types.UID) error {
	if b.opts.Volumes == nil {
		return nil
	}
	return b.opts.Volumes.UnmountPod(ctx, uid)
}

// RemovePod tears down the pod's volumes (if KillPod did not), removes its
// containers, sandboxes, logs and the runtime's files in its directory and
// its cgroup, releases its user namespace mappings, and forgets it. The
// pod's directory itself is the volume
// manager's to remove (it never deletes through a mount point).
func (b *Backend) RemovePod(ctx context.Context, uid types.UID) error {
	if err := b.unmount(ctx, uid); err != nil {
		return err
	}
	if err := b.pm.RemovePod(ctx, uid); err != nil {
		return err
	}
	b.releaseUserNamespace(ctx, uid)
	if b.opts.Cgroups != nil {
		if err := b.opts.Cgroups.RemovePod(ctx, uid); err != nil {
			return fmt.Errorf("remove cgroup of pod %s: %w", uid, err)
		}
	}
	b.mu.Lock()
	delete(b.lastSync, uid)
	delete(b.prevSync, uid)
	delete(b.restartingAll, uid)
	b.mu.Unlock()
	b.opts.PLEG.Forget(uid)
	return nil
}

// RuntimePods lists every pod the runtime holds a container or a sandbox
// of, in any state, as pods with only their UID, name and namespace, as
// the PLEG last saw them (its relist or an event; PLEG.Pods): no CRI call,
// where the kubelet's housekeeping lists the runtime every 2 s.
func (b *Backend) RuntimePods(context.Context) ([]*v1.Pod, error) {
	held := b.opts.PLEG.Pods()
	out := make([]*v1.Pod, 0, len(held))
	for _, rp := range held {
		out = append(out, &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: rp.ID, Name: rp.Name, Namespace: rp.Namespace}})
	}
	return out, nil
}

// Events are the PLEG's.
func (b *Backend) Events() <-chan *podstate.PodLifecycleEvent { return b.opts.PLEG.Events() }

// GarbageCollect removes dead containers beyond the kubelet's limits and
// everything of stopped pods keep does not know (PodManager.GarbageCollect).
func (b *Backend) GarbageCollect(ctx context.Context, keep func(types.UID) bool) error {
	return b.pm.GarbageCollect(ctx, func(uid types.UID) bool { return !keep(uid) })
}

// DeleteAllUnusedContainers removes every dead container and not-ready
// sandbox of the pods active does not report, and everything of the pods
// known does not report, as the kubelet does for the eviction manager
// under disk pressure (PodManager.DeleteAllUnusedContainers): the
// pods.UnusedContainerDeleter the pod lifecycle loop's
// Controller.DeleteAllUnusedContainers calls, with the pods it knows and
// those it runs.
var _ pods.UnusedContainerDeleter = (*Backend)(nil)

func (b *Backend) DeleteAllUnusedContainers(ctx context.Context, known, active func(types.UID) bool) error {
	return b.pm.DeleteAllUnusedContainers(ctx, func(uid types.UID) bool { return !known(uid) }, active)
}

// pullSecrets fetches the pod's imagePullSecrets; a missing one is logged
// and skipped, as the kubelet does.
func (b *Backend) pullSecrets(ctx context.Context, pod *v1.Pod) []v1.Secret {
	if b.opts.PullSecrets == nil || len(pod.Spec.ImagePullSecrets) == 0 {
		return nil
	}
	var out []v1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := b.opts.PullSecrets(ctx, pod.Namespace, ref.Name)
		if err != nil {
			klog.FromContext(ctx).Info("Cannot get an image pull secret; pulling without it", "pod", klog.KObj(pod), "secret", ref.Name, "err", err)
			continue
		}
		out = append(out, *s)
	}
	return out
}
