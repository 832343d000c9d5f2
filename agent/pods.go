package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/status/podstatus"
)

// PodRuntime is what the pod controller needs of the container runtime;
// *runtime.PodManager is one. Calls for one pod never overlap.
type PodRuntime interface {
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*runtime.PodStatus, error)
	SyncPod(ctx context.Context, pod *v1.Pod, status *runtime.PodStatus, pullSecrets []v1.Secret, probes runtime.ProbeResults) runtime.SyncResult
	KillPod(ctx context.Context, pod *v1.Pod, running runtime.RunningPod, gracePeriodOverride *int64) error
	ListPods(ctx context.Context, all bool) ([]runtime.RunningPod, error)
	RemovePod(ctx context.Context, uid types.UID) error
	GarbageCollect(ctx context.Context, removed func(types.UID) bool) error
}

// PodCgroups removes the cgroups of pods that are gone; *cgroupdriver.Manager
// is one. The runtime's PodManager creates them (its CgroupParent option).
type PodCgroups interface {
	RemovePod(ctx context.Context, uid types.UID) error
}

// PodControllerOptions configures a PodController. Sources, Runtime, Events
// and Statuses are required.
type PodControllerOptions struct {
	// Sources delivers the pods to run.
	Sources *podsource.Config
	// Runtime runs them.
	Runtime PodRuntime
	// Events are the runtime's pod lifecycle events (the PLEG's); each
	// triggers a sync of its pod.
	Events <-chan runtime.PodLifecycleEvent
	// Statuses keeps and writes the pods' API status.
	Statuses podstatus.Interface
	// Cgroups, when set, has its pod cgroups removed once a pod is gone.
	Cgroups PodCgroups
	// Node returns the node as last seen, for admission; false before it is
	// known.
	Node func() (*v1.Node, bool)
	// Admit are the admission checks, in order, after nothing else; a pod
	// the first of them rejects is failed and never started.
	Admit []AdmitHandler
	// PullSecrets fetches a pod's imagePullSecrets; nil means none.
	PullSecrets func(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// Probes are the liveness/startup results SyncPod acts on; nil means
	// no prober.
	Probes runtime.ProbeResults
	// HostIPs returns the node's IPs, reported as the pods' hostIPs; nil
	// reports none.
	HostIPs func() []net.IP
	// QOSClass classifies pods for their status; nil leaves the generator's
	// default.
	QOSClass func(*v1.Pod) v1.PodQOSClass
	// SyncFrequency is the longest a pod goes without a sync (kubelet
	// syncFrequency, default 1m).
	SyncFrequency time.Duration
	// HousekeepingPeriod is how often pods unknown to the sources are
	// cleaned up (default 2s, the kubelet's housekeeping period).
	HousekeepingPeriod time.Duration
	// Recorder receives the pod events the controller records (rejections).
	Recorder record.EventRecorder
	// Clock paces requeues and housekeeping (default clock.RealClock{}).
	Clock clock.Clock
}

// Default periods of the pod controller.
const (
	DefaultSyncFrequency      = time.Minute
	DefaultHousekeepingPeriod = 2 * time.Second
	// syncErrorRetry is when a pod whose sync failed is tried again when
	// nothing says otherwise.
	syncErrorRetry = 10 * time.Second
	// gcPeriod is how often dead containers of live pods are removed.
	gcPeriod = time.Minute
)

// PodController is the agent's sync loop: it admits the pods its sources
// deliver, runs one worker per pod that brings the runtime in line with the
// pod's spec and reports its status, stops pods that are deleted or finish,
// and removes what the runtime holds of pods nobody knows, as the kubelet's
// syncLoop, pod workers and housekeeping do.
type PodController struct {
	opts    PodControllerOptions
	clock   clock.Clock
	workers *podWorkers

	mu   sync.Mutex
	pods map[types.UID]*podRecord
	// orphans are the pods no source knows that are being stopped.
	orphans map[types.UID]bool
	// cleanups tracks the goroutines stopping orphans.
	cleanups sync.WaitGroup
}

// podRecord is what the controller remembers of one pod.
type podRecord struct {
	pod *v1.Pod
	// waiting are the reasons from the pod's last SyncPod.
	waiting map[string]runtime.ContainerWaiting
	// rejected pods were failed by admission and never start.
	rejected bool
	// terminated pods have no running container left and a final status.
	terminated bool
}

// NewPodController validates opts and applies defaults. It does no I/O.
func NewPodController(opts PodControllerOptions) (*PodController, error) {
	if opts.Sources == nil || opts.Runtime == nil || opts.Events == nil || opts.Statuses == nil {
		return nil, errors.New("pod controller: Sources, Runtime, Events and Statuses are required")
	}
	if opts.Node == nil {
		return nil, errors.New("pod controller: Node is required for admission")
	}
	if opts.SyncFrequency <= 0 {
		opts.SyncFrequency = DefaultSyncFrequency
	}
	if opts.HousekeepingPeriod <= 0 {
		opts.HousekeepingPeriod = DefaultHousekeepingPeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	c := &PodController{opts: opts, clock: opts.Clock, pods: map[types.UID]*podRecord{}, orphans: map[types.UID]bool{}}
	c.workers = newPodWorkers(c.syncPod, opts.Clock)
	return c, nil
}

// ActivePods returns the admitted pods that are not terminated, as the
// kubelet's GetActivePods: what the node's resources are committed to. The
// pods are shared: callers must not modify them. Safe for concurrent use.
func (c *PodController) ActivePods() []*v1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.activePodsLocked()
}

func (c *PodController) activePodsLocked() []*v1.Pod {
	out := make([]*v1.Pod, 0, len(c.pods))
	for _, r := range c.pods {
		if !r.rejected && !r.terminated {
			out = append(out, r.pod)
		}
	}
	return out
}

// Run handles pod updates, runtime events and housekeeping until ctx is
// done, then waits for the pod workers to return. It blocks.
func (c *PodController) Run(ctx context.Context) error {
	defer c.cleanups.Wait()
	defer c.workers.wait()
	housekeeping := c.clock.NewTimer(c.opts.HousekeepingPeriod)
	defer housekeeping.Stop()
	gc := c.clock.NewTimer(gcPeriod)
	defer gc.Stop()
	updates := c.opts.Sources.Updates()
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-updates:
			if !ok {
				return errors.New("pod controller: the pod sources stopped")
			}
			c.handle(ctx, u)
		case ev := <-c.opts.Events:
			c.workers.poke(ev.ID)
		case <-housekeeping.C():
			c.housekeeping(ctx)
			housekeeping.Reset(c.opts.HousekeepingPeriod)
		case <-gc.C():
			if err := c.opts.Runtime.GarbageCollect(ctx, c.removed); err != nil {
				klog.FromContext(ctx).Error(err, "Container garbage collection failed")
			}
			gc.Reset(gcPeriod)
		}
	}
}

