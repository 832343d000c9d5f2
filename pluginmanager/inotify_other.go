//go:build !linux

package pluginmanager

import "errors"

func newWatcher() (watcher, error) {
	return nil, errors.New("inotify is Linux only")
}
