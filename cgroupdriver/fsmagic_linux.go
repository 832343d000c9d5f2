package cgroupdriver

import "golang.org/x/sys/unix"

// isCgroupMount reports whether dir is on a mounted cgroup (v1) or cgroup2
// filesystem.
func isCgroupMount(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}
