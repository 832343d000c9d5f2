package cluster

import (
	"os"
	"strings"
	"testing"
)

// requireOrSkip fails under CI (CI=true), where nothing may skip silently,
// and skips elsewhere.
func requireOrSkip(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("required under CI: %v", err)
	}
	t.Skip(err)
}

// testLog writes harness progress to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
