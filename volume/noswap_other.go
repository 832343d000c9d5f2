//go:build !linux

package volume

// tmpfsNoswap returns the configured answer; without one, tmpfs volumes
// get no noswap option outside Linux.
func tmpfsNoswap(configured *bool) func() bool {
	v := configured != nil && *configured
	return func() bool { return v }
}
