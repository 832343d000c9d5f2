package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/mount-utils"

	"github.com/nodekit/nodekit/volume"
)

// NodeClients gives the plugin a client of a registered driver's Node
// service: *Drivers. NodeClient's error for a driver that is not
// registered is the kubelet's "driver name <name> not found in the list of
// registered CSI drivers".
type NodeClients interface {
	NodeClient(driverName string) (csipb.NodeClient, error)
}

// PluginOptions configure a Plugin.
type PluginOptions struct {
	// RootDir is the agent's root directory (the kubelet's --root-dir):
	// staging paths are under <RootDir>/plugins/kubernetes.io/csi.
	RootDir string
	// NodeName names the node: vol_data.json and the VolumeAttachment's
	// name carry it.
	NodeName string
	// Drivers are the registered drivers (*Drivers).
	Drivers NodeClients
	// Client reads CSIDriver objects (fsGroupPolicy, podInfoOnMount,
	// tokenRequests, requiresRepublish, attachRequired) and
	// VolumeAttachments. nil: no CSIDriver is known and volumes needing
	// attachment cannot mount.
	Client kubernetes.Interface
}

// Plugin is the CSI volume plugin (volume.Plugin, "kubernetes.io/csi"):
// it mounts PersistentVolumes with a csi source and inline CSI
// (ephemeral) volumes through the node's registered drivers, as the
// kubelet's CSI plugin does, with its paths and vol_data.json so that a
// kubelet and nodekit find each other's volumes:
//
//	<root>/plugins/kubernetes.io/csi/<driver>/<sha256 handle>/globalmount   staging path (STAGE_UNSTAGE_VOLUME)
//	<root>/plugins/kubernetes.io/csi/<driver>/<sha256 handle>/vol_data.json
//	<root>/pods/<uid>/volumes/kubernetes.io~csi/<pv or volume>/mount        publish target
//	<root>/pods/<uid>/volumes/kubernetes.io~csi/<pv or volume>/vol_data.json
//
// SetUp waits, when the CSIDriver requires attachment (or no CSIDriver
// exists, as the kubelet), until the node's status lists the volume in
// volumesInUse and volumesAttached (a *volume.UnattachedError meanwhile:
// no event, the volume among the pod's "unattached volumes") and its
// VolumeAttachment is attached, stages the
// volume once when the driver has STAGE_UNSTAGE_VOLUME, and publishes it;
// a target already mounted that this process did not publish (after a
// restart) is adopted without a call. TearDown unpublishes, and unstages
// only when no other pod's vol_data.json names the volume. Failures are
// returned with the driver's message; the Manager retries them with its
// back-off and nothing is deleted but empty directories and
// vol_data.json.
type Plugin struct {
	opts PluginOptions

	// mu serializes stage and unstage decisions (a staging path shared by
	// pods set up and torn down at once) and guards the fields below.
	mu sync.Mutex
	// staged are the staging paths this process staged or saw staged.
	staged map[string]bool
	// published are the publish targets this process published or
	// adopted: a SetUp of one of them is a republish.
	published map[string]bool
	// drivers are the CSIDriver objects seen by SetUp, by name (nil: none
	// exists), for VolumeInUseName and RequiresRemount.
	drivers map[string]*storagev1.CSIDriver
}

var (
	_ NodeClients                   = (*Drivers)(nil)
	_ volume.Plugin                 = (*Plugin)(nil)
	_ volume.PersistentVolumePlugin = (*Plugin)(nil)
	_ volume.InUseReporter          = (*Plugin)(nil)
	_ volume.DiskInUseReporter      = (*Plugin)(nil)
	_ volume.Remounter              = (*Plugin)(nil)
	_ volume.Expander               = (*Plugin)(nil)
)

