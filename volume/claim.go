package volume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/storage/ephemeral"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

const (
	// maxClaimRetryDelay caps the back-off of a claim that could not be
	// resolved (Pending, bound elsewhere, its PV missing): the kubelet's
	// populator tries again on each of its passes, so a claim that binds
	// mounts within seconds.
	maxClaimRetryDelay = 4 * time.Second
	// pvcProtectionFinalizer keeps a claim in use from being deleted; a
	// claim being deleted without it must not be mounted (the kubelet's
	// check).
	pvcProtectionFinalizer = "kubernetes.io/pvc-protection"
)

// OperationError is a SetUp error whose message is the whole FailedMount
// event text, not wrapped in "MountVolume.SetUp failed for volume ...":
// for the steps the kubelet names otherwise, e.g. "MountVolume.WaitForAttach
// failed for volume "pv" : ..." or "MountVolume.MountDevice failed ...".
type OperationError struct {
	// Message is the event's message.
	Message string
}

// Error returns Message.
func (e *OperationError) Error() string { return e.Message }

// UnattachedError is a SetUp error for a volume the attach/detach
// controller has not attached to the node yet (the kubelet's
// VerifyControllerAttachedVolume failures): MountPod lists the volume
// among the pod's "unattached volumes" and retries it with the operation
// back-off, recording no FailedMount event for each try (the kubelet logs
// them only) but the pod's "Unable to attach or mount volumes" summary once
// the pod waited podAttachAndMountTimeout.
type UnattachedError struct {
	// Message says why, in the kubelet's words, e.g. "Volume not attached
	// according to node status for volume "pv"".
	Message string
}

// Error returns Message.
func (e *UnattachedError) Error() string { return e.Message }

// unsupportedError is a volume this node can never mount (no plugin, a
// raw block volume): MountPod records the summary event at once.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }

// isClaim reports whether vol is mounted through a PersistentVolumeClaim:
// a persistentVolumeClaim or a generic ephemeral volume.
func isClaim(vol *v1.Volume) bool {
	return vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil
}

// resolvedClaim is a pod volume's claim, its bound PV and the PV's plugin.
type resolvedClaim struct {
	pvc      *v1.PersistentVolumeClaim
	pv       *v1.PersistentVolume
	plugin   Plugin
	readOnly bool
}

// resolveClaim resolves the claim of vol (isClaim) to its bound PV and the
// plugin that mounts it, with the kubelet's populator's checks and error
// texts (createVolumeSpec, getPVCExtractPV, getPVSpec): the claim must
// exist, not be being deleted without the pvc-protection finalizer, be
// Bound to a PV whose claimRef is the claim; a generic ephemeral volume's
// claim (<pod>-<volume>) must be owned by the pod; the PV's volumeMode must
// match how the containers use the volume (raw block devices are refused).
func (m *Manager) resolveClaim(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (*resolvedClaim, error) {
	claimName, readOnly := "", false
	if vol.PersistentVolumeClaim != nil {
		claimName, readOnly = vol.PersistentVolumeClaim.ClaimName, vol.PersistentVolumeClaim.ReadOnly
	} else {
		claimName = ephemeral.VolumeClaimName(pod, vol)
	}
	wrap := func(err error) error {
		return fmt.Errorf("error processing PVC %s/%s: %w", pod.Namespace, claimName, err)
	}
	if m.opts.Client == nil {
		return nil, wrap(errors.New("failed to fetch PVC from API server: the node agent has no API client"))
	}
	pvc, err := m.opts.Client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		return nil, wrap(fmt.Errorf("failed to fetch PVC from API server: %w", err))
	}
	if pvc.DeletionTimestamp != nil && !slices.Contains(pvc.Finalizers, pvcProtectionFinalizer) {
		return nil, wrap(errors.New("PVC is being deleted"))
	}
	if pvc.Status.Phase != v1.ClaimBound {
		return nil, wrap(errors.New("PVC is not bound"))
	}
	if pvc.Spec.VolumeName == "" {
		return nil, wrap(errors.New("PVC has empty pvc.Spec.VolumeName"))
	}
	if vol.Ephemeral != nil {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return nil, err
		}
	}
	pv, err := m.opts.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return nil, wrap(fmt.Errorf("failed to fetch PV %s from API server: %w", pvc.Spec.VolumeName, err))
	}
	if pv.Spec.ClaimRef == nil {
		return nil, wrap(fmt.Errorf("found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", pv.Name))
	}
	if pv.Spec.ClaimRef.UID != pvc.UID {
		return nil, wrap(fmt.Errorf("found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s", pv.Name, pv.Spec.ClaimRef.UID, pvc.UID))
	}
	mode := v1.PersistentVolumeFilesystem
	if pv.Spec.VolumeMode != nil {
		mode = *pv.Spec.VolumeMode
	}
	mounts, devices := volumeUses(pod, vol.Name)
	if mounts && mode != v1.PersistentVolumeFilesystem {
		return nil, fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeMounts", vol.Name, mode)
	}
	if devices && mode != v1.PersistentVolumeBlock {
		return nil, fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeDevices", vol.Name, mode)
	}
	if devices {
		return nil, &unsupportedError{fmt.Sprintf("volume %s (PV %s) has volumeMode Block: raw block volumes (volumeDevices) are not supported by this node agent", vol.Name, pv.Name)}
	}
	plugin, err := m.findPersistentVolumePlugin(vol.Name, pv)
	if err != nil {
		return nil, err
	}
	return &resolvedClaim{pvc: pvc, pv: pv, plugin: plugin, readOnly: readOnly}, nil
}

