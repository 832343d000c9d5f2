package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// localPlugin mounts local PersistentVolumes (spec.local.path, a directory
// of the node), as the kubelet's local-volume plugin does for directories:
// SetUp bind-mounts the path on the pod's volume directory
// <root>/pods/<uid>/volumes/kubernetes.io~local-volume/<pv name> (read-only
// when the claim or the PV says so, with the PV's mountOptions), and gives
// the pod's fsGroup the files when no other pod has the path mounted.
// TearDown unmounts it and removes the empty directory; the data stays
// on the path. Block-device local PVs are not supported.
type localPlugin struct{}

func (localPlugin) Name() string { return PluginLocal }

// CanSupport is false: local volumes are PersistentVolumes only.
func (localPlugin) CanSupport(*v1.Volume) bool { return false }

func (localPlugin) CanSupportPersistentVolume(pv *v1.PersistentVolume) bool {
	return pv.Spec.Local != nil
}

func (localPlugin) SetUp(ctx context.Context, vc *VolumeContext) (Mounted, error) {
	src := vc.PV.Spec.Local.Path
	if src == "" {
		return Mounted{}, fmt.Errorf("LocalVolume volume %q path is empty", vc.Name)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(src), "/"), "..") {
		return Mounted{}, fmt.Errorf("invalid path: %s must not contain '..'", src)
	}
	out := Mounted{Path: vc.Path, ReadOnly: vc.ReadOnly, SELinuxRelabel: true}
	mounter := vc.Host.Mounter()
	notMnt, err := mounter.IsLikelyNotMountPoint(vc.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Mounted{}, fmt.Errorf("cannot validate mount point %s: %w", vc.Path, err)
	}
	if err == nil && !notMnt {
		return out, nil
	}
	fi, err := os.Stat(src)
	if err != nil {
		return Mounted{}, fmt.Errorf("local volume %s: %w", vc.Name, err)
	}
	if !fi.IsDir() {
		return Mounted{}, fmt.Errorf("local volume %s: path %s is not a directory: block-device local volumes are not supported by this node agent", vc.Name, src)
	}
	// Mounts of the path by other pods, before this one.
	refs, err := mounter.GetMountRefs(src)
	if err != nil {
		return Mounted{}, fmt.Errorf("cannot collect mounting information: %s %w", src, err)
	}
	refs = slices.DeleteFunc(refs, func(r string) bool {
		return !strings.Contains(r, string(filepath.Separator)+"pods"+string(filepath.Separator))
	})
	if err := os.MkdirAll(vc.Path, 0o750); err != nil {
		return Mounted{}, err
	}
	options := []string{"bind"}
	if vc.ReadOnly {
		options = append(options, "ro")
	}
	options = joinMountOptions(options, vc.PV.Spec.MountOptions)
	if err := mounter.MountSensitiveWithoutSystemd(src, vc.Path, "", options, nil); err != nil {
		if rmErr := unmountAndRemove(mounter, vc.Path); rmErr != nil {
			klog.FromContext(ctx).Error(rmErr, "Failed to clean up after a failed mount", "path", vc.Path)
		}
		return Mounted{}, fmt.Errorf("mount of volume %s failed: %w", vc.Path, err)
	}
	if !vc.ReadOnly && len(refs) == 0 {
		if err := SetVolumeOwnership(vc.Path, vc.FSGroup, false); err != nil {
			return Mounted{}, err
		}
	}
	return out, nil
}

func (localPlugin) TearDown(_ context.Context, vc *VolumeContext) error {
	return unmountAndRemove(vc.Host.Mounter(), vc.Path)
}

// unmountAndRemove unmounts path when it is a mount point and removes it
// when it is an empty directory, never anything in it (the kubelet's
// CleanupMountPoint).
func unmountAndRemove(mounter mount.Interface, path string) error {
	return mount.CleanupMountPoint(path, mounter, false)
}

// joinMountOptions appends the options of b not in a, as the kubelet's
// JoinMountOptions (which sorts them; order does not matter to mount).
func joinMountOptions(a, b []string) []string {
	out := slices.Clone(a)
	for _, o := range b {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}
