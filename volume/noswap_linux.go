package volume

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// tmpfsNoswap returns whether tmpfs volumes get the noswap option: the
// configured answer, or (detected once) whether the kernel is Linux 6.4 or
// later and the agent does not run in a user namespace, where noswap is
// refused, as the kubelet decides.
func tmpfsNoswap(configured *bool) func() bool {
	if configured != nil {
		v := *configured
		return func() bool { return v }
	}
	return sync.OnceValue(func() bool {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return false
		}
		return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 4) && !inUserNamespace()
	})
}

// kernelAtLeast reports whether release (e.g. "6.8.0-45-generic") is at
// least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err := strconv.Atoi(parts[0])
	if err != nil {
		return false
	}
	minStr := parts[1]
	if i := strings.IndexFunc(minStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minStr = minStr[:i]
	}
	mn, err := strconv.Atoi(minStr)
	if err != nil {
		return false
	}
	return maj > major || (maj == major && mn >= minor)
}

// inUserNamespace reports whether the process runs in a user namespace
// other than the initial one.
func inUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return !(len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295")
}