// volumeUses reports whether a container of pod mounts volume name
// (volumeMounts) or uses it as a block device (volumeDevices).
func volumeUses(pod *v1.Pod, name string) (mounts, devices bool) {
	visitContainers(pod, func(c *v1.Container) bool {
		for _, vm := range c.VolumeMounts {
			mounts = mounts || vm.Name == name
		}
		for _, vd := range c.VolumeDevices {
			devices = devices || vd.Name == name
		}
		return true
	})
	return mounts, devices
}

// findPersistentVolumePlugin returns the one PersistentVolumePlugin
// supporting pv, the claim of pod volume volName.
func (m *Manager) findPersistentVolumePlugin(volName string, pv *v1.PersistentVolume) (Plugin, error) {
	var matched []string
	var plugin Plugin
	for _, p := range m.plugins {
		if pp, ok := p.(PersistentVolumePlugin); ok && pp.CanSupportPersistentVolume(pv) {
			matched = append(matched, p.Name())
			plugin = p
		}
	}
	switch len(matched) {
	case 1:
		return plugin, nil
	case 0:
		return nil, &unsupportedError{fmt.Sprintf("failed to get Plugin from volumeSpec for volume %q err=no volume plugin matched: PersistentVolume %s: %s volumes are not supported by this node agent",
			volName, pv.Name, persistentVolumeKind(pv))}
	}
	return nil, &unsupportedError{fmt.Sprintf("failed to get Plugin from volumeSpec for volume %q err=multiple volume plugins matched: %s",
		volName, strings.Join(matched, ","))}
}

// checkNodeAffinity checks pv's node affinity against the node's labels,
// as the kubelet's operation generator does before mounting a PV.
func (m *Manager) checkNodeAffinity(pv *v1.PersistentVolume) error {
	var labels map[string]string
	if m.opts.NodeLabels != nil {
		labels = m.opts.NodeLabels()
	}
	return storagehelpers.CheckNodeAffinity(pv, labels)
}

// persistentVolumeKind names the kind of source pv uses, for messages.
func persistentVolumeKind(pv *v1.PersistentVolume) string {
	s := pv.Spec.PersistentVolumeSource
	switch {
	case s.HostPath != nil:
		return "hostPath"
	case s.Local != nil:
		return "local"
	case s.CSI != nil:
		return "csi"
	case s.NFS != nil:
		return "nfs"
	case s.ISCSI != nil:
		return "iscsi"
	case s.FC != nil:
		return "fc"
	case s.RBD != nil:
		return "rbd"
	case s.CephFS != nil:
		return "cephfs"
	case s.Glusterfs != nil:
		return "glusterfs"
	case s.FlexVolume != nil:
		return "flexVolume"
	case s.GCEPersistentDisk != nil:
		return "gcePersistentDisk"
	case s.AWSElasticBlockStore != nil:
		return "awsElasticBlockStore"
	case s.AzureDisk != nil:
		return "azureDisk"
	case s.AzureFile != nil:
		return "azureFile"
	case s.Cinder != nil:
		return "cinder"
	case s.VsphereVolume != nil:
		return "vsphereVolume"
	case s.PortworxVolume != nil:
		return "portworxVolume"
	}
	return "unknown"
}
