package volume

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/internal/testenv"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/mount-utils"
)

// requireRoot skips a test that mounts unless it runs as root; under CI it
// fails instead.
func requireRoot(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "it must run as root"
	} else {
		// Root without the privilege to mount (an unprivileged container).
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
			why = "mounting a tmpfs failed: " + err.Error()
		} else {
			unix.Unmount(dir, 0)
		}
	}
	if why == "" {
		return
	}
	testenv.Unavailable(t, "this test mounts tmpfs and bind mounts; %s", why)
}

// mountsUnder returns the mount points under dir with their options.
func mountsUnder(t *testing.T, dir string) map[string]string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		if f[4] == real || strings.HasPrefix(f[4], real+"/") {
			out[f[4]] = f[len(f)-1]
		}
	}
	return out
}

// unmountAllUnder removes what a failed test left mounted under dir.
func unmountAllUnder(t *testing.T, dir string) {
	paths := []string{}
	for p := range mountsUnder(t, dir) {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	slices.Reverse(paths)
	for _, p := range paths {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}

func isTmpfs(t *testing.T, path string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC
}

func TestRealMounts(t *testing.T) {
	requireRoot(t)
	f := newFixture(t, []runtime.Object{secret("s", map[string]string{"k": "secret-value"})}, func(o *Options) {
		o.Mounter = nil     // mount(8) and the kernel's mount table
		o.TmpfsNoswap = nil // detected
	})
	t.Cleanup(func() { unmountAllUnder(t, f.root) })
	pod := testPod("u1",
		v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("1Mi"))}}},
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
		v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	)
	got := f.mountPod(pod)
	mounts := mountsUnder(t, f.root)
	if len(mounts) != 2 {
		t.Errorf("mounts under the root: %v, want the two tmpfs", mounts)
	}
	if !isTmpfs(t, got["mem"].Path) || !isTmpfs(t, got["s"].Path) || isTmpfs(t, got["disk"].Path) {
		t.Error("memory-backed volumes are not tmpfs, or the disk one is")
	}
	memOpts := mounts[got["mem"].Path]
	if !strings.Contains(memOpts, "size=1024k") {
		t.Errorf("memory emptyDir mounted with %q, want size=1024k", memOpts)
	}
	if want := tmpfsNoswap(nil)(); strings.Contains(memOpts, "noswap") != want {
		t.Errorf("memory emptyDir mounted with %q; noswap expected: %v", memOpts, want)
	}
	if readFile(t, filepath.Join(got["s"].Path, "k")) != "secret-value" {
		t.Error("secret content missing")
	}
	// Idempotent: no second tmpfs on a second sync.
	f.mountPod(pod)
	if n := len(mountsUnder(t, f.root)); n != 2 {
		t.Errorf("%d mounts after a second MountPod", n)
	}

	// A subPath is a real bind mount of the file inside the volume.
	os.MkdirAll(filepath.Join(got["mem"].Path, "sub"), 0o755)
	os.WriteFile(filepath.Join(got["mem"].Path, "sub", "f"), []byte("in the subpath"), 0o644)
	spec := SubPathSpec{PodUID: "u1", VolumeName: "mem", VolumePath: got["mem"].Path, SubPath: "sub", ContainerName: "app"}
	target, err := f.m.SubPath(f.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(target, "f")) != "in the subpath" {
		t.Error("the bind mount does not show the subPath")
	}
	if again, err := f.m.SubPath(f.ctx, spec); err != nil || again != target {
		t.Errorf("second SubPath: %s, %v", again, err)
	}
	if n := len(mountsUnder(t, target)); n != 1 {
		t.Errorf("%d mounts on the subPath target after two calls, want 1", n)
	}

	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if left := mountsUnder(t, f.root); len(left) != 0 {
		t.Errorf("left mounted: %v", left)
	}
	if _, err := os.Stat(filepath.Join(f.podDir("u1"), "volumes")); !os.IsNotExist(err) {
		t.Errorf("volumes directory left: %v", err)
	}
}

