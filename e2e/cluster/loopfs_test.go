package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodekit/nodekit/internal/testenv"
)

func TestCheckLoopFSNamesWhatIsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := checkLoopFS(1000, filepath.Join(t.TempDir(), "loop-control"))
	if err == nil {
		t.Fatal("no error without root, a loop device or mkfs.ext4")
	}
	for _, want := range []string{"root privileges", "a loop device", "mkfs.ext4 on PATH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestLoopFSMountsAJournaledExt4AndFreesItsDevice makes a LoopFS, leaves a
// mount below it as the kubelet leaves its root's, and closes it: the
// mounts are gone and the loop device is free.
func TestLoopFSMountsAJournaledExt4AndFreesItsDevice(t *testing.T) {
	if err := CheckLoopFS(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	dir := t.TempDir()
	lfs, err := NewLoopFS(t.Context(), filepath.Join(dir, "fs.img"), filepath.Join(dir, "fs"))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			lfs.Close()
		}
	}()
	desc, err := DescribeFS(filepath.Join(lfs.Dir, "below"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ext4 with a journal (" + lfs.Device + " on " + lfs.Dir + ")"; desc != want {
		t.Errorf("DescribeFS = %q, want %q", desc, want)
	}
	if _, err := NewLoopFS(t.Context(), filepath.Join(dir, "again.img"), lfs.Dir); err == nil || !strings.Contains(err.Error(), "already mounted") {
		t.Errorf("a second LoopFS on the same directory: %v, want an error saying it is mounted", err)
	}
	sub := filepath.Join(lfs.Dir, "root")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(sub, sub, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := lfs.Close(); err != nil {
		t.Fatal(err)
	}
	if mounts, err := mountsUnder(lfs.Dir); err != nil || len(mounts) > 0 {
		t.Errorf("mounts left under %s: %q (%v)", lfs.Dir, mounts, err)
	}
	if data, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(lfs.Device), "loop", "backing_file")); err == nil && strings.TrimSpace(string(data)) == lfs.Image {
		t.Errorf("%s still backed by %s", lfs.Device, lfs.Image)
	}
}