func (c *PodController) handle(ctx context.Context, u podsource.Update) {
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Pod update", "op", u.Op.String(), "source", u.Source, "pods", klog.KObjSlice(u.Pods))
	switch u.Op {
	case podsource.OpAdd:
		// Admit in creation order, so pods that ran before a restart keep
		// their place, as the kubelet does.
		pods := slices.Clone(u.Pods)
		slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
			return a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time)
		})
		for _, pod := range pods {
			c.add(ctx, pod)
		}
	case podsource.OpUpdate, podsource.OpDelete:
		for _, pod := range u.Pods {
			c.update(ctx, pod, u.Op == podsource.OpDelete)
		}
	case podsource.OpRemove:
		for _, pod := range u.Pods {
			c.remove(ctx, pod)
		}
	case podsource.OpReconcile:
		for _, pod := range u.Pods {
			c.mu.Lock()
			if r, ok := c.pods[pod.UID]; ok {
				r.pod = pod
			}
			c.mu.Unlock()
			if podstatus.NeedsReadinessSync(pod) {
				c.workers.poke(pod.UID)
			}
		}
	}
}

func (c *PodController) add(ctx context.Context, pod *v1.Pod) {
	c.mu.Lock()
	if _, ok := c.pods[pod.UID]; ok {
		c.mu.Unlock()
		c.update(ctx, pod, pod.DeletionTimestamp != nil)
		return
	}
	r := &podRecord{pod: pod}
	c.pods[pod.UID] = r
	// A finished or deleted pod is not admitted: its worker only makes sure
	// it is stopped.
	terminate := pod.DeletionTimestamp != nil || isTerminal(pod.Status.Phase)
	if !terminate {
		if res := c.admit(pod); !res.Admit {
			r.rejected = true
			c.mu.Unlock()
			c.reject(ctx, pod, res)
			return
		}
	}
	c.mu.Unlock()
	c.workers.update(ctx, pod, terminate, false, pod.DeletionGracePeriodSeconds)
}

// admit runs the admission checks against the other active pods; c.mu held.
func (c *PodController) admit(pod *v1.Pod) AdmitResult {
	node, ok := c.opts.Node()
	if !ok {
		node = nil
	}
	others := slices.DeleteFunc(c.activePodsLocked(), func(p *v1.Pod) bool { return p.UID == pod.UID })
	attrs := AdmitAttributes{Pod: pod, OtherPods: others, Node: node}
	for _, h := range c.opts.Admit {
		if res := h.Admit(attrs); !res.Admit {
			return res
		}
	}
	return AdmitResult{Admit: true}
}

