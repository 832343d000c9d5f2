package volume

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/mount-utils"
)

// sameFSBindMounts is a mounter whose cheap mount point check misses bind
// mounts from the same filesystem, as the kernel heuristics do; only its
// mount table knows them.
type sameFSBindMounts struct{ *mount.FakeMounter }

func (sameFSBindMounts) IsLikelyNotMountPoint(file string) (bool, error) {
	_, err := os.Stat(file)
	return true, err
}

func TestRemoveAllOneFilesystem(t *testing.T) {
	dir := t.TempDir()
	bound := filepath.Join(dir, "a", "bound")
	os.MkdirAll(bound, 0o755)
	os.WriteFile(filepath.Join(bound, "keep"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "a", "other"), []byte("x"), 0o644)
	m := sameFSBindMounts{mount.NewFakeMounter([]mount.MountPoint{{Device: "/dev/sda1", Path: bound}})}

	err := removeAllOneFilesystem(m, dir)
	if err == nil || !strings.Contains(err.Error(), bound+" is a mount point") {
		t.Fatalf("error %v, want a refusal naming the bind mount", err)
	}
	if _, err := os.Stat(filepath.Join(bound, "keep")); err != nil {
		t.Errorf("deleted through a bind mount: %v", err)
	}
	if err := removeDirsOneFilesystem(m, dir); err == nil {
		t.Error("removeDirsOneFilesystem went through a bind mount")
	}

	m.Unmount(bound)
	// Directories only: a file stops it, and stays.
	if err := removeDirsOneFilesystem(m, dir); err == nil {
		t.Error("removeDirsOneFilesystem removed a directory holding files")
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "other")); err != nil {
		t.Errorf("removeDirsOneFilesystem removed a file: %v", err)
	}
	if err := removeAllOneFilesystem(m, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	if err := removeAllOneFilesystem(m, dir); err != nil {
		t.Errorf("removing a missing path: %v", err)
	}
}
