package pods

import (
	"context"
	"errors"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/mirror"
)

// MirrorClient keeps the mirror pods of static pods in the API server: the
// objects through which the cluster sees the pods only this node runs
// (podsource/mirror's *Client is one). Both methods make API requests,
// bounded by ctx.
type MirrorClient interface {
	// Sync brings staticPod's mirror pod in line, given mirrorPod, the
	// mirror pod the sources show under its name (nil when none): creates
	// it when missing, replaces it when it is of another version or being
	// deleted. An error wrapping mirror.ErrNodeUnknown means the node is
	// not registered yet.
	Sync(ctx context.Context, staticPod, mirrorPod *v1.Pod, terminating bool) error
	// DeleteOrphans deletes the mirror pods whose static pod is gone,
	// except those terminating reports true for.
	DeleteOrphans(ctx context.Context, orphans []*v1.Pod, terminating func(mirrorPod *v1.Pod) bool) error
	// NodeKnown reports whether the node is registered, so Sync can create
	// mirror pods. It must not block.
	NodeKnown() bool
}

// MirrorSources is what the Controller reads of mirror pods from its
// Sources when it has a MirrorClient (*podsource.Config is one). The pods
// returned are shared and read-only; the methods must not block.
type MirrorSources interface {
	// MirrorPodFor returns the mirror pod with staticPod's namespace and
	// name, whatever its version, and whether there is one.
	MirrorPodFor(staticPod *v1.Pod) (*v1.Pod, bool)
	// OrphanedMirrorPods returns the mirror pods no static pod has the
	// name of; none before every source reported.
	OrphanedMirrorPods() []*v1.Pod
}

const (
	// mirrorRequestTimeout bounds a mirror pod's creation or deletion, so
	// an API server that does not answer holds up neither a static pod's
	// sync (the node's control plane may be that static pod) nor the
	// housekeeping.
	mirrorRequestTimeout = 10 * time.Second
	// nodeKnownPollPeriod is how often the Controller looks whether the
	// node became known, to create the mirror pods at once (the kubelet's
	// fastStaticPodsRegistration polls every 100 ms). It reads memory only.
	nodeKnownPollPeriod = 100 * time.Millisecond
)

// staticStarts lets one static pod per namespace and name run at a time,
// as the kubelet's allowStaticPodStart: an edited manifest is a new pod
// (new UID) under the old name, which starts only once the old one's
// containers stopped, so the two never run side by side (a control plane
// component would find its port taken). Pods wait in the order they were
// admitted. The Controller's mu guards it.
type staticStarts struct {
	started map[types.NamespacedName]types.UID
	waiting map[types.NamespacedName][]types.UID
}

func newStaticStarts() staticStarts {
	return staticStarts{started: map[types.NamespacedName]types.UID{}, waiting: map[types.NamespacedName][]types.UID{}}
}

func fullName(pod *v1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
}

// enqueue puts an admitted static pod in line to start.
func (s *staticStarts) enqueue(pod *v1.Pod) {
	if !podsource.IsStaticPod(pod) {
		return
	}
	name := fullName(pod)
	if s.started[name] == pod.UID || slices.Contains(s.waiting[name], pod.UID) {
		return
	}
	s.waiting[name] = append(s.waiting[name], pod.UID)
}

// allow reports whether pod may run now, and records it started when it
// may: it is not static, it runs already, or no pod of its name runs and
// it is first in line among the pods known reports true for (a pod gone
// without stopping, which cannot happen but would block its name for good,
// is skipped, as the kubelet skips them).
func (s *staticStarts) allow(pod *v1.Pod, known func(types.UID) bool) bool {
	if !podsource.IsStaticPod(pod) {
		return true
	}
	name := fullName(pod)
	if uid, ok := s.started[name]; ok {
		return uid == pod.UID
	}
	line := slices.DeleteFunc(s.waiting[name], func(u types.UID) bool { return u != pod.UID && !known(u) })
	s.waiting[name] = line
	if len(line) > 0 && line[0] != pod.UID {
		return false
	}
	s.remove(name, pod.UID)
	s.started[name] = pod.UID
	return true
}

// stopped records that pod's containers stopped for good (or it never
// started): its name is free for the next pod in line, whose UID it returns
// (false when none waits).
func (s *staticStarts) stopped(pod *v1.Pod) (types.UID, bool) {
	if !podsource.IsStaticPod(pod) {
		return "", false
	}
	name := fullName(pod)
	if s.started[name] == pod.UID {
		delete(s.started, name)
	}
	s.remove(name, pod.UID)
	if _, running := s.started[name]; running || len(s.waiting[name]) == 0 {
		return "", false
	}
	return s.waiting[name][0], true
}

func (s *staticStarts) remove(name types.NamespacedName, uid types.UID) {
	line := slices.DeleteFunc(s.waiting[name], func(u types.UID) bool { return u == uid })
	if len(line) == 0 {
		delete(s.waiting, name)
		return
	}
	s.waiting[name] = line
}