// reject fails a pod admission refused, as the kubelet's rejectPod: a
// warning event and a Failed status with the reason, written at once.
func (c *PodController) reject(ctx context.Context, pod *v1.Pod, res AdmitResult) {
	klog.FromContext(ctx).Info("Pod rejected by admission", "pod", klog.KObj(pod), "reason", res.Reason, "message", res.Message)
	if c.opts.Recorder != nil {
		c.opts.Recorder.Event(pod, v1.EventTypeWarning, res.Reason, res.Message)
	}
	st := *pod.Status.DeepCopy()
	st.Phase = v1.PodFailed
	st.Reason = res.Reason
	st.Message = "Pod was rejected: " + res.Message
	c.opts.Statuses.SetPodStatus(pod, st)
	c.opts.Statuses.TerminatePod(pod)
}

func (c *PodController) update(ctx context.Context, pod *v1.Pod, deleted bool) {
	c.mu.Lock()
	r, ok := c.pods[pod.UID]
	if ok {
		r.pod = pod
	}
	rejected := ok && r.rejected
	c.mu.Unlock()
	if !ok {
		c.add(ctx, pod)
		return
	}
	if rejected {
		return
	}
	c.workers.update(ctx, pod, deleted || pod.DeletionTimestamp != nil, false, pod.DeletionGracePeriodSeconds)
}

func (c *PodController) remove(ctx context.Context, pod *v1.Pod) {
	c.mu.Lock()
	r, ok := c.pods[pod.UID]
	rejected := ok && r.rejected
	if rejected {
		delete(c.pods, pod.UID)
	}
	c.mu.Unlock()
	if rejected {
		c.opts.Statuses.RemovePod(pod.UID)
		return
	}
	// The worker stops whatever still runs, then forgets the pod.
	c.workers.update(ctx, pod, true, true, pod.DeletionGracePeriodSeconds)
}

func isTerminal(phase v1.PodPhase) bool {
	return phase == v1.PodSucceeded || phase == v1.PodFailed
}

// syncPod is one pod worker sync: read the runtime, report the status,
// then run or stop the pod.
func (c *PodController) syncPod(ctx context.Context, w podWork) (time.Duration, bool) {
	pod := w.Pod
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	ctx = klog.NewContext(ctx, logger)
	rs, err := c.opts.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		logger.Error(err, "Cannot read the pod's runtime status; will retry")
		return syncErrorRetry, false
	}
	prev, hasPrev := c.opts.Statuses.GetPodStatus(pod.UID)
	if w.Terminate || (hasPrev && isTerminal(prev.Phase)) {
		return c.terminate(ctx, w, rs)
	}

	waiting := c.waiting(pod.UID)
	st := c.generate(pod, rs, waiting, false)
	c.opts.Statuses.SetPodStatus(pod, st)
	if isTerminal(st.Phase) {
		// Every container finished for good: stop the sandbox next.
		c.workers.update(ctx, pod, true, false, nil)
		return 0, false
	}

	res := c.opts.Runtime.SyncPod(ctx, pod, rs, c.pullSecrets(ctx, pod), c.opts.Probes)
	c.setWaiting(pod.UID, res.Waiting)
	if res.Err != nil {
		logger.V(2).Info("Pod sync did not complete", "err", res.Err)
	}
	// Report what the sync did at once instead of at the next runtime
	// event: the status a watcher waits for (Running) is known now.
	if rs, err := c.opts.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace); err == nil {
		c.opts.Statuses.SetPodStatus(pod, c.generate(pod, rs, res.Waiting, false))
	}

	// A failed sync is retried after syncErrorRetry, as the kubelet's pod
	// worker back-off, and no later than a back-off's end: between the two
	// the status shows the back-off (ImagePullBackOff, CrashLoopBackOff).
	requeue := c.opts.SyncFrequency
	if res.Err != nil {
		requeue = min(requeue, syncErrorRetry)
	}
	if !res.RetryAt.IsZero() {
		requeue = min(requeue, max(res.RetryAt.Sub(c.clock.Now()), time.Millisecond))
	}
	return requeue, false
}

// terminate stops the pod's containers with its grace period, reports the
// final status, and once the pod is gone from its source removes what the
// runtime and the cgroups hold of it.
func (c *PodController) terminate(ctx context.Context, w podWork, rs *runtime.PodStatus) (time.Duration, bool) {
	pod, logger := w.Pod, klog.FromContext(ctx)
	if running := rs.RunningPod(); hasRunning(running) {
		if err := c.opts.Runtime.KillPod(ctx, pod, running, w.GracePeriod); err != nil {
			logger.Error(err, "Cannot stop the pod; will retry")
			return time.Second, false
		}
		var err error
		if rs, err = c.opts.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace); err != nil {
			logger.Error(err, "Cannot read the stopped pod's runtime status; will retry")
			return time.Second, false
		}
	}
	c.opts.Statuses.SetPodStatus(pod, c.generate(pod, rs, c.waiting(pod.UID), true))
	c.opts.Statuses.TerminatePod(pod)
	c.mu.Lock()
	if r, ok := c.pods[pod.UID]; ok {
		r.terminated = true
	}
	c.mu.Unlock()
	if !w.Removed {
		return 0, false
	}
	if err := c.cleanup(ctx, pod.UID); err != nil {
		logger.Error(err, "Cannot remove the pod's leftovers; will retry")
		return time.Second, false
	}
	c.opts.Statuses.RemovePod(pod.UID)
	c.mu.Lock()
	delete(c.pods, pod.UID)
	c.mu.Unlock()
	logger.V(2).Info("Pod removed")
	return 0, true
}

