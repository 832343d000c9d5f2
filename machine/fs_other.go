//go:build !linux

package machine

import (
	"fmt"
	"runtime"
)

// filesystemCapacity is only implemented on Linux.
func filesystemCapacity(path string) (int64, error) {
	return 0, fmt.Errorf("filesystem capacity of %s: not supported on %s", path, runtime.GOOS)
}
