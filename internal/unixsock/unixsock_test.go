package unixsock

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckPath: a path of MaxPathLen bytes binds and passes; one byte more
// fails both the kernel's bind and CheckPath, whose error names the path.
func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "s")
	fits := base + strings.Repeat("x", MaxPathLen-len(base))
	if err := CheckPath(fits); err != nil {
		t.Fatalf("CheckPath(%d bytes) = %v", len(fits), err)
	}
	l, err := net.Listen("unix", fits)
	if err != nil {
		t.Fatalf("bind %d bytes: %v", len(fits), err)
	}
	l.Close()
	long := fits + "x"
	if err := CheckPath(long); err == nil || !strings.Contains(err.Error(), long) {
		t.Fatalf("CheckPath(%d bytes) = %v, want an error naming the path", len(long), err)
	}
	if l, err := net.Listen("unix", long); err == nil {
		l.Close()
		t.Fatalf("the kernel bound %d bytes: MaxPathLen is wrong", len(long))
	}
}