func TestRealOrphanCleanup(t *testing.T) {
	requireRoot(t)
	f := newFixture(t, nil, func(o *Options) {
		o.Mounter = nil
		o.PodKnown = func(types.UID) bool { return false }
	})
	t.Cleanup(func() { unmountAllUnder(t, f.root) })
	real := mount.New("")
	// An orphan whose secret tmpfs is still mounted: unmounted and removed.
	_, secretDir, _ := orphanDisk(t, f, "plain")
	os.RemoveAll(filepath.Join(f.podDir("plain"), "volumes", "kubernetes.io~csi"))
	if err := real.Mount("tmpfs", secretDir, "tmpfs", nil); err != nil {
		t.Fatal(err)
	}
	// An orphan with a bind mount from the same filesystem inside its
	// emptyDir: the kernel's cheap check misses it, the mount table does
	// not; nothing behind it may be deleted.
	edDir, _, _ := orphanDisk(t, f, "bound")
	os.RemoveAll(filepath.Join(f.podDir("bound"), "volumes", "kubernetes.io~csi"))
	precious := t.TempDir()
	os.WriteFile(filepath.Join(precious, "keep"), []byte("x"), 0o644)
	inner := filepath.Join(edDir, "inner")
	os.MkdirAll(inner, 0o755)
	if err := real.Mount(precious, inner, "", []string{"bind"}); err != nil {
		t.Fatal(err)
	}

	f.run()
	f.eventually("the reconciler to wait", f.clock.HasWaiters)
	if _, err := os.Stat(f.podDir("plain")); !os.IsNotExist(err) {
		t.Errorf("the plain orphan is still there: %v", err)
	}
	if readFile(t, filepath.Join(precious, "keep")) != "x" {
		t.Fatal("deleted through a bind mount")
	}
	if _, err := os.Stat(inner); err != nil {
		t.Errorf("the bind mount point was removed: %v", err)
	}
}

// TestRealSubPathOfAPodNotMountedSinceStart: a hostPath volume's subPath
// bind mount (hostPath has no directory under volumes/) of a pod that a
// restarted Manager never mounted is unmounted by UnmountPod, and nothing
// behind it is deleted.
func TestRealSubPathOfAPodNotMountedSinceStart(t *testing.T) {
	requireRoot(t)
	host := t.TempDir()
	os.MkdirAll(filepath.Join(host, "sub"), 0o755)
	os.WriteFile(filepath.Join(host, "sub", "keep"), []byte("x"), 0o644)
	before := newFixture(t, nil, func(o *Options) { o.Mounter = nil })
	t.Cleanup(func() { unmountAllUnder(t, before.root) })
	pod := testPod("u1", v1.Volume{Name: "hp", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: host}}})
	got := before.mountPod(pod)
	target, err := before.m.SubPath(before.ctx, SubPathSpec{PodUID: "u1", VolumeName: "hp", VolumePath: got["hp"].Path, SubPath: "sub", ContainerName: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(mountsUnder(t, target)); n != 1 {
		t.Fatalf("%d mounts on the subPath target, want 1", n)
	}

	// The agent restarts: a new Manager on the same root that never
	// mounted the pod tears it down.
	after := newFixture(t, nil, func(o *Options) { o.Mounter = nil; o.RootDir = before.root })
	if err := after.m.UnmountPod(after.ctx, "u1"); err != nil {
		t.Fatalf("UnmountPod of a pod with a hostPath subPath mounted before the restart: %v", err)
	}
	if left := mountsUnder(t, before.root); len(left) != 0 {
		t.Errorf("left mounted: %v", left)
	}
	if _, err := os.Stat(filepath.Join(before.podDir("u1"), subPathDirName)); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", subPathDirName, err)
	}
	if readFile(t, filepath.Join(host, "sub", "keep")) != "x" {
		t.Error("the hostPath's content was deleted through the bind mount")
	}
}

// TestRealLocalPersistentVolume: a local PV is bind-mounted read-only on
// the kubelet's kubernetes.io~local-volume/<pv> directory with the real
// mounter; the teardown unmounts it and leaves the data.
func TestRealLocalPersistentVolume(t *testing.T) {
	requireRoot(t)
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pv := boundPV("pv-local", "c1", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: data}})
	f := newFixture(t, []runtime.Object{claim("data", "c1", "pv-local", v1.ClaimBound), pv}, func(o *Options) { o.Mounter = nil })
	got, err := f.m.MountPod(f.ctx, testPod("u1", claimVolume("data", "data", true)))
	if err != nil {
		t.Fatal(err)
	}
	path := f.volDir("u1", PluginLocal, "pv-local")
	if got["data"].Path != path || !got["data"].ReadOnly {
		t.Errorf("mounted %+v, want %s read-only", got["data"], path)
	}
	if b, err := os.ReadFile(filepath.Join(path, "keep")); err != nil || string(b) != "x" {
		t.Errorf("the PV's file through the mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(path, "new"), nil, 0o644); err == nil {
		t.Error("wrote through a read-only local volume mount")
	}
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(t, f.podDir("u1")); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := os.Stat(filepath.Join(data, "keep")); err != nil {
		t.Errorf("the PV's data after the teardown: %v", err)
	}
}