// cleanup removes the containers, sandboxes, directories and cgroups of a
// pod that is stopped and gone.
func (c *PodController) cleanup(ctx context.Context, uid types.UID) error {
	if err := c.opts.Runtime.RemovePod(ctx, uid); err != nil {
		return err
	}
	if c.opts.Cgroups != nil {
		if err := c.opts.Cgroups.RemovePod(ctx, uid); err != nil {
			return fmt.Errorf("remove cgroup of pod %s: %w", uid, err)
		}
	}
	return nil
}

func hasRunning(rp runtime.RunningPod) bool {
	if len(rp.Containers) > 0 {
		return true
	}
	for _, sb := range rp.Sandboxes {
		if sb.State == runtime.ContainerStateRunning {
			return true
		}
	}
	return false
}

func (c *PodController) generate(pod *v1.Pod, rs *runtime.PodStatus, waiting map[string]runtime.ContainerWaiting, terminal bool) v1.PodStatus {
	opts := podstatus.GenerateOptions{Terminal: terminal, QOSClass: c.opts.QOSClass}
	if c.opts.HostIPs != nil {
		opts.HostIPs = c.opts.HostIPs()
	}
	if prev, ok := c.opts.Statuses.GetPodStatus(pod.UID); ok {
		opts.Previous = &prev
	}
	return podstatus.Generate(pod, rs, waiting, opts)
}

func (c *PodController) waiting(uid types.UID) map[string]runtime.ContainerWaiting {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.pods[uid]; ok {
		return r.waiting
	}
	return nil
}

func (c *PodController) setWaiting(uid types.UID, w map[string]runtime.ContainerWaiting) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.pods[uid]; ok {
		r.waiting = w
	}
}

// pullSecrets fetches the pod's imagePullSecrets; a missing one is logged
// and skipped, as the kubelet does.
func (c *PodController) pullSecrets(ctx context.Context, pod *v1.Pod) []v1.Secret {
	if c.opts.PullSecrets == nil || len(pod.Spec.ImagePullSecrets) == 0 {
		return nil
	}
	var out []v1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := c.opts.PullSecrets(ctx, pod.Namespace, ref.Name)
		if err != nil {
			klog.FromContext(ctx).Info("Cannot get an image pull secret; pulling without it", "secret", ref.Name, "err", err)
			continue
		}
		out = append(out, *s)
	}
	return out
}

// removed reports whether a pod is unknown to the controller, for garbage
// collection.
func (c *PodController) removed(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pods[uid]
	return !ok
}

// housekeeping stops and removes what the runtime runs of pods no source
// knows (pods deleted while the agent was down), once every source has
// reported. Each orphan is stopped in its own goroutine, so its grace period
// does not hold up the sync loop.
func (c *PodController) housekeeping(ctx context.Context) {
	if !c.opts.Sources.AllReady() {
		return
	}
	logger := klog.FromContext(ctx)
	running, err := c.opts.Runtime.ListPods(ctx, false)
	if err != nil {
		logger.Error(err, "Housekeeping cannot list the runtime's pods")
		return
	}
	for _, rp := range running {
		c.mu.Lock()
		_, known := c.pods[rp.ID]
		skip := known || c.orphans[rp.ID] || c.workers.known(rp.ID)
		if !skip {
			c.orphans[rp.ID] = true
		}
		c.mu.Unlock()
		if skip {
			continue
		}
		c.cleanups.Add(1)
		go func() {
			defer c.cleanups.Done()
			defer func() {
				c.mu.Lock()
				delete(c.orphans, rp.ID)
				c.mu.Unlock()
			}()
			log := logger.WithValues("pod", klog.KRef(rp.Namespace, rp.Name), "podUID", rp.ID)
			log.Info("Stopping a pod no source knows")
			if err := c.opts.Runtime.KillPod(ctx, nil, rp, nil); err != nil {
				log.Error(err, "Cannot stop an orphaned pod")
				return
			}
			if err := c.cleanup(ctx, rp.ID); err != nil {
				log.Error(err, "Cannot remove an orphaned pod")
			}
		}()
	}
}
