package volume

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// blockDevice returns a block device of the machine, or "".
func blockDevice() string {
	entries, _ := os.ReadDir("/dev")
	for _, e := range entries {
		p := filepath.Join("/dev", e.Name())
		fi, err := os.Stat(p)
		if err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0 {
			return p
		}
	}
	return ""
}

func TestCheckHostPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	link := filepath.Join(dir, "link")
	os.Symlink(file, link)
	missing := filepath.Join(dir, "missing")
	block := blockDevice()

	cases := []struct {
		path string
		typ  v1.HostPathType
		want string
	}{
		{dir, v1.HostPathUnset, ""},
		{missing, v1.HostPathUnset, ""},
		{dir, v1.HostPathDirectory, ""},
		{file, v1.HostPathFile, ""},
		{link, v1.HostPathFile, ""},
		{sock, v1.HostPathSocket, ""},
		{"/dev/null", v1.HostPathCharDev, ""},
		{dir, v1.HostPathDirectoryOrCreate, ""},
		{file, v1.HostPathFileOrCreate, ""},
		{file, v1.HostPathDirectory, "hostPath type check failed: " + file + " is not a directory, it's a File"},
		{file, v1.HostPathDirectoryOrCreate, "hostPath type check failed: " + file + " is not a directory, it's a File"},
		{dir, v1.HostPathFile, "hostPath type check failed: " + dir + " is not a file, it's a Directory"},
		{dir, v1.HostPathFileOrCreate, "hostPath type check failed: " + dir + " is not a file, it's a Directory"},
		{file, v1.HostPathSocket, "hostPath type check failed: " + file + " is not a socket file, it's a File"},
		{file, v1.HostPathCharDev, "hostPath type check failed: " + file + " is not a character device, it's a File"},
		{"/dev/null", v1.HostPathBlockDev, "hostPath type check failed: /dev/null is not a block device, it's a CharDevice"},
		{file, v1.HostPathBlockDev, "hostPath type check failed: " + file + " is not a block device, it's a File"},
		{missing, v1.HostPathDirectory, "hostPath type check failed, " + missing + " is not a directory, unable to determine its type: path \"" + missing + "\" does not exist"},
		{missing, v1.HostPathFile, "hostPath type check failed, " + missing + " is not a file, unable to determine its type: path \"" + missing + "\" does not exist"},
		{missing, v1.HostPathSocket, "hostPath type check failed, " + missing + " is not a socket file, unable to determine its type: path \"" + missing + "\" does not exist"},
		{missing, v1.HostPathCharDev, "hostPath type check failed, " + missing + " is not a character device, unable to determine its type: path \"" + missing + "\" does not exist"},
		{missing, v1.HostPathBlockDev, "hostPath type check failed, " + missing + " is not a block device, unable to determine its type: path \"" + missing + "\" does not exist"},
		{dir, "Weird", "Weird is an invalid volume type"},
		{dir + "/../x", v1.HostPathUnset, "invalid HostPath `" + dir + "/../x`: must not contain '..'"},
	}
	if block != "" {
		cases = append(cases, struct {
			path string
			typ  v1.HostPathType
			want string
		}{block, v1.HostPathBlockDev, ""})
	} else {
		t.Log("no block device on this machine: the positive BlockDevice case is not checked")
	}
	for _, c := range cases {
		typ := c.typ
		err := CheckHostPath(c.path, &typ)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s as %q: error %q, want %q", c.path, c.typ, got, c.want)
		}
	}
	if err := CheckHostPath(missing, nil); err != nil {
		t.Errorf("nil type: %v", err)
	}
}

func TestCheckHostPathCreates(t *testing.T) {
	dir := t.TempDir()
	newDir := filepath.Join(dir, "a", "b")
	if err := CheckHostPath(newDir, ptr(v1.HostPathDirectoryOrCreate)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(newDir); err != nil || !fi.IsDir() {
		t.Fatalf("DirectoryOrCreate did not create %s: %v", newDir, err)
	}
	newFile := filepath.Join(dir, "f")
	if err := CheckHostPath(newFile, ptr(v1.HostPathFileOrCreate)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(newFile); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("FileOrCreate did not create an empty file %s: %v", newFile, err)
	}
	// FileOrCreate does not create the parent directory, as the kubelet.
	deep := filepath.Join(dir, "no", "f")
	if err := CheckHostPath(deep, ptr(v1.HostPathFileOrCreate)); err == nil {
		t.Error("FileOrCreate created a missing parent directory")
	}
}

func TestHostPathVolume(t *testing.T) {
	f := newFixture(t, nil, nil)
	dir := t.TempDir()
	pod := testPod("u1", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr(v1.HostPathDirectory)}}})
	got := f.mountPod(pod)
	if got["h"] != (Mounted{Path: dir}) {
		t.Errorf("hostPath mounted as %+v, want its own path, read-write, no relabel", got["h"])
	}
	bad := testPod("u2", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: filepath.Join(dir, "nope"), Type: ptr(v1.HostPathFile)}}})
	_, err := f.m.MountPod(f.ctx, bad)
	want := `unmounted volumes=[h], unattached volumes=[], failed to process volumes=[]: MountVolume.SetUp failed for volume "h" : hostPath type check failed, ` +
		dir + `/nope is not a file, unable to determine its type: path "` + dir + `/nope" does not exist`
	if err == nil || err.Error() != want {
		t.Errorf("error\n %v\nwant\n %s", err, want)
	}
}
