//go:build !linux

package stats

import (
	"errors"
)

var errNotLinux = errors.New("filesystem statistics are only implemented on Linux")

func statfs(string) (fsInfo, error) { return fsInfo{}, errNotLinux }

func fileUsage(string) (uint64, uint64, error) { return 0, 0, errNotLinux }

func pathUsage(string) (uint64, uint64, error) { return 0, 0, errNotLinux }

func treeUsage(string) (uint64, uint64, error) { return 0, 0, errNotLinux }

func onPseudoFS(int) bool { return false }
