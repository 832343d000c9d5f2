package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

const (
	// nofollowFlags opens a directory without following a symlink.
	nofollowFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	// openFDFlags opens any file as a path reference only.
	openFDFlags = unix.O_NOFOLLOW | unix.O_PATH | unix.O_CLOEXEC
)

func closeFD(fd int) { _ = unix.Close(fd) }

// safeMakeDir creates subdir (relative) under base with perm, creating
// each missing element with mkdirat under a parent opened without
// following symlinks, so nothing is created outside base.
func safeMakeDir(subdir, base string, perm os.FileMode) error {
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return fmt.Errorf("error resolving symlinks in %s: %w", base, err)
	}
	pathname := filepath.Join(realBase, subdir)
	if !mount.PathWithinBase(pathname, realBase) {
		return fmt.Errorf("path %s is outside of allowed base %s", pathname, realBase)
	}
	if fi, err := os.Stat(pathname); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &os.PathError{Op: "mkdir", Path: pathname, Err: unix.ENOTDIR}
	}
	existing, toCreate, err := findExistingPrefix(realBase, pathname)
	if err != nil {
		return fmt.Errorf("error opening directory %s: %w", pathname, err)
	}
	fullExisting, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return fmt.Errorf("error opening directory %s: %w", existing, err)
	}
	if !mount.PathWithinBase(fullExisting, realBase) {
		return fmt.Errorf("path %s is outside of allowed base %s", fullExisting, realBase)
	}
	parent, err := safeOpen(fullExisting, realBase)
	if err != nil {
		return fmt.Errorf("cannot open directory %s: %w", existing, err)
	}
	defer func() { closeFD(parent) }()
	kernelPerm := uint32(perm & os.ModePerm)
	if perm&os.ModeSetgid != 0 {
		kernelPerm |= unix.S_ISGID
	}
	if perm&os.ModeSetuid != 0 {
		kernelPerm |= unix.S_ISUID
	}
	if perm&os.ModeSticky != 0 {
		kernelPerm |= unix.S_ISVTX
	}
	current := fullExisting
	for _, dir := range toCreate {
		current = filepath.Join(current, dir)
		if err := unix.Mkdirat(parent, dir, kernelPerm); err != nil {
			return fmt.Errorf("cannot create directory %s: %w", current, err)
		}
		child, err := unix.Openat(parent, dir, nofollowFlags, 0)
		if err != nil {
			return fmt.Errorf("cannot open %s: %w", current, err)
		}
		closeFD(parent)
		parent = child
		// Mkdirat's mode is masked by the umask.
		if err := unix.Fchmod(parent, kernelPerm); err != nil {
			return fmt.Errorf("chmod %q failed: %w", current, err)
		}
	}
	return nil
}

// findExistingPrefix returns the longest existing prefix of pathname under
// base and the elements below it that do not exist.
func findExistingPrefix(base, pathname string) (string, []string, error) {
	rel, err := filepath.Rel(base, pathname)
	if err != nil {
		return base, nil, err
	}
	dirs := strings.Split(rel, string(filepath.Separator))
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return pathname, nil, fmt.Errorf("error opening %s: %w", base, err)
	}
	defer func() { closeFD(fd) }()
	current := base
	for i, dir := range dirs {
		child, err := unix.Openat(fd, dir, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return current, dirs[i:], nil
			}
			return base, nil, err
		}
		closeFD(fd)
		fd = child
		current = filepath.Join(current, dir)
	}
	return pathname, nil, nil
}

// safeOpen opens pathname, which must be under base, one element at a
// time without following symlinks, and returns an O_PATH descriptor. It
// fails on any symlink on the way.
func safeOpen(pathname, base string) (int, error) {
	pathname = filepath.Clean(pathname)
	base = filepath.Clean(base)
	rel, err := filepath.Rel(base, pathname)
	if err != nil {
		return -1, err
	}
	parent, err := unix.Open(base, nofollowFlags, 0)
	if err != nil {
		return -1, fmt.Errorf("cannot open directory %s: %w", base, err)
	}
	if rel == "." {
		return parent, nil
	}
	current := base
	for _, seg := range strings.Split(rel, string(filepath.Separator)) {
		current = filepath.Join(current, seg)
		if !mount.PathWithinBase(current, base) {
			closeFD(parent)
			return -1, fmt.Errorf("path %s is outside of allowed base %s", current, base)
		}
		child, err := unix.Openat(parent, seg, openFDFlags, 0)
		closeFD(parent)
		if err != nil {
			return -1, fmt.Errorf("cannot open %s: %w", current, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(child, &st); err != nil {
			closeFD(child)
			return -1, fmt.Errorf("error running fstat on %s with %w", current, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			closeFD(child)
			return -1, fmt.Errorf("unexpected symlink found %s", current)
		}
		parent = child
	}
	return parent, nil
}
