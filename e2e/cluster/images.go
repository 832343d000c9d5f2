package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Images built locally for the e2e runtime (no registry is reachable, so
// pods use them with imagePullPolicy IfNotPresent or Never).
const (
	// PauseImage is the sandbox image containerd is configured with: the
	// static program in e2e/images/pause.
	PauseImage = "nodekit.local/e2e/pause:1.0"
	// BusyboxImage holds Debian's static busybox with a symlink per applet
	// (sh, sleep, wget, nc, …) and minimal /etc/passwd and /etc/group.
	BusyboxImage = "nodekit.local/e2e/busybox:1.0"
)

// busyboxPath is where Debian's busybox-static package installs busybox.
const busyboxPath = "/bin/busybox"

// BuildImages writes PauseImage and BusyboxImage as docker-archive tarballs
// into dir (for `ctr images import`) and returns their paths. Layers are
// reproducible: every file has a fixed modification time and owner.
func BuildImages(ctx context.Context, src Source, dir string, log io.Writer) ([]string, error) {
	pause, err := pauseLayer(ctx, src, dir, log)
	if err != nil {
		return nil, fmt.Errorf("build image %s: %w", PauseImage, err)
	}
	pauseTar := filepath.Join(dir, "pause.tar")
	if err := writeImage(pauseTar, PauseImage, pause, v1.Config{Entrypoint: []string{"/pause"}}); err != nil {
		return nil, err
	}

	busybox, err := busyboxLayer(ctx, "", "", nil)
	if err != nil {
		return nil, fmt.Errorf("build image %s: %w", BusyboxImage, err)
	}
	busyboxTar := filepath.Join(dir, "busybox.tar")
	err = writeImage(busyboxTar, BusyboxImage, busybox, v1.Config{
		Cmd: []string{"sh"},
		Env: []string{"PATH=" + imagePath},
	})
	if err != nil {
		return nil, err
	}
	return []string{pauseTar, busyboxTar}, nil
}

// BuildProgramImage builds the main package pkg (a directory of the e2e
// module such as "./images/grpchealth", or an import path such as
// "github.com/nodekit/nodekit/examples/fleet") as a static binary and writes a one-layer image
// tagged ref holding only it, at /<base name of pkg>, as its entrypoint,
// as a docker archive in dir for Containerd.ImportImage. It returns the
// archive's path.
func BuildProgramImage(ctx context.Context, src Source, pkg, ref, dir string, log io.Writer) (string, error) {
	name := filepath.Base(pkg)
	bin, err := buildProgram(ctx, src.E2E, pkg, filepath.Join(dir, name+"-bin"), []string{"CGO_ENABLED=0"}, log)
	if err != nil {
		return "", fmt.Errorf("build image %s: %w", ref, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("build image %s: %w", ref, err)
	}
	l := newLayer()
	l.file(name, data, 0o755)
	path := filepath.Join(dir, name+".tar")
	if err := writeImage(path, ref, l, v1.Config{Entrypoint: []string{"/" + name}}); err != nil {
		return "", err
	}
	return path, nil
}

// pauseLayer builds e2e/images/pause statically (in dir) and packs it as
// /pause.
func pauseLayer(ctx context.Context, src Source, dir string, log io.Writer) (*layerBuilder, error) {
	bin, err := buildProgram(ctx, src.E2E, "./images/pause", filepath.Join(dir, "pause-bin"), []string{"CGO_ENABLED=0"}, log)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	l := newLayer()
	l.file("pause", data, 0o755)
	return l, nil
}

// busyboxLayer packs the static busybox with its applet links and an
// /etc/passwd and /etc/group of root and nobody, followed by the lines
// extraPasswd and extraGroup (each line ending in a newline). A non-nil ash
// is the program of bin/sh and bin/ash instead of busybox's applet.
func busyboxLayer(ctx context.Context, extraPasswd, extraGroup string, ash []byte) (*layerBuilder, error) {
	data, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("%w (install Debian's busybox-static)", err)
	}
	if err := checkStatic(busyboxPath); err != nil {
		return nil, err
	}
	out, err := runCommand(ctx, "/", nil, nil, busyboxPath, "--list-full")
	if err != nil {
		return nil, err
	}
	l := newLayer()
	l.file("bin/busybox", data, 0o755)
	for _, applet := range strings.Fields(string(out)) {
		switch {
		case applet == "bin/busybox":
		case ash != nil && (applet == "bin/sh" || applet == "bin/ash"):
			l.file(applet, ash, 0o755)
		default:
			l.symlink(applet, "/bin/busybox")
		}
	}
	l.file("etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"+extraPasswd), 0o644)
	l.file("etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"+extraGroup), 0o644)
	l.dir("tmp", 0o1777)
	l.dir("root", 0o700)
	return l, nil
}

