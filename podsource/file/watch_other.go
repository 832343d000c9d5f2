//go:build !linux

package file

import "errors"

// watchSupported: without inotify the manifests are only read every check
// period.
const watchSupported = false

// watcher is never created where change notifications are not supported.
type watcher struct{ changes chan struct{} }

func newWatcher(string) (*watcher, error) {
	return nil, errors.New("change notifications are only supported on Linux")
}

func (w *watcher) err() error { return nil }

func (w *watcher) close() {}