// NewPlugin returns the CSI plugin. RootDir, NodeName and Drivers are
// required.
func NewPlugin(opts PluginOptions) (*Plugin, error) {
	if opts.RootDir == "" || opts.NodeName == "" || opts.Drivers == nil {
		return nil, errors.New("csi plugin: RootDir, NodeName and Drivers are required")
	}
	return &Plugin{opts: opts, staged: map[string]bool{}, published: map[string]bool{}, drivers: map[string]*storagev1.CSIDriver{}}, nil
}

// Name is "kubernetes.io/csi".
func (p *Plugin) Name() string { return PluginName }

// CanSupport is true for inline CSI volumes.
func (p *Plugin) CanSupport(vol *v1.Volume) bool { return vol.CSI != nil }

// CanSupportPersistentVolume is true for PVs with a csi source.
func (p *Plugin) CanSupportPersistentVolume(pv *v1.PersistentVolume) bool {
	return pv.Spec.CSI != nil
}

// source is what SetUp needs of a volume, from the PV or the inline source.
type source struct {
	driver, handle, mode, fsType string
	readOnly                     bool
	attrs                        map[string]string
	accessMode                   v1.PersistentVolumeAccessMode
	mountOptions                 []string
	stageSecret, publishSecret   *v1.SecretReference
}

func sourceOf(vc *volume.VolumeContext) (source, error) {
	if vc.PV != nil {
		s := vc.PV.Spec.CSI
		src := source{driver: s.Driver, handle: s.VolumeHandle, mode: modePersistent, fsType: s.FSType,
			readOnly: vc.ReadOnly || s.ReadOnly, attrs: s.VolumeAttributes, accessMode: v1.ReadWriteOnce,
			mountOptions: vc.PV.Spec.MountOptions, stageSecret: s.NodeStageSecretRef, publishSecret: s.NodePublishSecretRef}
		if len(vc.PV.Spec.AccessModes) > 0 {
			src.accessMode = vc.PV.Spec.AccessModes[0]
		}
		return src, nil
	}
	if vc.Volume == nil || vc.Volume.CSI == nil {
		return source{}, fmt.Errorf("volume %s: no csi source", vc.Name)
	}
	s := vc.Volume.CSI
	src := source{driver: s.Driver, handle: ephemeralHandle(vc.PodUID, vc.Name), mode: modeEphemeral,
		readOnly: s.ReadOnly != nil && *s.ReadOnly, attrs: s.VolumeAttributes, accessMode: v1.ReadWriteOnce}
	if s.FSType != nil {
		src.fsType = *s.FSType
	}
	if s.NodePublishSecretRef != nil {
		src.publishSecret = &v1.SecretReference{Name: s.NodePublishSecretRef.Name, Namespace: vc.Pod.Namespace}
	}
	return src, nil
}

