package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// subPathDirName is where a pod's subPath bind mounts live, the kubelet's:
// <pod dir>/volume-subpaths/<volume>/<container>/<mount index>.
const subPathDirName = "volume-subpaths"

// SubPathSpec is one volume mount of a container with a subPath.
type SubPathSpec struct {
	// PodUID is the pod's UID.
	PodUID types.UID
	// VolumeName is the volume's name and VolumePath its host path
	// (Mounted.Path).
	VolumeName string
	VolumePath string
	// SubPath is the volumeMount's subPath, or its subPathExpr expanded
	// with the container's environment.
	SubPath string
	// ContainerName and MountIndex (the mount's index in the container's
	// volumeMounts) name the bind mount.
	ContainerName string
	MountIndex    int
}

// SubPath resolves a subPath volume mount safely, as the kubelet does, and
// returns the host path the runtime mounts instead of the volume. It
// rejects absolute subPaths and ".." elements; creates a missing subPath
// directory with the volume directory's mode without following symlinks
// out of the volume; resolves symlinks and refuses a target outside the
// volume; then opens the target one element at a time without following
// symlinks and bind-mounts that open file onto
// <podsDir>/<uid>/volume-subpaths/<volume>/<container>/<index>, so that a
// container replacing a path element with a symlink after the check
// cannot make the runtime mount something outside the volume. An existing
// bind mount of the same file is reused. The bind mount pins the file: a
// subPath mount of a configMap or secret does not see updates, as with the
// kubelet. The bind mounts are removed by the pod's volume teardown.
//
// Errors given to the caller do not reveal host paths; details are
// logged. It needs the privilege to mount.
func SubPath(ctx context.Context, mounter mount.Interface, podsDir string, s SubPathSpec) (string, error) {
	logger := klog.FromContext(ctx)
	if filepath.IsAbs(s.SubPath) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", s.SubPath)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(s.SubPath), "/"), "..") {
		return "", fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", s.SubPath)
	}
	hostPath := filepath.Join(s.VolumePath, s.SubPath)
	if _, err := os.Stat(hostPath); errors.Is(err, fs.ErrNotExist) {
		fi, err := os.Stat(s.VolumePath)
		if err != nil {
			return "", fmt.Errorf("volume %q of container %q: %w", s.VolumeName, s.ContainerName, err)
		}
		if err := safeMakeDir(s.SubPath, s.VolumePath, fi.Mode()); err != nil && !errors.Is(err, fs.ErrExist) {
			logger.Error(err, "Failed to create subPath directory for volumeMount of the container", "containerName", s.ContainerName, "volumeMountName", s.VolumeName)
			return "", fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q", s.VolumeName, s.ContainerName)
		}
	} else if err != nil {
		logger.Error(err, "Could not determine if subPath exists, will not attempt to change its permissions", "path", hostPath)
	}
	podDir := filepath.Join(podsDir, string(s.PodUID))
	target, err := bindSubPath(ctx, mounter, podDir, s, hostPath)
	if err != nil {
		logger.Error(err, "Failed to prepare subPath for volumeMount of the container", "containerName", s.ContainerName, "volumeMountName", s.VolumeName)
		return "", fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", s.VolumeName, s.ContainerName)
	}
	return target, nil
}

func subPathTarget(podDir string, s SubPathSpec) string {
	return filepath.Join(podDir, subPathDirName, s.VolumeName, s.ContainerName, strconv.Itoa(s.MountIndex))
}

// bindSubPath bind-mounts the subPath at hostPath onto its target.
func bindSubPath(ctx context.Context, mounter mount.Interface, podDir string, s SubPathSpec, hostPath string) (string, error) {
	volumePath, err := filepath.EvalSymlinks(s.VolumePath)
	if err != nil {
		return "", fmt.Errorf("error resolving symlinks in %q: %w", s.VolumePath, err)
	}
	path, err := filepath.EvalSymlinks(hostPath)
	if err != nil {
		return "", fmt.Errorf("error resolving symlinks in %q: %w", hostPath, err)
	}
	if !mount.PathWithinBase(path, volumePath) {
		return "", fmt.Errorf("subpath %q not within volume path %q", path, volumePath)
	}
	fd, err := safeOpen(path, volumePath)
	if err != nil {
		return "", fmt.Errorf("error opening subpath %v: %w", path, err)
	}
	defer closeFD(fd)

	target := subPathTarget(podDir, s)
	mounted, err := mounter.IsMountPoint(target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("error checking path %s for mount: %w", target, err)
	}
	if mounted {
		same, err := sameFile(path, target)
		if err != nil {
			return "", fmt.Errorf("error checking subpath mount info for %s: %w", target, err)
		}
		if same {
			return target, nil
		}
		klog.FromContext(ctx).V(4).Info("Subpath bind mount points to another file; replacing it", "target", target)
		if err := mounter.Unmount(target); err != nil {
			return "", fmt.Errorf("error unmounting stale subpath mount %s: %w", target, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", fmt.Errorf("error creating directory %s: %w", filepath.Dir(target), err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("error creating directory %s: %w", target, err)
		}
	} else if err := os.WriteFile(target, nil, 0o640); err != nil {
		return "", fmt.Errorf("error creating file %s: %w", target, err)
	}
	source := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	if err := mounter.MountSensitiveWithoutSystemdWithMountFlags(source, target, "", []string{"bind"}, nil, []string{"--no-canonicalize"}); err != nil {
		_ = cleanSubPath(mounter, podDir, s)
		return "", fmt.Errorf("error mounting %s: %w", path, err)
	}
	klog.FromContext(ctx).V(3).Info("Bound subPath", "subPath", path, "target", target)
	return target, nil
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Lstat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Lstat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// cleanSubPath removes one subPath bind mount and the directories it
// leaves empty.
func cleanSubPath(mounter mount.Interface, podDir string, s SubPathSpec) error {
	target := subPathTarget(podDir, s)
	if err := mount.CleanupMountPoint(target, mounter, true); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for dir := filepath.Dir(target); dir != podDir && strings.HasPrefix(dir, podDir); dir = filepath.Dir(dir) {
		if err := os.Remove(dir); err != nil {
			break
		}
	}
	return nil
}

// cleanSubPaths unmounts and removes every subPath bind mount of volume
// volumeName of the pod in podDir.
func cleanSubPaths(mounter mount.Interface, podDir, volumeName string) error {
	volDir := filepath.Join(podDir, subPathDirName, volumeName)
	containers, err := os.ReadDir(volDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("error reading %s: %w", volDir, err)
	}
	for _, c := range containers {
		cdir := filepath.Join(volDir, c.Name())
		if !c.IsDir() {
			continue
		}
		mounts, err := os.ReadDir(cdir)
		if err != nil {
			return fmt.Errorf("error reading %s: %w", cdir, err)
		}
		for _, m := range mounts {
			p := filepath.Join(cdir, m.Name())
			if err := mount.CleanupMountPoint(p, mounter, true); err != nil {
				return fmt.Errorf("error cleaning subpath mount %s: %w", p, err)
			}
		}
		if err := os.Remove(cdir); err != nil {
			return fmt.Errorf("error deleting %s: %w", cdir, err)
		}
	}
	if err := os.Remove(volDir); err != nil {
		return fmt.Errorf("error deleting %s: %w", volDir, err)
	}
	// Other volumes' subPaths may remain.
	_ = os.Remove(filepath.Join(podDir, subPathDirName))
	return nil
}
