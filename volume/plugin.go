package volume

import (
	"context"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/mount-utils"
)

// PluginGroup is the fx value group of additional volume plugins: Module
// adds every Plugin provided with the tag `group:"volume_plugins"` to
// Options.Plugins. A plugin whose Name is a built-in plugin's replaces it.
const PluginGroup = "volume_plugins"

// Names of the built-in plugins (Plugin.Name), the kubelet's. The directory
// of a pod's volumes of a plugin is the name with "/" replaced by "~", e.g.
// <rootDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume name>.
const (
	PluginEmptyDir    = "kubernetes.io/empty-dir"
	PluginHostPath    = "kubernetes.io/host-path"
	PluginConfigMap   = "kubernetes.io/configmap"
	PluginSecret      = "kubernetes.io/secret"
	PluginDownwardAPI = "kubernetes.io/downward-api"
	PluginProjected   = "kubernetes.io/projected"
	PluginLocal       = "kubernetes.io/local-volume"
	PluginImage       = "kubernetes.io/image"
)

// Plugin sets up and tears down one kind of volume, as a kubelet volume
// plugin does. The Manager finds the plugin of a pod volume by CanSupport
// (exactly one plugin must match) and the plugin of a volume directory
// found on disk by Name.
//
// The Manager never calls SetUp or TearDown for the same volume of the same
// pod concurrently, but it does call them for different volumes and pods at
// once: a Plugin must be safe for concurrent use.
type Plugin interface {
	// Name is the plugin's qualified name, e.g. "kubernetes.io/empty-dir".
	// It must be unique among the Manager's plugins and stable: it names
	// the volumes' directory on disk.
	Name() string
	// CanSupport reports whether the plugin handles vol. It must be cheap
	// and must not block.
	CanSupport(vol *v1.Volume) bool
	// SetUp makes the volume ready for the pod's containers and returns
	// what the runtime mounts. It is called when a pod's volume is first
	// mounted and after a failure, and again for a mounted volume when the
	// plugin is a Remounter. It must be idempotent and must leave a volume
	// that is already set up as it is when nothing changed. It may block
	// for I/O and API calls; it must return when ctx is done.
	SetUp(ctx context.Context, v *VolumeContext) (Mounted, error)
	// TearDown removes what SetUp made, once the pod's containers are
	// gone. v.Pod and v.Volume are nil for a volume found on disk whose pod
	// the Manager does not know (after a restart); v.Path, v.PluginDir,
	// v.PodUID and v.Name are always set. TearDown must never delete
	// through a mount point it did not unmount, and must succeed when
	// there is nothing left to remove.
	TearDown(ctx context.Context, v *VolumeContext) error
}

// PersistentVolumePlugin is implemented by plugins that mount persistent
// volumes: the Manager resolves a pod's persistentVolumeClaim (or generic
// ephemeral volume) to its bound PersistentVolume and hands it to the one
// plugin whose CanSupportPersistentVolume is true, with VolumeContext.PV
// set. CanSupport still decides the pod's inline volumes.
type PersistentVolumePlugin interface {
	// CanSupportPersistentVolume reports whether the plugin mounts pv. It
	// must be cheap and must not block.
	CanSupportPersistentVolume(pv *v1.PersistentVolume) bool
}

// Expander is implemented by plugins that grow a mounted claim-backed
// volume's filesystem on the node when its claim was expanded (the CSI
// plugin's NodeExpandVolume). The Manager looks at the mounted claims
// every ResyncPeriod and calls ExpandVolume when the PV is larger than the
// claim's status capacity and the claim waits for the node
// (status.allocatedResourceStatuses NodeResizePending), then records the
// outcome in the claim's status as the kubelet does (which needs
// persistentvolumeclaims/status update).
type Expander interface {
	// ExpandVolume grows the mounted volume v (PV and PVC are the
	// expanded ones) to newSize. It returns false when the volume needs
	// no expansion on the node (the driver does not have it): the claim
	// is then marked resized all the same, as by the kubelet.
	ExpandVolume(ctx context.Context, v *VolumeContext, newSize resource.Quantity) (bool, error)
}

