//go:build !linux

package pluginmanager

import "errors"

func newWatcher() (watcher, error) {
	return nil, errors.New("watching the plugin registration directory needs inotify (Linux)")
}
