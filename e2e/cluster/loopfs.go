package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LoopFSSize is the size of a LoopFS's image file. The file is sparse: the
// host's disk holds only the blocks written (the file system's metadata,
// about 130 MiB, and what the nodes write), and mkfs.ext4 gives it its
// default one inode per 16 KiB, a million inodes.
const LoopFSSize = 16 << 30

// loopDetachWait bounds how long Close waits for the kernel to free the
// loop device once its file system is unmounted.
const loopDetachWait = 10 * time.Second

// LoopFS is a file system of its own for the state of the nodes a run
// starts: an ext4 made by mkfs.ext4 with its defaults, its journal
// included, on a sparse image file, attached to a free loop device and
// mounted on Dir. A production node keeps /var/lib/kubelet,
// /var/lib/containerd and /var/log/pods on a journaled ext4 or xfs; a
// test host's own file system may be something else (this project's
// development VM: ext4 without a journal, on which every new inode scans
// the inodes deleted in the last minute), and what a node pays per file
// would move with it.
type LoopFS struct {
	// Dir is the mount point.
	Dir string
	// Image is the image file.
	Image string
	// Device is the loop device, /dev/loop<N>.
	Device string
}

// CheckLoopFS reports what this machine lacks to make a LoopFS: root
// privileges, the loop driver (/dev/loop-control) and mkfs.ext4.
func CheckLoopFS() error {
	return checkLoopFS(os.Geteuid(), "/dev/loop-control")
}

func checkLoopFS(euid int, loopControl string) error {
	var missing []string
	if euid != 0 {
		missing = append(missing, "root privileges (attaching a loop device and mounting need them)")
	}
	if _, err := os.Stat(loopControl); err != nil {
		missing = append(missing, "a loop device ("+err.Error()+"; modprobe loop)")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		missing = append(missing, "mkfs.ext4 on PATH (Debian's e2fsprogs)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("a loop-mounted ext4 needs %s", strings.Join(missing, "; "))
	}
	return nil
}

// NewLoopFS makes image, a sparse file of LoopFSSize (replacing one that
// exists), formats it with mkfs.ext4's defaults, attaches it to a free
// loop device that the kernel frees once the file system is unmounted
// (LO_FLAGS_AUTOCLEAR) and mounts it on dir (created if missing). Close
// unmounts it; the image file stays for the caller to remove or keep.
func NewLoopFS(ctx context.Context, image, dir string) (*LoopFS, error) {
	if err := CheckLoopFS(); err != nil {
		return nil, err
	}
	fail := func(err error) (*LoopFS, error) { return nil, fmt.Errorf("loop-mounted ext4 on %s: %w", dir, err) }
	if err := os.Remove(image); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	if err := f.Truncate(LoopFSSize); err != nil {
		return fail(err)
	}
	// -F: a regular file, not a block device; -q: no progress output.
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", image).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("mkfs.ext4 %s: %w: %s", image, err, strings.TrimSpace(string(out))))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	// A mount left on dir (a run that was killed) would be hidden, not
	// replaced, and Close would unmount it too.
	if mounts, err := mountsUnder(dir); err != nil || len(mounts) > 0 {
		return fail(errors.Join(err, fmt.Errorf("already mounted there: %s (a killed run's? unmount it)", strings.Join(mounts, ", "))))
	}
	device, loop, err := attachLoop(f)
	if err != nil {
		return fail(err)
	}
	// The mount holds the device; with autoclear, closing loop after a
	// failed mount frees it.
	defer loop.Close()
	if err := unix.Mount(device, dir, "ext4", 0, ""); err != nil {
		return fail(fmt.Errorf("mount %s (%s) on %s: %w", device, image, dir, err))
	}
	return &LoopFS{Dir: dir, Image: image, Device: device}, nil
}

// attachLoop attaches backing to a free loop device with autoclear and
// returns the device's path and an open file of it. Another process may
// take the free device the kernel named before it is configured: then it
// asks for another.
func attachLoop(backing *os.File) (string, *os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", nil, err
	}
	defer ctl.Close()
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("find a free loop device: %w", err)
		}
		device := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(device, os.O_RDWR, 0)
		if err != nil {
			return "", nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		// The name is for losetup -l's eyes; the kernel keeps 63 bytes.
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], backing.Name())
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if err == nil {
			return device, loop, nil
		}
		loop.Close()
		if !errors.Is(err, unix.EBUSY) || attempt == 10 {
			return "", nil, fmt.Errorf("attach %s to %s: %w", backing.Name(), device, err)
		}
	}
}

// Close unmounts every mount at or below Dir (what the nodes left: the
// kubelet's bind mount of its root, containerd's) and the file system
// itself, and waits for the kernel to free the loop device. A process that
// still holds a file there keeps the device until it exits: Close then
// says so.
func (l *LoopFS) Close() error {
	if err := unmountUnder(l.Dir); err != nil {
		return fmt.Errorf("unmount %s: %w", l.Dir, err)
	}
	backing := filepath.Join("/sys/block", filepath.Base(l.Device), "loop", "backing_file")
	deadline := time.Now().Add(loopDetachWait)
	for {
		data, err := os.ReadFile(backing)
		if err != nil || strings.TrimSpace(string(data)) != l.Image {
			return nil // freed (or reused for another file already)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (%s) still attached %s after unmounting %s: a process still holds a file on it", l.Device, l.Image, loopDetachWait, l.Dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// DescribeFS says which file system holds path, as a report would name
// it: the type, and for ext4 whether it has a journal; then the device and
// the mount point ("ext4 without a journal (/dev/vda on /)").
func DescribeFS(path string) (string, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	mounts, err := readMountInfo()
	if err != nil {
		return "", err
	}
	var target, fstype, source string
	for _, m := range mounts {
		// The longest mount point that holds path; of equal ones the last
		// mounted.
		if (m.target == path || m.target == "/" || strings.HasPrefix(path, m.target+"/")) && len(m.target) >= len(target) {
			target, fstype, source = m.target, m.fsType, m.source
		}
	}
	if target == "" {
		return "", fmt.Errorf("describe the file system of %s: no mount holds it", path)
	}
	if fstype == "ext4" {
		// jbd2 names a journal <device>-<inode of the journal>.
		journals, _ := filepath.Glob(filepath.Join("/proc/fs/jbd2", filepath.Base(source)+"-*"))
		if len(journals) > 0 {
			fstype = "ext4 with a journal"
		} else {
			fstype = "ext4 without a journal"
		}
	}
	return fmt.Sprintf("%s (%s on %s)", fstype, source, target), nil
}