// Remounter is implemented by plugins whose content follows API objects or
// the pod (configMap, secret, downwardAPI and projected volumes): the
// Manager calls SetUp again on a mounted volume when RequiresRemount is
// true, whenever the pod or an object it references changes and at least
// every Options.ResyncPeriod, so the files follow their sources.
type Remounter interface {
	// RequiresRemount reports whether the mounted volume v (Pod, Volume
	// and PV set as for SetUp) is to be set up again.
	RequiresRemount(v *VolumeContext) bool
}

// InUseReporter is implemented by plugins whose volumes the node reports in
// status.volumesInUse. The kubelet reports attachable volumes only (so the
// attach/detach controller does not detach a volume still mounted); none of
// the built-in plugins is attachable.
type InUseReporter interface {
	// VolumeInUseName returns the unique name of the volume v (Pod,
	// Volume and PV set as for SetUp), mounted or still to be, and false
	// when the volume is not to be reported.
	VolumeInUseName(v *VolumeContext) (v1.UniqueVolumeName, bool)
}

// DiskInUseReporter is implemented by InUseReporter plugins that can name a
// volume found on disk when the Manager starts (mounted before a restart,
// or by a kubelet) from what SetUp wrote in its directory. The Manager
// reports such a volume in status.volumesInUse until a pod mounts it again
// or it is torn down, as the kubelet reports its reconstructed volumes: the
// attach/detach controller detaches none that is still mounted.
type DiskInUseReporter interface {
	// VolumeInUseNameOnDisk returns the unique name of the volume whose
	// directory is dir, and false when it is not to be reported. Run calls
	// it once per volume found, before the node status reports volumes in
	// use; it may read the API.
	VolumeInUseNameOnDisk(ctx context.Context, dir string) (v1.UniqueVolumeName, bool)
}

// Mounted is a volume as the runtime mounts it into containers.
type Mounted struct {
	// Path is the volume's path on the host (a hostPath volume's own path,
	// otherwise a directory under the pod's directory).
	Path string
	// ReadOnly means every container mounts the volume read-only,
	// whatever its volumeMount says (configMap, secret, downwardAPI and
	// projected volumes), as the kubelet's plugins' ReadOnly attribute.
	ReadOnly bool
	// SELinuxRelabel means the runtime is asked to relabel the volume for
	// the container's SELinux context (CRI Mount.selinux_relabel): true
	// for the volumes the kubelet manages (all but hostPath).
	SELinuxRelabel bool
}

// VolumeContext is one volume of one pod as the Manager hands it to its
// plugin. The plugin must not modify Pod or Volume.
type VolumeContext struct {
	// Pod is the pod; nil when tearing down a volume found on disk.
	Pod *v1.Pod
	// PodUID is the pod's UID.
	PodUID types.UID
	// Volume is the pod's volume; nil when tearing down a volume found on
	// disk.
	Volume *v1.Volume
	// Name is the volume's name as the kubelet's volume spec names it: the
	// pod volume's name, or the PersistentVolume's name for a claim. It
	// names the volume's directory.
	Name string
	// PV is the PersistentVolume bound to the pod volume's claim (the
	// persistentVolumeClaim or generic ephemeral volume), nil for an
	// inline volume and when tearing down a volume found on disk. Its
	// node affinity has been checked against the node.
	PV *v1.PersistentVolume
	// PVC is the bound claim when PV is set.
	PVC *v1.PersistentVolumeClaim
	// ReadOnly is the pod's persistentVolumeClaim.readOnly for a claim
	// (the kubelet's Spec.ReadOnly); a plugin adds its PV source's own
	// readOnly. False for inline volumes (their sources say it).
	ReadOnly bool
	// Path is the volume's directory: <rootDir>/pods/<uid>/volumes/
	// <escaped plugin name>/<name>. The Manager does not create it.
	Path string
	// PluginDir is the plugin's directory for the pod's metadata:
	// <rootDir>/pods/<uid>/plugins/<escaped plugin name>. The Manager
	// does not create it.
	PluginDir string
	// FSGroup is the pod's securityContext.fsGroup: the group that owns
	// the volume's files where the plugin supports ownership management.
	FSGroup *int64
	// FSUser is the user all of the pod's containers run as, nil when they
	// do not all set the same runAsUser (the kubelet's FsUserFrom).
	FSUser *int64
	// Host gives access to the Manager's services.
	Host Host
}

