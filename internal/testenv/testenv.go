// Package testenv decides, one way for every nodekit test, what a test does
// when the machine lacks what it needs (root, a kernel feature, containerd,
// the control plane): under CI it fails, elsewhere it skips, saying what is
// missing either way, so nothing CI runs skips silently. CI is on when the
// CI environment variable parses as true (strconv.ParseBool), as .ci/run
// sets it.
package testenv

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// InCI reports whether the tests run under CI.
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Unavailable stops the test because what it needs is missing: t.Fatalf
// under CI, t.Skipf elsewhere, with the formatted reason.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("required under CI: %s", msg)
	}
	t.Skipf("%s (set CI=true to make this a failure)", msg)
}

// RequireRoot stops the test (see Unavailable) unless it runs as root.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root: %s", why)
	}
}
