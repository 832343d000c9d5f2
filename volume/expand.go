package volume

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Event reasons of node expansion, the kubelet's.
const (
	eventVolumeResizeFailed         = "VolumeResizeFailed"
	eventFileSystemResizeSuccessful = "FileSystemResizeSuccessful"
)

// expandClaims looks at the claims of the mounted volumes of plugins that
// are Expanders and grows those whose claim waits for the node.
func (m *Manager) expandClaims(ctx context.Context) {
	if m.opts.Client == nil {
		return
	}
	type job struct {
		uid  types.UID
		name string
	}
	var jobs []job
	m.mu.Lock()
	for uid, ps := range m.pods {
		for name, vs := range ps.volumes {
			if _, ok := vs.plugin.(Expander); ok && vs.mounted && vs.pvc != nil {
				jobs = append(jobs, job{uid, name})
			}
		}
	}
	m.mu.Unlock()
	for _, j := range jobs {
		if ctx.Err() != nil {
			return
		}
		m.expandClaim(ctx, j.uid, j.name)
	}
}

// expandClaim expands one mounted volume of pod uid when its claim asks
// for it (nodeExpansionRequired), as the kubelet's node expander: the
// claim's allocatedResourceStatuses set NodeResizeInProgress, the plugin
// called, then the claim's status.capacity set to the PV's and its resize
// status and resize conditions removed (a FileSystemResizeSuccessful
// event), or the NodeResizeError condition and a VolumeResizeFailed event
// with the plugin's error, tried again at the next resync.
func (m *Manager) expandClaim(ctx context.Context, uid types.UID, volName string) {
	logger := klog.FromContext(ctx)
	ps := m.lockPod(uid, false)
	if ps == nil {
		return
	}
	defer ps.lock.Unlock()
	m.mu.Lock()
	vs := ps.volumes[volName]
	pod := ps.pod
	if vs == nil || !vs.mounted || vs.pvc == nil || pod == nil {
		m.mu.Unlock()
		return
	}
	plugin, pvcName, pvName := vs.plugin.(Expander), vs.pvc.Name, vs.pv.Name
	m.mu.Unlock()

	core := m.opts.Client.CoreV1()
	pvc, err := core.PersistentVolumeClaims(pod.Namespace).Get(ctx, pvcName, metav1.GetOptions{})
	if err != nil {
		logger.V(2).Info("Cannot read a mounted volume's claim", "pod", klog.KObj(pod), "pvc", pvcName, "err", err)
		return
	}
	pv, err := core.PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		logger.V(2).Info("Cannot read a mounted volume's PV", "pod", klog.KObj(pod), "pv", pvName, "err", err)
		return
	}
	newSize, ok := nodeExpansionRequired(pvc, pv)
	if !ok {
		return
	}
	pvc, err = m.setResizeStatus(ctx, pvc, v1.PersistentVolumeClaimNodeResizeInProgress)
	if err != nil {
		logger.Error(err, "Cannot mark the claim's node expansion in progress", "pvc", klog.KObj(pvc))
		return
	}
	m.mu.Lock()
	vs.pvc, vs.pv = pvc, pv
	vc := m.stateContext(uid, vs)
	vc.Pod = pod
	m.mu.Unlock()
	start := m.clock.Now()
	_, err = plugin.ExpandVolume(ctx, vc, newSize)
	m.metrics.observe(vs.plugin.Name(), opExpand, err, m.clock.Since(start))
	if err != nil {
		msg := fmt.Sprintf("NodeExpandVolume.NodeExpandVolume failed for volume %q : %v", vc.Name, err)
		logger.Error(err, "Node expansion failed", "pod", klog.KObj(pod), "volume", vc.Name)
		if m.recorder != nil {
			m.recorder.Event(pod, v1.EventTypeWarning, eventVolumeResizeFailed, msg)
		}
		if serr := m.markResizeError(ctx, pvc, err); serr != nil {
			logger.Error(serr, "Cannot mark the claim's node expansion failed", "pvc", klog.KObj(pvc))
		}
		return
	}
	pvc = pvc.DeepCopy()
	if pvc.Status.Capacity == nil {
		pvc.Status.Capacity = v1.ResourceList{}
	}
	pvc.Status.Capacity[v1.ResourceStorage] = newSize
	delete(pvc.Status.AllocatedResourceStatuses, v1.ResourceStorage)
	pvc.Status.Conditions = slices.DeleteFunc(pvc.Status.Conditions, func(c v1.PersistentVolumeClaimCondition) bool {
		return c.Type == v1.PersistentVolumeClaimFileSystemResizePending || c.Type == v1.PersistentVolumeClaimNodeResizeError
	})
	updated, err := core.PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
	if err != nil {
		// The next resync expands again (a no-op for the driver) and
		// records the size.
		logger.Error(err, "Cannot record the claim's new capacity", "pvc", klog.KObj(pvc))
		return
	}
	m.mu.Lock()
	vs.pvc = updated
	m.mu.Unlock()
	logger.Info("Volume expanded on the node", "pod", klog.KObj(pod), "volume", vc.Name, "size", newSize.String())
	if m.recorder != nil {
		m.recorder.Event(pod, v1.EventTypeNormal, eventFileSystemResizeSuccessful,
			fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", vc.Name, m.opts.NodeName))
	}
}

// nodeExpansionRequired returns the size to expand the claim's volume to on
// the node: the PV's capacity, when it is larger than the claim's status
// capacity and the resizer left the claim to the node
// (allocatedResourceStatuses NodeResizePending, or NodeResizeInProgress
// from an earlier try), the kubelet's runPreCheck.
func nodeExpansionRequired(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) (resource.Quantity, bool) {
	pvSize, ok := pv.Spec.Capacity[v1.ResourceStorage]
	if !ok {
		return resource.Quantity{}, false
	}
	if cur, ok := pvc.Status.Capacity[v1.ResourceStorage]; ok && cur.Cmp(pvSize) >= 0 {
		return resource.Quantity{}, false
	}
	switch pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] {
	case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
		return pvSize, true
	}
	return resource.Quantity{}, false
}

// setResizeStatus sets the claim's allocatedResourceStatuses for storage.
func (m *Manager) setResizeStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, st v1.ClaimResourceStatus) (*v1.PersistentVolumeClaim, error) {
	if pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] == st {
		return pvc, nil
	}
	pvc = pvc.DeepCopy()
	if pvc.Status.AllocatedResourceStatuses == nil {
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = st
	return m.opts.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
}

// markResizeError adds the NodeResizeError condition with the failure, as
// the kubelet's MarkNodeExpansionFailedCondition; the claim stays
// NodeResizeInProgress and is tried again.
func (m *Manager) markResizeError(ctx context.Context, pvc *v1.PersistentVolumeClaim, cause error) error {
	pvc = pvc.DeepCopy()
	pvc.Status.Conditions = append(slices.DeleteFunc(pvc.Status.Conditions, func(c v1.PersistentVolumeClaimCondition) bool {
		return c.Type == v1.PersistentVolumeClaimNodeResizeError
	}), v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(m.clock.Now().Truncate(time.Second)), Message: fmt.Sprintf("failed to expand pvc with %v", cause)})
	_, err := m.opts.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
	return err
}
