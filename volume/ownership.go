package volume

import (
	"io"
	"os"
	"path/filepath"
)

// Permission bits SetVolumeOwnership adds, the kubelet's.
const (
	rwMask   = os.FileMode(0o660)
	roMask   = os.FileMode(0o440)
	execMask = os.FileMode(0o110)
)

// SetVolumeOwnership gives fsGroup the files of a volume, as the kubelet's
// SetVolumeOwnership (the recursive policy; fsGroupChangePolicy
// OnRootMismatch is not used by any built-in plugin): every file and
// directory under dir, dir included and symlinks not followed, is chowned
// to group fsGroup, and every file and directory but symlinks gets group
// read and write (read only when readOnly), directories also group
// execute and setgid. Failures to chown or chmod one file are ignored, as
// the kubelet ignores them; only failing to read a directory is an error.
// A nil fsGroup does nothing.
func SetVolumeOwnership(dir string, fsGroup *int64, readOnly bool) error {
	if fsGroup == nil {
		return nil
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	return walkDeep(dir, info, func(path string, info os.FileInfo) {
		changeFilePermission(path, int(*fsGroup), readOnly, info)
	})
}

// walkDeep calls fn for every file under path, children before their
// directory, without following symlinks.
func walkDeep(path string, info os.FileInfo, fn func(string, os.FileInfo)) error {
	if info.IsDir() {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		for {
			names, err := f.Readdirnames(256)
			for _, name := range names {
				child := filepath.Join(path, name)
				ci, lerr := os.Lstat(child)
				if lerr != nil {
					continue
				}
				if werr := walkDeep(child, ci, fn); werr != nil {
					f.Close()
					return werr
				}
			}
			if err == io.EOF || len(names) == 0 {
				break
			}
			if err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
	}
	fn(path, info)
	return nil
}

func changeFilePermission(path string, gid int, readOnly bool, info os.FileInfo) {
	_ = os.Lchown(path, -1, gid)
	if info.Mode()&os.ModeSymlink != 0 {
		return
	}
	mask := rwMask
	if readOnly {
		mask = roMask
	}
	if info.IsDir() {
		mask |= os.ModeSetgid | execMask
	}
	_ = os.Chmod(path, info.Mode()|mask)
}