// SetUp stages (once) and publishes the volume; see Plugin.
func (p *Plugin) SetUp(ctx context.Context, vc *volume.VolumeContext) (volume.Mounted, error) {
	src, err := sourceOf(vc)
	if err != nil {
		return volume.Mounted{}, err
	}
	target := filepath.Join(vc.Path, "mount")
	out := volume.Mounted{Path: target, ReadOnly: src.readOnly, SELinuxRelabel: true}
	p.mu.Lock()
	republish := p.published[target]
	p.mu.Unlock()
	if !republish {
		if notMnt, err := vc.Host.Mounter().IsLikelyNotMountPoint(target); err == nil && !notMnt {
			// Published before a restart (by this agent or a kubelet):
			// adopted without a driver call, whether or not the driver
			// has registered again yet.
			p.mu.Lock()
			p.published[target] = true
			p.mu.Unlock()
			if _, err := p.csiDriver(ctx, src.driver); err != nil {
				klog.FromContext(ctx).V(2).Info("CSIDriver not read for an adopted volume", "volume", vc.Name, "err", err)
			}
			klog.FromContext(ctx).V(2).Info("CSI volume already published, adopted", "volume", vc.Name, "target", target)
			return out, nil
		}
	}
	driver, err := p.csiDriver(ctx, src.driver)
	if err != nil {
		return volume.Mounted{}, err
	}
	if err := supportsMode(driver, src); err != nil {
		return volume.Mounted{}, err
	}
	client, err := p.opts.Drivers.NodeClient(src.driver)
	if err != nil {
		return volume.Mounted{}, fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	caps, err := nodeCapabilities(ctx, client)
	if err != nil {
		return volume.Mounted{}, fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to check for STAGE_UNSTAGE_VOLUME capability: %w", err)
	}
	var publishContext map[string]string
	if src.mode == modePersistent && attachRequired(driver) {
		if err := p.verifyAttached(ctx, vc.Name, src); err != nil {
			return volume.Mounted{}, err
		}
		if publishContext, err = p.attached(ctx, src); err != nil {
			return volume.Mounted{}, &volume.OperationError{Message: fmt.Sprintf("MountVolume.WaitForAttach failed for volume %q : %v", vc.Name, err)}
		}
	}
	capability := volumeCapability(src, caps, vc.FSGroup)
	staging := ""
	if src.mode == modePersistent {
		staging = stagingPath(p.opts.RootDir, src.driver, src.handle)
		if err := p.stage(ctx, vc, client, src, caps, capability, publishContext, staging); err != nil {
			return volume.Mounted{}, err
		}
		if !caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
			staging = ""
		}
	}
	if err := os.MkdirAll(vc.Path, 0o750); err != nil {
		return volume.Mounted{}, fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to create dir %s: %w", vc.Path, err)
	}
	if err := saveVolData(vc.Path, map[string]string{
		keySpecVolID:     vc.Name,
		keyVolumeHandle:  src.handle,
		keyDriverName:    src.driver,
		keyNodeName:      p.opts.NodeName,
		keyLifecycleMode: src.mode,
		keyAttachmentID:  attachmentName(src.handle, src.driver, p.opts.NodeName),
	}); err != nil {
		return volume.Mounted{}, err
	}
	secrets, err := p.secrets(ctx, vc, src.publishSecret, "NodePublishSecretRef")
	if err != nil {
		return volume.Mounted{}, err
	}
	attrs := maps.Clone(src.attrs)
	if driver != nil && driver.Spec.PodInfoOnMount != nil && *driver.Spec.PodInfoOnMount {
		attrs = mergeInto(attrs, podInfo(vc.Pod, src.mode))
	}
	tokens, inSecrets, err := p.tokens(ctx, vc, driver)
	if err != nil {
		return volume.Mounted{}, fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to get service accoount token attributes: %w", err)
	}
	if inSecrets {
		secrets = mergeInto(secrets, tokens)
	} else {
		attrs = mergeInto(attrs, tokens)
	}
	_, err = client.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId:          src.handle,
		PublishContext:    publishContext,
		StagingTargetPath: staging,
		TargetPath:        target,
		VolumeCapability:  capability,
		Readonly:          src.readOnly,
		Secrets:           secrets,
		VolumeContext:     attrs,
	})
	if err != nil {
		if finalError(err) && !republish {
			if rmErr := removeMountDir(vc.Host.Mounter(), target); rmErr != nil {
				klog.FromContext(ctx).Error(rmErr, "Failed to remove the publish target after a NodePublish error", "target", target)
			}
		}
		// The driver's error as it is, as the kubelet's.
		return volume.Mounted{}, err
	}
	p.mu.Lock()
	p.published[target] = true
	p.mu.Unlock()
	if !caps[csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP] && applyFSGroup(driver, src, vc) {
		if err := volume.SetVolumeOwnership(target, vc.FSGroup, false); err != nil {
			return volume.Mounted{}, fmt.Errorf("applyFSGroup failed for vol %s: %w", src.handle, err)
		}
	}
	return out, nil
}

