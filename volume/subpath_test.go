package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/mount-utils"
)

func TestSubPath(t *testing.T) {
	f := newFixture(t, nil, nil)
	pod := testPod("u1", v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	vol := f.mountPod(pod)["v"].Path
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(vol, "dir"), 0o755)
	os.WriteFile(filepath.Join(vol, "dir", "file"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(vol, "escape"))
	os.Symlink("dir/file", filepath.Join(vol, "inside"))
	spec := func(sub string, idx int) SubPathSpec {
		return SubPathSpec{PodUID: "u1", VolumeName: "v", VolumePath: vol, SubPath: sub, ContainerName: "app", MountIndex: idx}
	}

	// A missing directory is created with the volume's mode, then bound.
	target, err := f.m.SubPath(f.ctx, spec("new/deep", 0))
	if err != nil {
		t.Fatal(err)
	}
	wantTarget := filepath.Join(f.podDir("u1"), "volume-subpaths", "v", "app", "0")
	if target != wantTarget {
		t.Errorf("target %s, want %s", target, wantTarget)
	}
	if fi, err := os.Stat(filepath.Join(vol, "new", "deep")); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("subPath directory: %v, mode %v, want the volume's 0777", err, fi.Mode())
	}
	log := f.mounter.GetLog()
	last := log[len(log)-1]
	if last.Action != mount.FakeActionMount || last.Target != target || !strings.HasPrefix(last.Source, fmt.Sprintf("/proc/%d/fd/", os.Getpid())) {
		t.Errorf("mount %+v, want a bind mount of an open file descriptor onto %s", last, target)
	}

	// A file, and a symlink staying inside the volume: allowed.
	fileTarget, err := f.m.SubPath(f.ctx, spec("dir/file", 1))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fileTarget); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the target of a file subPath is not a file: %v", err)
	}
	if _, err := f.m.SubPath(f.ctx, spec("inside", 2)); err != nil {
		t.Errorf("a symlink inside the volume: %v", err)
	}

	// Escapes fail, and nothing is created outside the volume.
	for sub, want := range map[string]string{
		"escape":       `failed to prepare subPath for volumeMount "v" of container "app"`,
		"escape/newer": `failed to create subPath directory for volumeMount "v" of container "app"`,
		"/etc":         "error SubPath `/etc` must not be an absolute path",
		"dir/../..":    "unable to provision SubPath `dir/../..`: must not contain '..'",
	} {
		_, err := f.m.SubPath(f.ctx, spec(sub, 3))
		if err == nil || err.Error() != want {
			t.Errorf("subPath %q: error %v, want %q", sub, err, want)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("created outside the volume: %v", entries)
	}

	// The pod's teardown unmounts and removes the bind mounts.
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, fileTarget} {
		if f.mounted(p) {
			t.Errorf("%s still mounted", p)
		}
	}
	if _, err := os.Stat(filepath.Join(f.podDir("u1"), "volume-subpaths")); !os.IsNotExist(err) {
		t.Errorf("volume-subpaths left: %v", err)
	}
}
