package csi

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/mount-utils"
)

// The kubelet's on-disk names (pkg/volume/csi), so that a kubelet and
// nodekit find each other's CSI volumes.
const (
	// PluginName is the CSI volume plugin's name: pod volumes live in
	// pods/<uid>/volumes/kubernetes.io~csi/<spec name>/mount.
	PluginName = "kubernetes.io/csi"
	// volDataFileName holds what teardown needs, next to the publish
	// target (and next to the staging path).
	volDataFileName = "vol_data.json"
	// globalMountDir is the staging path's name under
	// plugins/kubernetes.io/csi/<driver>/<sha256 of the handle>.
	globalMountDir = "globalmount"
	// lifecycle modes as vol_data.json records them.
	modePersistent = "Persistent"
	modeEphemeral  = "Ephemeral"
)

// volData keys, the kubelet's volDataKey.
const (
	keySpecVolID     = "specVolID"
	keyVolumeHandle  = "volumeHandle"
	keyDriverName    = "driverName"
	keyNodeName      = "nodeName"
	keyAttachmentID  = "attachmentID"
	keyLifecycleMode = "volumeLifecycleMode"
)

// stagingPath returns the kubelet's staging path (the device mount path) of
// a volume: <root>/plugins/kubernetes.io/csi/<driver>/<sha256 of the
// handle>/globalmount.
func stagingPath(rootDir, driver, handle string) string {
	return filepath.Join(rootDir, "plugins", PluginName, driver, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))), globalMountDir)
}

// attachmentName is the VolumeAttachment's name for a volume on a node, as
// the attach/detach controller names it: csi-<sha256 of handle, driver and
// node>.
func attachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// ephemeralHandle is the volume handle of an inline (ephemeral) volume:
// csi-<sha256 of the pod UID and the volume's name>, the kubelet's
// makeVolumeHandle.
func ephemeralHandle(podUID types.UID, volName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(podUID)+volName)))
}

// saveVolData writes data as dir/vol_data.json, the kubelet's JSON map.
func saveVolData(dir string, data map[string]string) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, volDataFileName)
	if err := os.WriteFile(path, append(b, '\n'), 0o640); err != nil {
		return fmt.Errorf("failed to save volume data file %s: %w", path, err)
	}
	return nil
}

// loadVolData reads dir/vol_data.json.
func loadVolData(dir string) (map[string]string, error) {
	path := filepath.Join(dir, volDataFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	data := map[string]string{}
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, fmt.Errorf("failed to parse volume data file %s: %w", path, err)
	}
	return data, nil
}

// removeMountDir removes a publish target or staging path that is no
// longer a mount point, then the vol_data.json beside it and their parent
// directory when empty, as the kubelet's removeMountDir. It refuses a
// path still mounted and never removes anything but empty directories and
// vol_data.json.
func removeMountDir(mounter mount.Interface, target string) error {
	notMnt, err := mounter.IsLikelyNotMountPoint(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case !notMnt:
		return fmt.Errorf("%s is still mounted", target)
	default:
		if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("failed to remove dir %s: %w", target, err)
		}
	}
	parent := filepath.Dir(target)
	if err := os.Remove(filepath.Join(parent, volDataFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(parent); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to remove dir %s: %w", parent, err)
	}
	return nil
}

// podsUsingStagingPath returns the publish targets under <root>/pods whose
// vol_data.json names driver and handle, other than except: the pods still
// using a staged volume.
func podsUsingStagingPath(rootDir, driver, handle, except string) ([]string, error) {
	pattern := filepath.Join(rootDir, "pods", "*", "volumes", strings.ReplaceAll(PluginName, "/", "~"), "*", volDataFileName)
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		dir := filepath.Dir(f)
		if dir == except {
			continue
		}
		data, err := loadVolData(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		if data[keyDriverName] == driver && data[keyVolumeHandle] == handle {
			out = append(out, dir)
		}
	}
	return out, nil
}