// stage writes the staging path's vol_data.json and calls NodeStageVolume
// once per staging path in this process (the call is idempotent for the
// driver, and a staging path already mounted is adopted).
func (p *Plugin) stage(ctx context.Context, vc *volume.VolumeContext, client csipb.NodeClient, src source, caps map[csipb.NodeServiceCapability_RPC_Type]bool,
	capability *csipb.VolumeCapability, publishContext map[string]string, staging string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.staged[staging] {
		return nil
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return fmt.Errorf("kubernetes.io/csi: attacher.MountDevice failed to create dir %s: %w", staging, err)
	}
	if err := saveVolData(filepath.Dir(staging), map[string]string{keyVolumeHandle: src.handle, keyDriverName: src.driver}); err != nil {
		return err
	}
	if !caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		p.staged[staging] = true
		return nil
	}
	if notMnt, err := vc.Host.Mounter().IsLikelyNotMountPoint(staging); err == nil && !notMnt {
		p.staged[staging] = true
		return nil
	}
	secrets, err := p.secrets(ctx, vc, src.stageSecret, "NodeStageSecretRef")
	if err != nil {
		return err
	}
	_, err = client.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId:          src.handle,
		PublishContext:    publishContext,
		StagingTargetPath: staging,
		VolumeCapability:  capability,
		Secrets:           secrets,
		VolumeContext:     src.attrs,
	})
	if err != nil {
		if finalError(err) {
			if rmErr := removeMountDir(vc.Host.Mounter(), staging); rmErr != nil {
				klog.FromContext(ctx).Error(rmErr, "Failed to remove the staging path after a NodeStage error", "path", staging)
			}
		}
		return &volume.OperationError{Message: fmt.Sprintf("MountVolume.MountDevice failed for volume %q : %v", vc.Name, err)}
	}
	p.staged[staging] = true
	return nil
}

// TearDown unpublishes the volume described by vc.Path's vol_data.json,
// then unstages it when no other pod uses its staging path. A driver that
// is not registered leaves everything in place (an error, retried).
func (p *Plugin) TearDown(ctx context.Context, vc *volume.VolumeContext) error {
	mounter := vc.Host.Mounter()
	target := filepath.Join(vc.Path, "mount")
	data, err := loadVolData(vc.Path)
	if errors.Is(err, fs.ErrNotExist) {
		// Nothing published (a failed setup): only empty directories
		// may remain, and a mounted target is refused.
		return removeMountDir(mounter, target)
	}
	if err != nil {
		return err
	}
	driverName, handle := data[keyDriverName], data[keyVolumeHandle]
	client, err := p.opts.Drivers.NodeClient(driverName)
	if err != nil {
		return fmt.Errorf("kubernetes.io/csi: Unmounter.TearDownAt failed to get CSI client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	if _, err := client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: target}); err != nil {
		return fmt.Errorf("kubernetes.io/csi: Unmounter.TearDownAt failed: %w", err)
	}
	if err := removeMountDir(mounter, target); err != nil {
		return fmt.Errorf("kubernetes.io/csi: Unmounter.TearDownAt failed to clean mount dir [%s]: %w", target, err)
	}
	p.mu.Lock()
	delete(p.published, target)
	p.mu.Unlock()
	if data[keyLifecycleMode] == modeEphemeral {
		return nil
	}
	return p.unstage(ctx, mounter, client, driverName, handle, vc.Path)
}

// unstage unstages a volume no pod uses any more: NodeUnstageVolume when
// the driver stages, then the staging path and its vol_data.json removed.
func (p *Plugin) unstage(ctx context.Context, mounter mount.Interface, client csipb.NodeClient, driverName, handle, except string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	users, err := podsUsingStagingPath(p.opts.RootDir, driverName, handle, except)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return nil
	}
	staging := stagingPath(p.opts.RootDir, driverName, handle)
	if _, err := os.Stat(filepath.Dir(staging)); errors.Is(err, fs.ErrNotExist) {
		delete(p.staged, staging)
		return nil
	}
	caps, err := nodeCapabilities(ctx, client)
	if err != nil {
		return fmt.Errorf("kubernetes.io/csi: attacher.UnmountDevice failed to check whether STAGE_UNSTAGE_VOLUME set: %w", err)
	}
	if caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		if _, err := client.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging}); err != nil {
			return fmt.Errorf("UnmountDevice failed for volume %s of driver %s: %w", handle, driverName, err)
		}
	}
	if err := removeMountDir(mounter, staging); err != nil {
		return fmt.Errorf("kubernetes.io/csi: attacher.UnmountDevice failed to clean staging path [%s]: %w", staging, err)
	}
	delete(p.staged, staging)
	return nil
}

