package machine

import "golang.org/x/sys/unix"

// filesystemCapacity returns the size in bytes of the filesystem holding
// path, as cAdvisor computes it (fragment size × blocks).
func filesystemCapacity(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks) * st.Frsize, nil
}
