package cluster

import (
	"errors"
	"os"
	"path/filepath"
)

// ContainerLogLinks is where the upstream kubelet links container logs.
const ContainerLogLinks = "/var/log/containers"

// RemoveLogLinks removes the links in ContainerLogLinks whose names hold
// match (<pod>_<namespace>_<container>-<id>.log) and, when removeDir, the
// directory itself if nothing else is in it: what a kubelet run by a test
// or a benchmark leaves on the host.
func RemoveLogLinks(match string, removeDir bool) error {
	links, err := filepath.Glob(filepath.Join(ContainerLogLinks, "*"+match+"*.log"))
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range links {
		if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if removeDir {
		if entries, err := os.ReadDir(ContainerLogLinks); err == nil && len(entries) == 0 {
			errs = append(errs, os.Remove(ContainerLogLinks))
		}
	}
	return errors.Join(errs...)
}
