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

// The directory watch is inotify through x/sys: fsnotify (what the kubelet
// uses) is not a dependency of nodekit, and the few calls it would wrap
// are these. The Managers of a process share one inotify instance (a
// fleet of in-process agents would otherwise exhaust the user's 128
// instances, fs.inotify.max_user_instances); each has its own watches on
// it and its own queue of events.

// hub is the process's inotify instance and the watchers on it.
type hub struct {
	fd int
	// f owns fd and reads it through the runtime's poller, so closing it
	// unblocks the read.
	f *os.File

	mu   sync.Mutex
	subs map[int]map[*inotify]string // watch descriptor → watcher → directory
	refs int
}

var (
	hubMu sync.Mutex
	cur   *hub
)

// inotify is one Manager's watcher on the shared hub.
type inotify struct {
	h *hub

	mu     sync.Mutex
	queue  []fsEvent
	wds    map[int]bool
	closed bool
	signal chan struct{}
}

func newWatcher() (watcher, error) {
	hubMu.Lock()
	defer hubMu.Unlock()
	if cur == nil {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			return nil, fmt.Errorf("inotify_init1: %w", err)
		}
		cur = &hub{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), subs: map[int]map[*inotify]string{}}
		go cur.read()
	}
	cur.mu.Lock()
	cur.refs++
	cur.mu.Unlock()
	return &inotify{h: cur, wds: map[int]bool{}, signal: make(chan struct{}, 1)}, nil
}

// add watches dir (not its subdirectories).
func (w *inotify) add(dir string) error {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	wd, err := unix.InotifyAddWatch(h.fd, dir,
		unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_TO|unix.IN_MOVED_FROM|unix.IN_ONLYDIR)
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	if h.subs[wd] == nil {
		h.subs[wd] = map[*inotify]string{}
	}
	h.subs[wd][w] = dir
	w.mu.Lock()
	w.wds[wd] = true
	w.mu.Unlock()
	return nil
}

// push queues ev for w; dead says the hub failed and nothing follows.
func (w *inotify) push(ev fsEvent, dead bool) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	if dead {
		w.closed = true
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// read sends w's events to events until w is closed, then closes events.
func (w *inotify) read(events chan<- fsEvent) {
	defer close(events)
	for {
		w.mu.Lock()
		q, closed := w.queue, w.closed
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range q {
			events <- ev
		}
		if closed {
			return
		}
		<-w.signal
	}
}

func (w *inotify) close() error {
	h := w.h
	h.mu.Lock()
	w.mu.Lock()
	for wd := range w.wds {
		delete(h.subs[wd], w)
		if len(h.subs[wd]) == 0 {
			delete(h.subs, wd)
			_, _ = unix.InotifyRmWatch(h.fd, uint32(wd))
		}
	}
	w.wds = nil
	w.closed = true
	w.mu.Unlock()
	h.refs--
	last := h.refs == 0
	h.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
	if !last {
		return nil
	}
	hubMu.Lock()
	defer hubMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refs != 0 {
		return nil // a new watcher took it meanwhile
	}
	if cur == h {
		cur = nil
	}
	return h.f.Close()
}

// read dispatches the instance's events to the watchers of each watch
// until the instance is closed.
func (h *hub) read() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := h.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			// Every watcher learns the watch is gone; new ones get a new
			// instance.
			hubMu.Lock()
			if cur == h {
				cur = nil
			}
			hubMu.Unlock()
			h.mu.Lock()
			for _, subs := range h.subs {
				for w := range subs {
					w.push(fsEvent{op: opRescan, err: err}, true)
				}
			}
			h.mu.Unlock()
			return
		}
		h.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				for _, subs := range h.subs {
					for w := range subs {
						w.push(fsEvent{op: opRescan}, false)
					}
				}
				continue
			}
			subs := h.subs[int(ev.Wd)]
			if ev.Mask&unix.IN_IGNORED != 0 {
				for w := range subs {
					w.mu.Lock()
					delete(w.wds, int(ev.Wd))
					w.mu.Unlock()
				}
				delete(h.subs, int(ev.Wd))
				continue
			}
			if ev.Len == 0 {
				continue
			}
			base := cString(name)
			for w, dir := range subs {
				path := filepath.Join(dir, base)
				switch {
				case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
					w.push(fsEvent{op: opCreate, path: path, dir: ev.Mask&unix.IN_ISDIR != 0}, false)
				case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
					w.push(fsEvent{op: opRemove, path: path}, false)
				}
			}
		}
		h.mu.Unlock()
	}
}

// cString returns the NUL-padded name of an inotify event.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