// VolumeInUseName reports attachable volumes (a PV whose CSIDriver
// requires attachment, or has no CSIDriver) by the kubelet's unique name
// kubernetes.io/csi/<driver>^<handle>.
func (p *Plugin) VolumeInUseName(vc *volume.VolumeContext) (v1.UniqueVolumeName, bool) {
	if vc.PV == nil || vc.PV.Spec.CSI == nil {
		return "", false
	}
	s := vc.PV.Spec.CSI
	p.mu.Lock()
	driver, seen := p.drivers[s.Driver]
	p.mu.Unlock()
	if !seen || !attachRequired(driver) {
		return "", false
	}
	return UniqueVolumeName(s.Driver, s.VolumeHandle), true
}

// VolumeInUseNameOnDisk names a CSI volume found on disk at start (dir is
// its <pod>/volumes/kubernetes.io~csi/<name>) from its vol_data.json, as
// the kubelet's reconstruction: a persistent volume whose CSIDriver
// requires attachment, or has none. A CSIDriver that cannot be read counts
// as requiring it: reporting a volume in use keeps it attached, the safe
// side.
func (p *Plugin) VolumeInUseNameOnDisk(ctx context.Context, dir string) (v1.UniqueVolumeName, bool) {
	data, err := loadVolData(dir)
	if err != nil || data[keyLifecycleMode] == modeEphemeral || data[keyDriverName] == "" || data[keyVolumeHandle] == "" {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	driver, err := p.csiDriver(ctx, data[keyDriverName])
	if err != nil {
		klog.FromContext(ctx).Error(err, "CSIDriver of a volume found on disk not read; the volume is reported in use", "path", dir)
	} else if !attachRequired(driver) {
		return "", false
	}
	return UniqueVolumeName(data[keyDriverName], data[keyVolumeHandle]), true
}

// UniqueVolumeName is the kubelet's unique name of a CSI volume, as
// status.volumesInUse and volumesAttached list it.
func UniqueVolumeName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(PluginName + "/" + driver + "^" + handle)
}

// RequiresRemount is the CSIDriver's requiresRepublish: the volume is
// published again on every resync.
func (p *Plugin) RequiresRemount(vc *volume.VolumeContext) bool {
	src, err := sourceOf(vc)
	if err != nil {
		return false
	}
	p.mu.Lock()
	driver := p.drivers[src.driver]
	p.mu.Unlock()
	return driver != nil && driver.Spec.RequiresRepublish != nil && *driver.Spec.RequiresRepublish
}

// csiDriver returns the driver's CSIDriver object, nil when there is none.
func (p *Plugin) csiDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	if p.opts.Client == nil {
		p.mu.Lock()
		p.drivers[name] = nil
		p.mu.Unlock()
		return nil, nil
	}
	d, err := p.opts.Client.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		d, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes.io/csi: failed to get CSIDriver %s: %w", name, err)
	}
	p.mu.Lock()
	p.drivers[name] = d
	p.mu.Unlock()
	return d, nil
}

// supportsMode checks the CSIDriver's volumeLifecycleModes (Persistent
// when unset), the kubelet's supportsVolumeLifecycleMode.
func supportsMode(driver *storagev1.CSIDriver, src source) error {
	modes := []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	if driver != nil && len(driver.Spec.VolumeLifecycleModes) > 0 {
		modes = driver.Spec.VolumeLifecycleModes
	}
	if !slices.Contains(modes, storagev1.VolumeLifecycleMode(src.mode)) {
		return fmt.Errorf("kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode %q not supported by driver %s (only supports %q)", src.mode, src.driver, modes)
	}
	return nil
}