// checkStatic fails unless path is an ELF executable without an interpreter:
// the image holds nothing but the binary, so it must not need a loader.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (install Debian's busybox-static for busybox; build Go programs with CGO_ENABLED=0)", path)
		}
	}
	return nil
}

// layerBuilder assembles an uncompressed layer tar with parent directories
// created implicitly, in the order entries are added.
type layerBuilder struct {
	buf  bytes.Buffer
	tw   *tar.Writer
	dirs map[string]bool
	err  error
}

// epoch is the modification time of every layer entry, for reproducibility.
var epoch = time.Unix(0, 0)

func newLayer() *layerBuilder {
	l := &layerBuilder{dirs: map[string]bool{}}
	l.tw = tar.NewWriter(&l.buf)
	return l
}

func (l *layerBuilder) write(h *tar.Header, data []byte) {
	if l.err != nil {
		return
	}
	if parent := filepath.Dir(strings.TrimSuffix(h.Name, "/")); parent != "." {
		l.dir(parent, 0o755)
	}
	h.ModTime, h.Format = epoch, tar.FormatPAX
	if l.err = l.tw.WriteHeader(h); l.err == nil && len(data) > 0 {
		_, l.err = l.tw.Write(data)
	}
}

func (l *layerBuilder) dir(name string, mode int64) {
	if l.dirs[name] {
		return
	}
	l.dirs[name] = true
	l.write(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}, nil)
}

func (l *layerBuilder) file(name string, data []byte, mode int64) {
	l.write(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data)
}

func (l *layerBuilder) symlink(name, target string) {
	l.write(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
}

func (l *layerBuilder) bytes() ([]byte, error) {
	if l.err == nil {
		l.err = l.tw.Close()
	}
	return l.buf.Bytes(), l.err
}

// writeImage writes a one-layer image for the host's platform, tagged ref,
// as a docker archive at path.
func writeImage(path, ref string, layer *layerBuilder, config v1.Config) error {
	data, err := layer.bytes()
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = config
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	return nil
}

// imagePath is the PATH of the images the harness builds around one program.
const imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ControlPlaneImage writes a one-layer image tagged ref holding the
// statically linked program bin (BuildControlPlane's) at
// /usr/local/bin/<base name>, on the image's PATH, as a docker archive in
// dir for Containerd.ImportImage, and returns the archive's path. kubeadm's
// static pod manifests run the control plane by its bare name
// (`command: [kube-apiserver, …]`), so the image has no entrypoint. It
// fails for a dynamically linked bin: the image has no loader.
func ControlPlaneImage(bin, ref, dir string) (string, error) {
	if err := checkStatic(bin); err != nil {
		return "", fmt.Errorf("build image %s: %w", ref, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("build image %s: %w", ref, err)
	}
	name := filepath.Base(bin)
	l := newLayer()
	l.file("usr/local/bin/"+name, data, 0o755)
	l.dir("tmp", 0o1777)
	path := filepath.Join(dir, name+".tar")
	if err := writeImage(path, ref, l, v1.Config{Env: []string{"PATH=" + imagePath}}); err != nil {
		return "", err
	}
	return path, nil
}
