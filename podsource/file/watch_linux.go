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
// closed after writing or changed in mode, and the watched directory itself
// going away. Writes themselves (IN_MODIFY) are not watched: a file being
// written is read once it is closed, not half-written.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB |
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

// newWatcher starts watching path: the directory itself, or its parent
// when path is a file or does not exist (also when the directory is removed
// while the watch is set up).
func newWatcher(path string) (*watcher, error) {
	for range 3 {
		fd, dir, name, err := addWatch(path)
		if err != nil {
			return nil, err
		}
		if name != "" {
			// The directory may have appeared before the parent's watch
			// began: then its own watch is the one needed.
			if info, err := os.Stat(path); err == nil && info.IsDir() {
				unix.Close(fd)
				continue
			}
		}
		// A non-blocking descriptor makes the File use the runtime's
		// poller, so Close interrupts a pending Read.
		w := &watcher{
			f:       os.NewFile(uintptr(fd), "inotify"),
			changes: make(chan struct{}, 1),
			done:    make(chan struct{}),
		}
		go w.loop(dir, name)
		return w, nil
	}
	return nil, fmt.Errorf("inotify watch %s: the path keeps changing", path)
}

// addWatch returns an inotify descriptor watching path when it is a
// directory (name ""), otherwise its parent directory dir for the entry
// name.
func addWatch(path string) (fd int, dir, name string, err error) {
	fd, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return -1, "", "", fmt.Errorf("inotify: %w", err)
	}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		_, err := unix.InotifyAddWatch(fd, path, watchMask)
		if err == nil {
			return fd, path, "", nil
		}
		if !errors.Is(err, unix.ENOENT) {
			unix.Close(fd)
			return -1, "", "", fmt.Errorf("inotify watch %s: %w", path, err)
		}
	}
	dir, name = filepath.Dir(path), filepath.Base(path)
	if _, err := unix.InotifyAddWatch(fd, dir, watchMask); err != nil {
		unix.Close(fd)
		return -1, "", "", fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	return fd, dir, name, nil
}

// loop reads events of dir until the watch ends or close is called. With
// name set, only events about that entry of the directory count.
func (w *watcher) loop(dir, name string) {
	defer close(w.done)
	defer close(w.changes)
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			w.finish(err)
			return
		}
		changed, gone := parseEvents(buf[:n], dir, name)
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

// parseEvents reads a buffer of inotify events from dir: whether one is
// relevant, and why the watch must end (the directory went away, or the
// path watched through its parent became a directory, which is watched
// itself).
func parseEvents(buf []byte, dir, name string) (changed bool, gone error) {
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
			if entry != name {
				continue
			}
			if ev.Mask&unix.IN_ISDIR != 0 && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
				return true, errors.New("the static pod path became a directory")
			}
			changed = changed || !beingWritten(ev.Mask, dir, entry)
		case strings.HasPrefix(entry, "."):
			// Dot files are not manifests: an editor's swap file does not
			// trigger a read.
		default:
			changed = changed || !beingWritten(ev.Mask, dir, entry)
		}
	}
	return changed, nil
}

// beingWritten reports whether the event is the creation of a regular file,
// which is read once it is closed after writing (IN_CLOSE_WRITE follows),
// not empty or half-written. Other creations (symbolic links, directories)
// have no such event to wait for.
func beingWritten(mask uint32, dir, entry string) bool {
	if mask&unix.IN_CREATE == 0 || mask&unix.IN_ISDIR != 0 {
		return false
	}
	info, err := os.Lstat(filepath.Join(dir, entry))
	return err == nil && info.Mode().IsRegular()
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