// attachRequired is the CSIDriver's attachRequired, true without a
// CSIDriver (the kubelet's skipAttach).
func attachRequired(driver *storagev1.CSIDriver) bool {
	return driver == nil || driver.Spec.AttachRequired == nil || *driver.Spec.AttachRequired
}

// verifyAttached is the kubelet's VerifyControllerAttachedVolume: the
// attach/detach controller attaches a volume the node reports in
// status.volumesInUse (so it will not detach it while it is mounted) and
// then lists it in status.volumesAttached. Until both hold it returns a
// *volume.UnattachedError in the kubelet's words.
func (p *Plugin) verifyAttached(ctx context.Context, name string, src source) error {
	if p.opts.Client == nil {
		return &volume.UnattachedError{Message: fmt.Sprintf("Volume not attached according to node status for volume %q : no API client", name)}
	}
	node, err := p.opts.Client.CoreV1().Nodes().Get(ctx, p.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return &volume.UnattachedError{Message: fmt.Sprintf("VerifyControllerAttachedVolume failed fetching node from API server for volume %q : %v", name, err)}
	}
	unique := UniqueVolumeName(src.driver, src.handle)
	if !slices.Contains(node.Status.VolumesInUse, unique) {
		return &volume.UnattachedError{Message: fmt.Sprintf("Volume has not been added to the list of VolumesInUse in the node's volume status for volume %q", name)}
	}
	if !slices.ContainsFunc(node.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == unique }) {
		return &volume.UnattachedError{Message: fmt.Sprintf("Volume not attached according to node status for volume %q", name)}
	}
	return nil
}

// attached returns the publish context of the volume's VolumeAttachment,
// an error in the kubelet's words (WaitForAttach) until it is attached.
func (p *Plugin) attached(ctx context.Context, src source) (map[string]string, error) {
	id := attachmentName(src.handle, src.driver, p.opts.NodeName)
	if p.opts.Client == nil {
		return nil, fmt.Errorf("volume %v has GET error for volume attachment %v: no API client", src.handle, id)
	}
	va, err := p.opts.Client.StorageV1().VolumeAttachments().Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("volume %v has GET error for volume attachment %v: %w", src.handle, id, err)
	}
	switch {
	case va.DeletionTimestamp != nil:
		return nil, fmt.Errorf("volume attachment %v is being deleted", id)
	case va.Status.Attached:
		return va.Status.AttachmentMetadata, nil
	case va.Status.AttachError != nil:
		return nil, fmt.Errorf("attachment for %v failed: %v", src.handle, va.Status.AttachError.Message)
	}
	return nil, fmt.Errorf("volume %v is not attached for volume attachment %v", src.handle, id)
}

// nodeCapabilities returns the driver's Node service capabilities.
func nodeCapabilities(ctx context.Context, client csipb.NodeClient) (map[csipb.NodeServiceCapability_RPC_Type]bool, error) {
	resp, err := client.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return nil, err
	}
	caps := map[csipb.NodeServiceCapability_RPC_Type]bool{}
	for _, c := range resp.GetCapabilities() {
		if rpc := c.GetRpc(); rpc != nil {
			caps[rpc.GetType()] = true
		}
	}
	return caps, nil
}

