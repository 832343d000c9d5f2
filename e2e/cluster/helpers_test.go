package cluster

import (
	"strings"
	"testing"

	"github.com/nodekit/nodekit/internal/testenv"
)

// requireOrSkip fails under CI (CI=true), where nothing may skip silently,
// and skips elsewhere.
func requireOrSkip(t *testing.T, err error) {
	t.Helper()
	testenv.Unavailable(t, "%v", err)
}

// testLog writes harness progress to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