// mayStart reports whether the static start order lets pod run now (see
// staticStarts); a pod that must wait is synced again when the one before
// it stopped.
func (c *Controller) mayStart(ctx context.Context, pod *v1.Pod) bool {
	c.mu.Lock()
	ok := c.static.allow(pod, func(uid types.UID) bool {
		r, known := c.pods[uid]
		return known && !r.rejected
	})
	c.mu.Unlock()
	if !ok {
		klog.FromContext(ctx).V(2).Info("Static pod waits for the pod of the same name to stop")
	}
	return ok
}

// staticPodStopped frees pod's name for the next static pod of that name
// and syncs that one.
func (c *Controller) staticPodStopped(pod *v1.Pod) {
	c.mu.Lock()
	next, ok := c.static.stopped(pod)
	c.mu.Unlock()
	if ok {
		c.workers.poke(next)
	}
}

// syncMirrorPod creates or replaces a static pod's mirror pod as needed,
// the kubelet's tryReconcileMirrorPods, and reports whether to sync again
// soon: the node is not known yet, or the API request failed. Pods that are
// not static, and every pod without a MirrorClient, are left alone.
func (c *Controller) syncMirrorPod(ctx context.Context, pod *v1.Pod) (retry bool) {
	if c.opts.Mirrors == nil || !podsource.IsStaticPod(pod) {
		return false
	}
	current, _ := c.mirrorSources.MirrorPodFor(pod)
	ctx, cancel := context.WithTimeout(ctx, mirrorRequestTimeout)
	defer cancel()
	err := c.opts.Mirrors.Sync(ctx, pod, current, false)
	switch {
	case err == nil:
		return false
	case errors.Is(err, mirror.ErrNodeUnknown):
		// The node registers once the API server is reachable; the static
		// pods are synced again then (runNodeKnown).
		klog.FromContext(ctx).V(4).Info("No mirror pod for the static pod yet: the node is not registered")
	default:
		klog.FromContext(ctx).Error(err, "Cannot create the static pod's mirror pod; will retry")
	}
	return true
}

// waitForNode waits until Options.Node knows the node, which admission
// needs; false when ctx ended first.
func (c *Controller) waitForNode(ctx context.Context) bool {
	var t clock.Timer
	for {
		if _, ok := c.opts.Node(); ok {
			return true
		}
		if t == nil {
			klog.FromContext(ctx).Info("Waiting for the node's status before admitting pods")
			t = c.clock.NewTimer(nodeKnownPollPeriod)
			defer t.Stop()
		} else {
			t.Reset(nodeKnownPollPeriod)
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
		}
	}
}

// runNodeKnown syncs every static pod once the node is first known (it
// registered), so their mirror pods appear at once rather than at the next
// resync, as the kubelet's fastStaticPodsRegistration; it returns then, or
// when ctx is done.
func (c *Controller) runNodeKnown(ctx context.Context) {
	var t clock.Timer
	for {
		if c.opts.Mirrors.NodeKnown() {
			break
		}
		if t == nil {
			t = c.clock.NewTimer(nodeKnownPollPeriod)
			defer t.Stop()
		} else {
			t.Reset(nodeKnownPollPeriod)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
	c.mu.Lock()
	var static []types.UID
	for uid, r := range c.pods {
		if podsource.IsStaticPod(r.pod) {
			static = append(static, uid)
		}
	}
	c.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("The node is known: syncing the static pods for their mirror pods", "pods", len(static))
	for _, uid := range static {
		c.workers.poke(uid)
	}
}

// deleteOrphanedMirrorPods deletes, off the housekeeping goroutine and one
// round at a time, the mirror pods of static pods that are gone and stopped
// (a mirror pod whose static pod still stops keeps receiving its status),
// as the kubelet's housekeeping. It returns how many orphaned mirror pods
// the sources show.
func (c *Controller) deleteOrphanedMirrorPods(ctx context.Context) int {
	if c.opts.Mirrors == nil {
		return 0
	}
	orphans := c.mirrorSources.OrphanedMirrorPods()
	if len(orphans) == 0 || !c.orphanMirrors.CompareAndSwap(false, true) {
		return len(orphans)
	}
	c.background.Go(func() {
		defer c.orphanMirrors.Store(false)
		ctx, cancel := context.WithTimeout(ctx, mirrorRequestTimeout)
		defer cancel()
		if err := c.opts.Mirrors.DeleteOrphans(ctx, orphans, c.staticPodStopping); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Cannot delete orphaned mirror pods")
		}
	})
	return len(orphans)
}

// staticPodStopping reports whether a static pod with the mirror pod's
// namespace and name is still known to the Controller: gone from its
// source, but its worker has not finished stopping it.
func (c *Controller) staticPodStopping(mirrorPod *v1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.pods {
		if r.pod.Namespace == mirrorPod.Namespace && r.pod.Name == mirrorPod.Name && podsource.IsStaticPod(r.pod) {
			return true
		}
	}
	return false
}