// volumeCapability is the CSI mount capability of src: its fsType and
// mount options, the access mode mapped as the kubelet maps it, and the
// pod's fsGroup as the volume mount group when the driver applies it.
func volumeCapability(src source, caps map[csipb.NodeServiceCapability_RPC_Type]bool, fsGroup *int64) *csipb.VolumeCapability {
	multi := caps[csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER]
	mode := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	switch src.accessMode {
	case v1.ReadWriteOnce:
		if multi {
			mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		}
	case v1.ReadWriteOncePod:
		if multi {
			mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
	case v1.ReadOnlyMany:
		mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case v1.ReadWriteMany:
		mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	}
	m := &csipb.VolumeCapability_MountVolume{FsType: src.fsType, MountFlags: src.mountOptions}
	if caps[csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP] && fsGroup != nil {
		m.VolumeMountGroup = strconv.FormatInt(*fsGroup, 10)
	}
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: m},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

// applyFSGroup is the kubelet's supportsFSGroup: whether the node applies
// the pod's fsGroup to the published volume itself.
func applyFSGroup(driver *storagev1.CSIDriver, src source, vc *volume.VolumeContext) bool {
	policy := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	if driver != nil && driver.Spec.FSGroupPolicy != nil && *driver.Spec.FSGroupPolicy != "" {
		policy = *driver.Spec.FSGroupPolicy
	}
	if vc.FSGroup == nil || policy == storagev1.NoneFSGroupPolicy || src.readOnly {
		return false
	}
	if policy == storagev1.FileFSGroupPolicy {
		return true
	}
	if src.fsType == "" {
		return false
	}
	if vc.PV != nil {
		return slices.ContainsFunc(vc.PV.Spec.AccessModes, func(m v1.PersistentVolumeAccessMode) bool {
			return m == v1.ReadWriteOnce || m == v1.ReadWriteOncePod
		})
	}
	return true
}

// podInfo is the volume context the kubelet adds for podInfoOnMount.
func podInfo(pod *v1.Pod, mode string) map[string]string {
	return map[string]string{
		"csi.storage.k8s.io/pod.name":            pod.Name,
		"csi.storage.k8s.io/pod.namespace":       pod.Namespace,
		"csi.storage.k8s.io/pod.uid":             string(pod.UID),
		"csi.storage.k8s.io/serviceAccount.name": pod.Spec.ServiceAccountName,
		"csi.storage.k8s.io/ephemeral":           strconv.FormatBool(mode == modeEphemeral),
	}
}

// tokens returns the CSIDriver's tokenRequests as the kubelet passes them:
// csi.storage.k8s.io/serviceAccount.tokens, a JSON map from audience to
// the token request's status, and whether they go in the secrets.
func (p *Plugin) tokens(ctx context.Context, vc *volume.VolumeContext, driver *storagev1.CSIDriver) (map[string]string, bool, error) {
	if driver == nil || len(driver.Spec.TokenRequests) == 0 {
		return nil, false, nil
	}
	pod := vc.Pod
	out := map[string]authenticationv1.TokenRequestStatus{}
	for _, r := range driver.Spec.TokenRequests {
		audiences := []string{}
		if r.Audience != "" {
			audiences = []string{r.Audience}
		}
		tr, err := vc.Host.ServiceAccountToken(ctx, pod.Namespace, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				Audiences:         audiences,
				ExpirationSeconds: r.ExpirationSeconds,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
			},
		})
		if err != nil {
			return nil, false, err
		}
		out[r.Audience] = tr.Status
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, false, err
	}
	inSecrets := driver.Spec.ServiceAccountTokenInSecrets != nil && *driver.Spec.ServiceAccountTokenInSecrets
	return map[string]string{"csi.storage.k8s.io/serviceAccount.tokens": string(b)}, inSecrets, nil
}

// secrets reads a node stage or publish secret.
func (p *Plugin) secrets(ctx context.Context, vc *volume.VolumeContext, ref *v1.SecretReference, what string) (map[string]string, error) {
	out := map[string]string{}
	if ref == nil {
		return out, nil
	}
	s, err := vc.Host.Secret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("fetching %s %s/%s failed: %w", what, ref.Namespace, ref.Name, err)
	}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// finalError reports whether a gRPC error means the operation ended (the
// driver did nothing more), as the kubelet's IsFinalError: not a timeout,
// cancellation, resource exhaustion, abort or an unknown code.
func finalError(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}

