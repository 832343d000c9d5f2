//go:build !linux

package volume

import (
	"errors"
	"os"
)

var errSubPathUnsupported = errors.New("subPath volume mounts are supported on Linux only")

func closeFD(int) {}

func safeMakeDir(string, string, os.FileMode) error { return errSubPathUnsupported }

func safeOpen(string, string) (int, error) { return -1, errSubPathUnsupported }
