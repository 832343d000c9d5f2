package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodekit/nodekit/podstate"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// RemovePod removes everything of a pod that has terminated: its containers
// (killing any still running), its sandboxes, its log directory and its
// directory under PodsDir (emptyDir volumes included). Call it once the
// pod's final status has been reported. It blocks for the CRI calls.
func (m *PodManager) RemovePod(ctx context.Context, uid types.UID) error {
	m.forget(uid)
	selector := map[string]string{LabelPodUID: string(uid)}
	containers, err := m.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("remove pod %s: list containers: %w", uid, err)
	}
	var errs []error
	for _, c := range containers {
		if err := m.removeContainer(ctx, c.GetId()); err != nil {
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
		logDirs = append(logDirs, PodLogsDirectory(m.opts.PodLogsDir, md.GetNamespace(), md.GetName(), uid))
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
	for _, dir := range append(slices.Compact(slices.Sorted(slices.Values(logDirs))), m.podDir(uid)) {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove pod %s: %w", uid, errors.Join(errs...))
	}
	return nil
}

// GarbageCollect removes what the runtime no longer needs: exited
// containers of live pods beyond the newest DeadContainersPerContainer of
// each container, not-ready sandboxes without containers other than a
// pod's newest, and all of a pod for which removed(uid) is true and that
// has nothing running (RemovePod). removed tells pods that are gone from
// the agent's configuration and finished terminating. It blocks for the CRI
// calls and returns the errors joined.
func (m *PodManager) GarbageCollect(ctx context.Context, removed func(types.UID) bool) error {
	logger := klog.FromContext(ctx)
	pods, err := m.ListPods(ctx, true)
	if err != nil {
		return fmt.Errorf("garbage collect: %w", err)
	}
	var errs []error
	for _, p := range pods {
		running := slices.ContainsFunc(p.Containers, func(c podstate.RunningContainer) bool { return c.State == podstate.ContainerStateRunning }) ||
			slices.ContainsFunc(p.Sandboxes, func(c podstate.RunningContainer) bool { return c.State == podstate.ContainerStateRunning })
		if removed(p.ID) {
			if running {
				logger.V(2).Info("Not removing a pod that still runs", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.ID)
				continue
			}
			if err := m.RemovePod(ctx, p.ID); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		// p.Containers are newest first.
		seen := map[string]int{}
		inUse := map[string]bool{}
		for _, c := range p.Containers {
			if c.State == podstate.ContainerStateRunning || c.State == podstate.ContainerStateCreated || c.State == podstate.ContainerStateUnknown {
				inUse[c.SandboxID] = true
				continue
			}
			seen[c.Name]++
			if seen[c.Name] <= m.opts.DeadContainersPerContainer {
				inUse[c.SandboxID] = true
				continue
			}
			if err := m.removeContainer(ctx, c.ID); err != nil {
				errs = append(errs, err)
			}
		}
		for i, sb := range p.Sandboxes {
			if i == 0 || sb.State == podstate.ContainerStateRunning || inUse[sb.ID] {
				continue
			}
			if err := m.rs.RemovePodSandbox(ctx, sb.ID); err != nil {
				errs = append(errs, fmt.Errorf("remove sandbox %s of pod %s: %w", sb.ID, p.ID, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("garbage collect: %w", errors.Join(errs...))
	}
	return nil
}