func mergeInto(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// VolumeStats returns the figures of the CSI volume published at target
// (a Mounted.Path of this plugin) from the driver's NodeGetVolumeStats, as
// the kubelet's CSI metrics provider; false when the driver does not have
// GET_VOLUME_STATS.
func (p *Plugin) VolumeStats(ctx context.Context, target string) (statsapi.FsStats, bool, error) {
	data, err := loadVolData(filepath.Dir(target))
	if err != nil {
		return statsapi.FsStats{}, false, err
	}
	driverName, handle := data[keyDriverName], data[keyVolumeHandle]
	client, err := p.opts.Drivers.NodeClient(driverName)
	if err != nil {
		return statsapi.FsStats{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	caps, err := nodeCapabilities(ctx, client)
	if err != nil {
		return statsapi.FsStats{}, false, err
	}
	if !caps[csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS] {
		return statsapi.FsStats{}, false, nil
	}
	req := &csipb.NodeGetVolumeStatsRequest{VolumeId: handle, VolumePath: target}
	if data[keyLifecycleMode] != modeEphemeral && caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		req.StagingTargetPath = stagingPath(p.opts.RootDir, driverName, handle)
	}
	resp, err := client.NodeGetVolumeStats(ctx, req)
	if err != nil {
		return statsapi.FsStats{}, false, fmt.Errorf("NodeGetVolumeStats of volume %s on driver %s: %w", handle, driverName, err)
	}
	fs := statsapi.FsStats{Time: metav1.Now()}
	for _, u := range resp.GetUsage() {
		available, total, used := uint64(max(u.GetAvailable(), 0)), uint64(max(u.GetTotal(), 0)), uint64(max(u.GetUsed(), 0))
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			fs.AvailableBytes, fs.CapacityBytes, fs.UsedBytes = &available, &total, &used
		case csipb.VolumeUsage_INODES:
			fs.InodesFree, fs.Inodes, fs.InodesUsed = &available, &total, &used
		}
	}
	return fs, true, nil
}

// ExpandVolume grows a published CSI PV to newSize with the driver's
// NodeExpandVolume (the kubelet's csi expander), when the driver has
// EXPAND_VOLUME; false otherwise.
func (p *Plugin) ExpandVolume(ctx context.Context, vc *volume.VolumeContext, newSize resource.Quantity) (bool, error) {
	if vc.PV == nil {
		return false, nil
	}
	src, err := sourceOf(vc)
	if err != nil {
		return false, err
	}
	client, err := p.opts.Drivers.NodeClient(src.driver)
	if err != nil {
		return false, fmt.Errorf("kubernetes.io/csi: Expander.NodeExpand failed to get CSI client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	caps, err := nodeCapabilities(ctx, client)
	if err != nil {
		return false, fmt.Errorf("kubernetes.io/csi: Expander.NodeExpand failed to check if node supports expansion: %w", err)
	}
	if !caps[csipb.NodeServiceCapability_RPC_EXPAND_VOLUME] {
		return false, nil
	}
	req := &csipb.NodeExpandVolumeRequest{
		VolumeId:         src.handle,
		VolumePath:       filepath.Join(vc.Path, "mount"),
		CapacityRange:    &csipb.CapacityRange{RequiredBytes: newSize.Value()},
		VolumeCapability: volumeCapability(src, caps, vc.FSGroup),
	}
	if caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		req.StagingTargetPath = stagingPath(p.opts.RootDir, src.driver, src.handle)
	}
	if ref := vc.PV.Spec.CSI.NodeExpandSecretRef; ref != nil {
		if req.Secrets, err = p.secrets(ctx, vc, ref, "NodeExpandSecretRef"); err != nil {
			return false, err
		}
	}
	if _, err := client.NodeExpandVolume(ctx, req); err != nil {
		return false, fmt.Errorf("Expander.NodeExpand failed to expand the volume : %w", err)
	}
	return true, nil
}