// Host is what the Manager offers its plugins. Its methods are safe for
// concurrent use.
type Host interface {
	// Mounter mounts and unmounts (Options.Mounter).
	Mounter() mount.Interface
	// ConfigMap returns a configMap: from the Manager's watch when a pod it
	// mounts references it, otherwise from the API server. A missing
	// configMap is an error for which apierrors.IsNotFound is true. The
	// returned object is shared and must not be modified.
	ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	// Secret is ConfigMap for secrets.
	Secret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// ServiceAccountToken returns a token of service account
	// namespace/name for tr, cached and refreshed as the kubelet's token
	// manager does (at 80 % of its life or after 24 h).
	ServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	// NodeAllocatable returns the node's allocatable resources (nil when
	// unknown).
	NodeAllocatable() v1.ResourceList
}

// escapePluginName is the directory name of a plugin: "/" replaced by "~",
// as the kubelet's EscapeQualifiedName.
func escapePluginName(name string) string {
	return strings.ReplaceAll(name, "/", "~")
}

// unescapePluginName reverses escapePluginName.
func unescapePluginName(dir string) string {
	return strings.ReplaceAll(dir, "~", "/")
}

// volumeKind names the kind of volume source vol uses, for error messages.
func volumeKind(vol *v1.Volume) string {
	s := vol.VolumeSource
	switch {
	case s.HostPath != nil:
		return "hostPath"
	case s.EmptyDir != nil:
		return "emptyDir"
	case s.GCEPersistentDisk != nil:
		return "gcePersistentDisk"
	case s.AWSElasticBlockStore != nil:
		return "awsElasticBlockStore"
	case s.GitRepo != nil:
		return "gitRepo"
	case s.Secret != nil:
		return "secret"
	case s.NFS != nil:
		return "nfs"
	case s.ISCSI != nil:
		return "iscsi"
	case s.Glusterfs != nil:
		return "glusterfs"
	case s.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case s.RBD != nil:
		return "rbd"
	case s.FlexVolume != nil:
		return "flexVolume"
	case s.Cinder != nil:
		return "cinder"
	case s.CephFS != nil:
		return "cephfs"
	case s.Flocker != nil:
		return "flocker"
	case s.DownwardAPI != nil:
		return "downwardAPI"
	case s.FC != nil:
		return "fc"
	case s.AzureFile != nil:
		return "azureFile"
	case s.ConfigMap != nil:
		return "configMap"
	case s.VsphereVolume != nil:
		return "vsphereVolume"
	case s.Quobyte != nil:
		return "quobyte"
	case s.AzureDisk != nil:
		return "azureDisk"
	case s.PhotonPersistentDisk != nil:
		return "photonPersistentDisk"
	case s.Projected != nil:
		return "projected"
	case s.PortworxVolume != nil:
		return "portworxVolume"
	case s.ScaleIO != nil:
		return "scaleIO"
	case s.StorageOS != nil:
		return "storageos"
	case s.CSI != nil:
		return "csi"
	case s.Ephemeral != nil:
		return "ephemeral"
	case s.Image != nil:
		return "image"
	}
	return "unknown"
}
