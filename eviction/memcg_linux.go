package eviction

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// memcgThreshold is a cgroup v1 memory threshold: an eventfd registered
// through cgroup.event_control on memory.usage_in_bytes. The eventfd is
// non-blocking and read through the Go poller, so Close wakes a Wait.
type memcgThreshold struct {
	f *os.File
}

// openMemcgThreshold arms a notification for when dir's memory usage
// crosses usageThreshold bytes.
func openMemcgThreshold(dir string, usageThreshold int64) (memcgWaiter, error) {
	control := filepath.Join(dir, "cgroup.event_control")
	if _, err := os.Stat(control); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", control, errMemcgUnsupported)
	}
	usagePath := filepath.Join(dir, "memory.usage_in_bytes")
	usage, err := unix.Open(usagePath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", usagePath, err)
	}
	defer unix.Close(usage)
	ctl, err := unix.Open(control, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", control, err)
	}
	defer unix.Close(ctl)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if _, err := unix.Write(ctl, fmt.Appendf(nil, "%d %d %d", efd, usage, usageThreshold)); err != nil {
		unix.Close(efd)
		return nil, fmt.Errorf("register memcg threshold %d on %s: %w", usageThreshold, usagePath, err)
	}
	return &memcgThreshold{f: os.NewFile(uintptr(efd), "memcg-threshold")}, nil
}

func (t *memcgThreshold) Wait() error {
	var buf [8]byte
	_, err := t.f.Read(buf[:])
	return err
}

func (t *memcgThreshold) Close() error { return t.f.Close() }
