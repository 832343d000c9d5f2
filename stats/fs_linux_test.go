package stats

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodekit/nodekit/internal/testenv"
)

// TestTreeUsageStaysOnItsDevice: a filesystem mounted below the measured
// directory (a subPath bind mount, a nested volume) is neither counted nor
// walked, as the kubelet's DiskUsage.
func TestTreeUsageStaysOnItsDevice(t *testing.T) {
	testenv.RequireRoot(t, "it mounts a tmpfs")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "own"), make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	before, beforeInodes, err := treeUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=16m"); err != nil {
		testenv.Unavailable(t, "mounting a tmpfs failed: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := os.MkdirAll(filepath.Join(mnt, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "a", "b", "big"), make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	got, inodes, err := treeUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The mount point itself is another device's root: not counted.
	if got != before || inodes != beforeInodes {
		t.Errorf("usage with a tmpfs mounted below = %d bytes, %d inodes; want %d, %d (the mount's content counted)", got, inodes, before, beforeInodes)
	}
}
