package pluginmanager

import (
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pollWatcher is the watch where inotify is not available (another
// platform, or the user's inotify instances exhausted): it lists the
// directories every period and reports sockets created (or replaced: a
// new inode) and removed.
type pollWatcher struct {
	period time.Duration

	mu    sync.Mutex
	roots []string
	done  chan struct{}
	once  sync.Once
}

func newPollWatcher(period time.Duration) *pollWatcher {
	return &pollWatcher{period: period, done: make(chan struct{})}
}

// add lists dir (and what is below it) from now on; a directory below a
// listed one needs no add of its own.
func (w *pollWatcher) add(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.roots {
		if dir == r || strings.HasPrefix(dir, r+string(filepath.Separator)) {
			return nil
		}
	}
	w.roots = append(w.roots, dir)
	return nil
}

func (w *pollWatcher) read(events chan<- fsEvent) {
	defer close(events)
	seen := w.list()
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		now := w.list()
		for p, ino := range now {
			if old, ok := seen[p]; !ok || old != ino {
				events <- fsEvent{op: opCreate, path: p}
			}
		}
		for p := range seen {
			if _, ok := now[p]; !ok {
				events <- fsEvent{op: opRemove, path: p}
			}
		}
		seen = now
	}
}

// list returns the sockets under the roots by identity.
func (w *pollWatcher) list() map[string]socketID {
	w.mu.Lock()
	roots := append([]string(nil), w.roots...)
	w.mu.Unlock()
	out := map[string]socketID{}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || path == root {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type() != fs.ModeSocket {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			out[path] = identity(fi)
			return nil
		})
	}
	return out
}

func (w *pollWatcher) close() error {
	w.once.Do(func() { close(w.done) })
	return nil
}

// socketID tells a socket from another created at the same path: a new
// socket may get the old one's inode number, not its modification time.
type socketID struct {
	ino   uint64
	mtime int64
}

func identity(fi fs.FileInfo) socketID {
	id := socketID{mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = st.Ino
	}
	return id
}
