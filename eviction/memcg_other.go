//go:build !linux

package eviction

func openMemcgThreshold(string, int64) (memcgWaiter, error) {
	return nil, errMemcgUnsupported
}
