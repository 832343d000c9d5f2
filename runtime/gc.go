package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodekit/nodekit/podstate"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// RemovePod removes everything the runtime keeps of a pod that has
// terminated: its containers (killing any still running), its sandboxes,
// its log directory, and the files the PodManager wrote in its directory
// under PodsDir (etc-hosts and the termination message files in
// containers/). The pod directory itself and its volumes are the volume
// manager's: RemovePod never deletes through them. Call it once the pod's
// final status has been reported. It blocks for the CRI calls.
func (m *PodManager) RemovePod(ctx context.Context, uid types.UID) error {
	m.forget(uid)
	selector := map[string]string{LabelPodUID: string(uid)}
	containers, err := m.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("remove pod %s: list containers: %w", uid, err)
	}
	var errs []error
	for _, c := range containers {
		if err := m.removeContainer(ctx, c.GetId(), false); err != nil {
			errs = append(errs, err)
		}
	}
	sandboxes, err := m.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("remove pod %s: list sandboxes: %w", uid, err)
	}
	var logDirs []string
	for _, sb := range sandboxes {
		md := sb.GetMetadata()
		// The runtime's word for the pod's name and namespace is trusted
		// only for a directory right under PodLogsDir: a name with a path
		// in it must not make RemoveAll reach out of it.
		if dir := PodLogsDirectory(m.opts.PodLogsDir, md.GetNamespace(), md.GetName(), uid); filepath.Dir(dir) == filepath.Clean(m.opts.PodLogsDir) {
			logDirs = append(logDirs, dir)
		} else {
			klog.FromContext(ctx).Info("Ignoring a sandbox's metadata that names no log directory of the pod", "podUID", uid, "sandboxID", sb.GetId(), "namespace", md.GetNamespace(), "name", md.GetName())
		}
		if err := m.rs.RemovePodSandbox(ctx, sb.GetId()); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", sb.GetId(), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove pod %s: %w", uid, errors.Join(errs...))
	}
	// Log directories of sandboxes removed earlier are found by UID.
	if entries, err := os.ReadDir(m.opts.PodLogsDir); err == nil {
		for _, e := range entries {
			if e.IsDir() && strings.HasSuffix(e.Name(), "_"+string(uid)) {
				logDirs = append(logDirs, filepath.Join(m.opts.PodLogsDir, e.Name()))
			}
		}
	}
	podDir := m.podDir(uid)
	for _, dir := range append(slices.Compact(slices.Sorted(slices.Values(logDirs))), filepath.Join(podDir, "containers")) {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(filepath.Join(podDir, "etc-hosts")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	// The directory goes too when nothing else is left in it (rmdir never
	// removes a mount point nor a directory with content); otherwise the
	// volume manager's cleanup of orphaned pods removes it.
	_ = syscall.Rmdir(podDir)
	if len(errs) > 0 {
		return fmt.Errorf("remove pod %s: %w", uid, errors.Join(errs...))
	}
	return nil
}

// ContainerGCPolicy is the kubelet's container garbage collection policy
// (its --minimum-container-ttl-duration, --maximum-dead-containers-per-container
// and --maximum-dead-containers flags).
type ContainerGCPolicy struct {
	// MinAge is how long ago a dead container must have been created
	// before it is removed (kubelet default 0).
	MinAge time.Duration
	// MaxPerPodContainer is how many dead instances of each container of a
	// pod are kept (kubelet default 1, which keeps the last exit status and
	// the restart count); negative means no limit.
	MaxPerPodContainer int
	// MaxContainers is how many dead containers the node keeps in all
	// (kubelet default -1: no limit); when over, every container keeps
	// the same share (at least one), then the oldest go.
	MaxContainers int
}

// DefaultContainerGCPolicy returns the kubelet's default policy: no minimum
// age, one dead instance per container, no node-wide limit.
func DefaultContainerGCPolicy() ContainerGCPolicy {
	return ContainerGCPolicy{MaxPerPodContainer: 1, MaxContainers: -1}
}

// GarbageCollect removes what the runtime no longer needs, as the kubelet's
// container garbage collector: dead (not running) containers created at
// least ContainerGC.MinAge ago beyond MaxPerPodContainer instances of each
// container and MaxContainers on the node, oldest first (a container in
// unknown state is stopped first); not-ready sandboxes without containers
// other than a live pod's newest; and everything of a pod for which
// removed(uid) is true that runs nothing (RemovePod), pod log directories
// included; and, whatever removed says, the dangling links in
// ContainerLogsDir of containers that exited or are gone. removed tells the
// pods that are gone from the agent's configuration and finished
// terminating; it is only asked once every pod source has reported. It
// blocks for the CRI calls and returns the errors joined.
func (m *PodManager) GarbageCollect(ctx context.Context, removed func(types.UID) bool) error {
	return m.garbageCollect(ctx, removed, nil)
}

// DeleteAllUnusedContainers is GarbageCollect that also removes every dead
// container and not-ready sandbox of the pods active does not report (pods
// that terminated but are not deleted yet, pods nobody knows), whatever the
// policy's limits, as the kubelet's DeleteAllUnusedContainers does for the
// eviction manager under disk pressure. active is typically "in the
// pods.Store" (admitted and not terminated).
func (m *PodManager) DeleteAllUnusedContainers(ctx context.Context, removed, active func(types.UID) bool) error {
	return m.garbageCollect(ctx, removed, func(uid types.UID) bool { return !active(uid) })
}

// gcUnit is the dead instances of one container of one pod, newest first.
type gcUnit struct {
	uid  types.UID
	name string
}

func (m *PodManager) garbageCollect(ctx context.Context, removed, unused func(types.UID) bool) error {
	logger := klog.FromContext(ctx)
	pods, err := m.ListPods(ctx, true)
	if err != nil {
		return fmt.Errorf("garbage collect: %w", err)
	}
	policy := m.gc
	newest := m.clock.Now().Add(-policy.MinAge)
	var errs []error
	gone := map[string]bool{} // removed container IDs
	remove := func(c podstate.RunningContainer) {
		if c.State == podstate.ContainerStateUnknown {
			if err := m.killContainer(ctx, nil, c.ID, c.Name, "Container is in unknown state, try killing it before removal", killReasonOther, nil, nil); err != nil {
				logger.Error(err, "Failed to stop container", "containerID", c.ID)
				return
			}
		}
		if err := m.removeContainer(ctx, c.ID, false); err != nil {
			errs = append(errs, err)
			return
		}
		gone[c.ID] = true
	}
	units := map[gcUnit][]podstate.RunningContainer{}
	var live []podstate.RunningPod
	present := map[types.UID]bool{}
	for _, p := range pods {
		present[p.ID] = true
		running := slices.ContainsFunc(p.Containers, func(c podstate.RunningContainer) bool { return c.State == podstate.ContainerStateRunning }) ||
			slices.ContainsFunc(p.Sandboxes, func(c podstate.RunningContainer) bool { return c.State == podstate.ContainerStateRunning })
		young := slices.ContainsFunc(p.Containers, func(c podstate.RunningContainer) bool { return c.CreatedAt.After(newest) })
		isRemoved := removed(p.ID)
		if isRemoved && !running && !young {
			if err := m.RemovePod(ctx, p.ID); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if isRemoved && running {
			logger.V(2).Info("Not removing a pod that still runs", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.ID)
		}
		all := isRemoved || (unused != nil && unused(p.ID))
		for _, c := range p.Containers { // newest first
			if c.State == podstate.ContainerStateRunning || c.CreatedAt.After(newest) {
				continue
			}
			if all {
				remove(c)
				continue
			}
			k := gcUnit{p.ID, c.Name}
			units[k] = append(units[k], c)
		}
		live = append(live, p)
	}
	enforce := func(keep int) {
		for k, cs := range units {
			if len(cs) > keep {
				for _, c := range cs[keep:] {
					remove(c)
				}
				units[k] = cs[:keep]
			}
		}
	}
	if policy.MaxPerPodContainer >= 0 {
		enforce(policy.MaxPerPodContainer)
	}
	count := func() int {
		n := 0
		for _, cs := range units {
			n += len(cs)
		}
		return n
	}
	if policy.MaxContainers >= 0 && count() > policy.MaxContainers {
		enforce(max(policy.MaxContainers/max(len(units), 1), 1))
		if n := count(); n > policy.MaxContainers {
			var flat []podstate.RunningContainer
			for _, cs := range units {
				flat = append(flat, cs...)
			}
			slices.SortStableFunc(flat, func(a, b podstate.RunningContainer) int { return b.CreatedAt.Compare(a.CreatedAt) })
			for _, c := range flat[policy.MaxContainers:] {
				remove(c)
			}
		}
	}

	// Sandboxes that are not ready and hold no container: all of a removed
	// (or unused) pod's, all but the newest of a live pod's.
	for _, p := range live {
		hasContainers := map[string]bool{}
		for _, c := range p.Containers {
			if !gone[c.ID] {
				hasContainers[c.SandboxID] = true
			}
		}
		all := removed(p.ID) || (unused != nil && unused(p.ID))
		for i, sb := range p.Sandboxes { // newest first
			if (i == 0 && !all) || sb.State == podstate.ContainerStateRunning || hasContainers[sb.ID] {
				continue
			}
			if err := m.rs.StopPodSandbox(ctx, sb.ID); err != nil {
				logger.Error(err, "Failed to stop sandbox before removing", "sandboxID", sb.ID)
				continue
			}
			if err := m.rs.RemovePodSandbox(ctx, sb.ID); err != nil {
				errs = append(errs, fmt.Errorf("remove sandbox %s of pod %s: %w", sb.ID, p.ID, err))
			}
		}
	}

	// Log directories of removed pods the runtime no longer has.
	if entries, err := os.ReadDir(m.opts.PodLogsDir); err == nil {
		for _, e := range entries {
			i := strings.LastIndexByte(e.Name(), '_')
			uid := types.UID(e.Name()[i+1:])
			if !e.IsDir() || i < 0 || present[uid] || !removed(uid) {
				continue
			}
			logger.V(4).Info("Removing pod logs", "podUID", uid)
			if err := os.RemoveAll(filepath.Join(m.opts.PodLogsDir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	m.removeDeadLogLinks(ctx)
	if len(errs) > 0 {
		return fmt.Errorf("garbage collect: %w", errors.Join(errs...))
	}
	return nil
}
