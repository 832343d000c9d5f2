package file

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchSupported: change notifications come from inotify.
const watchSupported = true

// watchMask is what the watch reports: entries created, removed, renamed,
// written or changed in mode, and the watched directory itself going away.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watcher is an inotify watch on the static pod directory, or on the
// parent directory of a manifest file (or of a path that does not exist
// yet), so that replacing the file by a rename is seen too.
type watcher struct {
	f *os.File
	// changes receives a value when something relevant changed (several
	// changes may be merged into one), and is closed when the watch ends.
	changes chan struct{}
	done    chan struct{}

	mu  sync.Mutex
	end error
}

// newWatcher starts watching path.
func newWatcher(path string) (*watcher, error) {
	dir, name := path, ""
	if info, err := os.Stat(path); err != nil || !info.IsDir() {
		dir, name = filepath.Dir(path), filepath.Base(path)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, watchMask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	// A non-blocking descriptor makes the File use the runtime's poller, so
	// Close interrupts a pending Read.
	w := &watcher{
		f:       os.NewFile(uintptr(fd), "inotify"),
		changes: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go w.loop(name)
	return w, nil
}

// loop reads events until the watch ends or close is called. With name
// set, only events about that entry of the directory count.
func (w *watcher) loop(name string) {
	defer close(w.done)
	defer close(w.changes)
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			w.finish(err)
			return
		}
		changed, gone := parseEvents(buf[:n], name)
		if changed {
			select {
			case w.changes <- struct{}{}:
			default:
			}
		}
		if gone != nil {
			w.finish(gone)
			return
		}
	}
}

// parseEvents reads a buffer of inotify events: whether one is relevant,
// and why the watch must end (the directory went away, or the path
// watched through its parent became a directory, which is watched itself).
func parseEvents(buf []byte, name string) (changed bool, gone error) {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			return changed, errors.New("short inotify event")
		}
		entry := string(bytes.TrimRight(buf[unix.SizeofInotifyEvent:end], "\x00"))
		buf = buf[end:]
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			// Events were lost: read everything again.
			changed = true
		case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
			return true, errors.New("the watched directory was removed or moved")
		case name != "":
			if entry == name {
				changed = true
				if ev.Mask&unix.IN_ISDIR != 0 && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
					return true, errors.New("the static pod path became a directory")
				}
			}
		case !strings.HasPrefix(entry, "."):
			// Dot files are not manifests: an editor's swap file does not
			// trigger a read.
			changed = true
		}
	}
	return changed, nil
}

func (w *watcher) finish(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end == nil && !errors.Is(err, os.ErrClosed) {
		w.end = err
	}
}

// err returns why the watch ended; nil while it runs or after close.
func (w *watcher) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

// close ends the watch and waits for its goroutine.
func (w *watcher) close() {
	w.f.Close()
	<-w.done
}
