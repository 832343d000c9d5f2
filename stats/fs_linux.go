package stats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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
// allocated blocks × 512 per file, one inode each. It reads the directory
// and stats its entries relative to it, with the system calls directly.
func fileUsage(dir string) (used, inodes uint64, err error) {
	fd, err := openRetry(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return 0, 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var buf [4096]byte
	for {
		n, err := unix.ReadDirent(fd, buf[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, 0, &os.PathError{Op: "readdirent", Path: dir, Err: err}
		}
		if n == 0 {
			break
		}
		for b := buf[:n]; len(b) >= direntNameOffset; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < direntNameOffset || reclen > len(b) {
				return 0, 0, fmt.Errorf("read directory %s: malformed entry", dir)
			}
			typ, name := b[18], b[direntNameOffset:reclen]
			b = b[reclen:]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if typ == unix.DT_DIR || string(name) == "." || string(name) == ".." {
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // rotated away meanwhile
				}
				return 0, 0, &os.PathError{Op: "fstatat", Path: filepath.Join(dir, string(name)), Err: err}
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				continue
			}
			used += uint64(st.Blocks) * 512
			inodes++
		}
	}
	return used, inodes, nil
}

// direntNameOffset is where the name starts in a linux_dirent64.
const direntNameOffset = 19

// pathUsage returns the disk usage of one file (or an empty directory),
// as du measures it.
func pathUsage(path string) (bytes, inodes uint64, err error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, 0, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return uint64(st.Blocks) * 512, 1, nil
}

// treeUsage returns the disk usage of dir and everything below it, as du
// (and the kubelet's volume metrics) measure it: allocated blocks × 512 of
// every file and directory, hard links counted once, and the number of
// inodes. Like the kubelet's DiskUsage it stays on dir's device: what is
// mounted below dir (a subPath bind mount, a nested volume) is not
// counted and not walked. Entries that vanish during the walk are skipped.
func treeUsage(dir string) (bytes, inodes uint64, err error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		return 0, 0, &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	err = filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && path != dir {
				return nil
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			if errors.Is(err, unix.ENOENT) && path != dir {
				return nil
			}
			return &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		if st.Dev != root.Dev {
			// Another filesystem mounted here.
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			key := inode{uint64(st.Dev), st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		bytes += uint64(st.Blocks) * 512
		inodes++
		return nil
	})
	return bytes, inodes, err
}

// onPseudoFS reports whether fd is a file of procfs, sysfs or a cgroup
// filesystem, whose content the kernel makes at each read: such a file is
// never replaced under a held descriptor (a removed one fails its reads).
func onPseudoFS(fd int) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false
	}
	switch st.Type {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC:
		return true
	}
	return false
}
