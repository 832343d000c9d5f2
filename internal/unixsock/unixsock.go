// Package unixsock is what the agent and its test tools know of unix
// socket addresses on Linux: how long a socket's path may be.
package unixsock

import "fmt"

// MaxPathLen is the longest path a unix socket can be bound to on Linux:
// sun_path's 108 bytes less the terminating NUL.
const MaxPathLen = 107

// CheckPath returns an error naming path, its length and the limit when
// path is too long to bind a unix socket to (the kernel's own answer,
// "bind: invalid argument", names neither); nil otherwise.
func CheckPath(path string) error {
	if n := len(path); n > MaxPathLen {
		return fmt.Errorf("socket path %q is %d bytes, longer than the %d bytes a unix socket allows", path, n, MaxPathLen)
	}
	return nil
}
