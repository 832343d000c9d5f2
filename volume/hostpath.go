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
)

// hostPathPlugin mounts a path of the node, from a pod's hostPath volume
// or a hostPath PersistentVolume. SetUp checks the path against the
// volume's type as the kubelet does, creating it for DirectoryOrCreate and
// FileOrCreate; TearDown does nothing (the path is the node's). A PV's
// mount is read-only when the pod's claim says so, as the kubelet's.
type hostPathPlugin struct{}

func (hostPathPlugin) Name() string { return PluginHostPath }

func (hostPathPlugin) CanSupport(vol *v1.Volume) bool { return vol.HostPath != nil }

func (hostPathPlugin) CanSupportPersistentVolume(pv *v1.PersistentVolume) bool {
	return pv.Spec.HostPath != nil
}

func (hostPathPlugin) SetUp(_ context.Context, vc *VolumeContext) (Mounted, error) {
	hp := vc.Volume.HostPath
	if vc.PV != nil {
		hp = vc.PV.Spec.HostPath
	}
	if err := CheckHostPath(hp.Path, hp.Type); err != nil {
		return Mounted{}, err
	}
	return Mounted{Path: hp.Path, ReadOnly: vc.PV != nil && vc.ReadOnly}, nil
}

func (hostPathPlugin) TearDown(context.Context, *VolumeContext) error { return nil }

// CheckHostPath checks a hostPath volume's path as the kubelet's hostPath
// plugin does, with its error texts: the path must not contain "..";
// DirectoryOrCreate creates a missing directory (mode 0755) and
// FileOrCreate a missing file (0644, its directory must exist); every
// other type but "" (no check) requires an existing path of that type,
// symlinks followed. It returns nil for a nil or empty type.
func CheckHostPath(path string, typ *v1.HostPathType) error {
	if slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "..") {
		return fmt.Errorf("invalid HostPath `%s`: must not contain '..'", path)
	}
	if typ == nil || *typ == v1.HostPathUnset {
		return nil
	}
	switch *typ {
	case v1.HostPathDirectoryOrCreate:
		if !pathExists(path) {
			return makeDir(path)
		}
		return typeMatchedOrError(path, fileTypeDirectory, "directory")
	case v1.HostPathDirectory:
		return typeMatchedOrError(path, fileTypeDirectory, "directory")
	case v1.HostPathFileOrCreate:
		if !pathExists(path) {
			return makeFile(path)
		}
		return typeMatchedOrError(path, fileTypeFile, "file")
	case v1.HostPathFile:
		return typeMatchedOrError(path, fileTypeFile, "file")
	case v1.HostPathSocket:
		return typeMatchedOrError(path, fileTypeSocket, "socket file")
	case v1.HostPathCharDev:
		return typeMatchedOrError(path, fileTypeCharDev, "character device")
	case v1.HostPathBlockDev:
		return typeMatchedOrError(path, fileTypeBlockDev, "block device")
	default:
		return fmt.Errorf("%s is an invalid volume type", *typ)
	}
}

// File types as the kubelet's host utilities name them.
const (
	fileTypeDirectory = "Directory"
	fileTypeFile      = "File"
	fileTypeSocket    = "Socket"
	fileTypeCharDev   = "CharDevice"
	fileTypeBlockDev  = "BlockDevice"
)

var errUnknownFileType = errors.New("only recognise file, directory, socket, block device and character device")

// fileType returns the type of path, symlinks followed.
func fileType(path string) (string, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("path %q does not exist", path)
	}
	if err != nil {
		return "", err
	}
	mode := fi.Mode()
	switch {
	case mode.IsDir():
		return fileTypeDirectory, nil
	case mode.IsRegular():
		return fileTypeFile, nil
	case mode&os.ModeSocket != 0:
		return fileTypeSocket, nil
	case mode&os.ModeDevice != 0 && mode&os.ModeCharDevice != 0:
		return fileTypeCharDev, nil
	case mode&os.ModeDevice != 0:
		return fileTypeBlockDev, nil
	}
	return "", errUnknownFileType
}

func typeMatchedOrError(path, want, expected string) error {
	got, err := fileType(path)
	if err != nil {
		return fmt.Errorf("hostPath type check failed, %s is not a %s, unable to determine its type: %w", path, expected, err)
	}
	if got != want {
		return fmt.Errorf("hostPath type check failed: %s is not a %s, it's a %s", path, expected, got)
	}
	return nil
}

func pathExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// makeDir creates path and its parents, mode 0755 (less the umask).
func makeDir(path string) error {
	if err := os.MkdirAll(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// makeFile creates an empty file, mode 0644 (less the umask).
func makeFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE, 0o644)
	if f != nil {
		f.Close()
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}
