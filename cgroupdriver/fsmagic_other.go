//go:build !linux

package cgroupdriver

// isCgroupMount reports whether dir is on a mounted cgroup filesystem, which
// only Linux has: every tree is emulated elsewhere.
func isCgroupMount(string) bool { return false }
