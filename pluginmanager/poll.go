package pluginmanager

import (
	"io/fs"
	"sync"
	"syscall"
	"time"
)

// pollWatcher is the watch where inotify is not available (another
// platform, or the user's inotify instances used up): it asks the Manager
// to scan the directory again every period, which registers sockets new
// or replaced (a new identity) and de-registers those gone.
type pollWatcher struct {
	period time.Duration
	done   chan struct{}
	once   sync.Once
}

func newPollWatcher(period time.Duration) *pollWatcher {
	return &pollWatcher{period: period, done: make(chan struct{})}
}

// add does nothing: every scan lists the whole registration directory.
func (w *pollWatcher) add(string) error { return nil }

func (w *pollWatcher) read(events chan<- fsEvent) {
	defer close(events)
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
			events <- fsEvent{op: opRescan}
		}
	}
}

func (w *pollWatcher) close() error {
	w.once.Do(func() { close(w.done) })
	return nil
}

// socketID tells a socket from another created at the same path: a new
// socket may get the old one's inode number, rarely its modification time
// too (the kernel's coarse clock), so a socket replaced within one listing
// period can go unnoticed by a pollWatcher; inotify sees every creation.
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
