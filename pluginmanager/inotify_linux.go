package pluginmanager

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotify watches directories for entries created and removed. It is the
// only platform-specific piece: fsnotify (what the kubelet uses) is not a
// dependency of nodekit, and the few calls it would wrap are these.
type inotify struct {
	fd int
	// f owns fd and reads it through the runtime's poller, so close
	// unblocks a pending read.
	f *os.File

	mu   sync.Mutex
	dirs map[int]string // watch descriptor → directory
}

func newWatcher() (watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	return &inotify{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), dirs: map[int]string{}}, nil
}

// add watches dir (not its subdirectories).
func (w *inotify) add(dir string) error {
	wd, err := unix.InotifyAddWatch(w.fd, dir,
		unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_TO|unix.IN_MOVED_FROM|unix.IN_ONLYDIR)
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	w.mu.Lock()
	w.dirs[wd] = dir
	w.mu.Unlock()
	return nil
}

// read sends what happens in the watched directories to events until the
// watcher is closed, then closes events.
func (w *inotify) read(events chan<- fsEvent) {
	defer close(events)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				events <- fsEvent{op: opOverflow, err: err}
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				events <- fsEvent{op: opOverflow}
				continue
			}
			w.mu.Lock()
			dir, ok := w.dirs[int(ev.Wd)]
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(w.dirs, int(ev.Wd))
			}
			w.mu.Unlock()
			if !ok || ev.Len == 0 {
				continue
			}
			path := filepath.Join(dir, cString(name))
			switch {
			case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
				events <- fsEvent{op: opCreate, path: path, dir: ev.Mask&unix.IN_ISDIR != 0}
			case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
				events <- fsEvent{op: opRemove, path: path}
			}
		}
	}
}

func (w *inotify) close() error { return w.f.Close() }

// cString returns the NUL-padded name of an inotify event.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
