package stats

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// statfs returns the usage of the filesystem holding path, as cAdvisor
// computes it (sizes are fragment size × blocks, used is total − free),
// and its device number.
func statfs(path string) (fsInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsInfo{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	var dev unix.Stat_t
	if err := unix.Stat(path, &dev); err != nil {
		return fsInfo{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	frsize := uint64(st.Frsize)
	return fsInfo{
		device:     uint64(dev.Dev),
		capacity:   frsize * st.Blocks,
		available:  frsize * st.Bavail,
		used:       frsize * (st.Blocks - st.Bfree),
		inodes:     st.Files,
		inodesFree: st.Ffree,
	}, nil
}

// fileUsage returns the disk usage of the regular files directly in dir
// (not in its subdirectories), as the kubelet measures container logs:
// allocated blocks × 512 per file, one inode each.
func fileUsage(dir string) (bytes, inodes uint64, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, e.Name()), &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // rotated away meanwhile
			}
			return 0, 0, &os.PathError{Op: "lstat", Path: filepath.Join(dir, e.Name()), Err: err}
		}
		bytes += uint64(st.Blocks) * 512
		inodes++
	}
	return bytes, inodes, nil
}

// pathUsage returns the disk usage of one file (or an empty directory),
// as du measures it.
func pathUsage(path string) (bytes, inodes uint64, err error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, 0, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return uint64(st.Blocks) * 512, 1, nil
}
