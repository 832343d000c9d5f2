package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ErrNoLocalTestImage is returned by BuildTestImage for an image of
// upstream's e2e framework that the harness cannot build on this machine
// (a tool image such as perl or glibc-dns-testing, a registry or CSI image).
var ErrNoLocalTestImage = errors.New("no local build of this image")

// TestImageNames are the image names (the last element of the repository,
// as in test/utils/image/manifest.go) BuildTestImage builds.
var TestImageNames = []string{"agnhost", "busybox", "pause", "nginx", "kitten", "nautilus", "nonroot", "nonewprivs", "glibc-dns-testing"}

// curlStandIn is /usr/bin/curl of the agnhost images: the upstream image
// has curl, which lifecycle hook tests run (curl http://host:port/path);
// this fetches the URL with busybox wget.
const curlStandIn = `#!/bin/sh
# curl stand-in: fetches the URL argument with busybox wget, which covers
# curl http://host:port/path; nothing else of curl is supported.
for a; do
	case $a in
	http://* | https://*) exec wget -q -O - "$a" ;;
	esac
done
echo "curl (stand-in): only curl [options] URL is supported" >&2
exit 2
`

// bashStandIn is /bin/bash of the agnhost images: the upstream image has
// bash, which probe tests run their scripts with (a SIGTERM trap, a loop);
// busybox sh runs them.
const bashStandIn = `#!/bin/sh
# bash stand-in: busybox sh runs the script; bash's own extensions are not
# supported.
exec /bin/sh "$@"
`

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// agnhostOSRelease is /etc/os-release of the agnhost images: upstream's
// agnhost is built on Alpine Linux 3.21 (test/images/agnhost/BASEIMAGE),
// and the images built on it say so; the ImageVolume test reads it
// through a kitten image volume.
const agnhostOSRelease = `# nodekit e2e stand-in for upstream's agnhost image, whose base is Alpine Linux 3.21;
# the programs are Debian's static busybox and agnhost.
NAME="Alpine Linux"
ID=alpine
VERSION_ID=3.21
PRETTY_NAME="Alpine Linux v3.21"
`

// BuildTestImage writes ref, an image of upstream's e2e framework named by
// the last element of its repository (agnhost, busybox, ...), as a docker
// archive in dir for Containerd.ImportImage, and returns its path. The
// images are rebuilt from what this machine has instead of pulled:
//
//   - agnhost: the agnhost program (bins.Agnhost) as /agnhost (and
//     /agnhost-2) over the busybox layer, entrypoint /agnhost, command
//     pause, with the user-defined-in-image user (1000) and
//     group-defined-in-image group (50000) the upstream image adds, a
//     curl that fetches its URL argument with busybox wget, a bash that is
//     busybox sh, the image's TLS key pair (/localhost.crt,
//     /localhost.key) from the Kubernetes source, and the /etc/os-release
//     of its Alpine base;
//   - busybox: BusyboxImage's layer with upstream's ash (bins.Ash) as
//     /bin/sh and /bin/ash, as the upstream image has (Debian's drops
//     environment variables whose names are not shell identifiers), and
//     /bin/sysctl, command sh;
//   - glibc-dns-testing: the same: the tests run hostname and hostname -f,
//     which the static (glibc) busybox resolves from /etc/hosts;
//   - pause: PauseImage's program;
//   - nginx: agnhost serving HTTP on port 80 (netexec), standing in for
//     nginx, which no test here exercises beyond serving;
//   - kitten, nautilus: agnhost running test-webserver, with the upstream
//     image's files when the Kubernetes source holds them;
//   - nonroot: the busybox image's layer with user 1234;
//   - nonewprivs: nnp (bins.Nonewprivs), setuid root, as the command,
//     over the busybox image's layer.
//
// Any other name returns ErrNoLocalTestImage.
func BuildTestImage(ctx context.Context, src Source, bins ConformanceBinaries, ref, dir string, log io.Writer) (string, error) {
	repo := ref
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	name := path.Base(repo)
	fail := func(err error) (string, error) { return "", fmt.Errorf("build image %s: %w", ref, err) }
	var (
		layer  *layerBuilder
		config = v1.Config{Env: []string{defaultPath}}
		err    error
	)
	readBin := func(p string) ([]byte, error) {
		if p == "" {
			return nil, errors.New("its program was not built (BuildConformance)")
		}
		return os.ReadFile(p)
	}
	agnhostLayer := func() (*layerBuilder, error) {
		agnhost, err := readBin(bins.Agnhost)
		if err != nil {
			return nil, err
		}
		l, err := busyboxLayer(ctx,
			"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n",
			"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n", nil)
		if err != nil {
			return nil, err
		}
		l.file("agnhost", agnhost, 0o755)
		l.file("usr/bin/curl", []byte(curlStandIn), 0o755)
		l.file("bin/bash", []byte(bashStandIn), 0o755)
		l.file("etc/os-release", []byte(agnhostOSRelease), 0o644)
		l.symlink("agnhost-2", "agnhost")
		l.dir("uploads", 0o755)
		l.dir("home/user-defined-in-image", 0o755)
		// netexec serves HTTPS with the image's /localhost.crt and
		// /localhost.key (the https lifecycle hook tests).
		if bins.Source != "" {
			for _, f := range []string{"localhost.crt", "localhost.key"} {
				data, err := os.ReadFile(filepath.Join(bins.Source, "test", "images", "agnhost", "porter", f))
				if err != nil {
					return nil, err
				}
				l.file(f, data, 0o644)
			}
		}
		return l, nil
	}
	// The busybox images' sh is upstream's ash (busybox_ash.go).
	busyboxImageLayer := func() (*layerBuilder, error) {
		ash, err := readBin(bins.Ash)
		if err != nil {
			return nil, err
		}
		return busyboxLayer(ctx, "", "", ash)
	}
	switch name {
	case "agnhost":
		if layer, err = agnhostLayer(); err != nil {
			return fail(err)
		}
		config.Entrypoint, config.Cmd = []string{"/agnhost"}, []string{"pause"}
	case "nginx":
		if layer, err = agnhostLayer(); err != nil {
			return fail(err)
		}
		config.Entrypoint = []string{"/agnhost", "netexec", "--http-port=80"}
	case "kitten", "nautilus":
		if layer, err = agnhostLayer(); err != nil {
			return fail(err)
		}
		if bins.Source != "" {
			html := filepath.Join(bins.Source, "test", "images", name, "html")
			entries, err := os.ReadDir(html)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return fail(err)
			}
			for _, e := range entries {
				data, err := os.ReadFile(filepath.Join(html, e.Name()))
				if err != nil {
					return fail(err)
				}
				layer.file(e.Name(), data, 0o644)
			}
		}
		config.Entrypoint, config.Cmd = []string{"/agnhost"}, []string{"test-webserver"}
	case "busybox", "glibc-dns-testing":
		if layer, err = busyboxImageLayer(); err != nil {
			return fail(err)
		}
		// The upstream busybox image has every applet in /bin; the sysctl
		// tests run /bin/sysctl, which Debian's busybox puts in /sbin.
		layer.symlink("bin/sysctl", "/bin/busybox")
		config.Cmd = []string{"sh"}
	case "nonroot":
		if layer, err = busyboxImageLayer(); err != nil {
			return fail(err)
		}
		config.Cmd, config.User = []string{"sh"}, "1234"
	case "nonewprivs":
		nnp, err := readBin(bins.Nonewprivs)
		if err != nil {
			return fail(err)
		}
		if layer, err = busyboxImageLayer(); err != nil {
			return fail(err)
		}
		layer.file("usr/local/bin/nnp", nnp, 0o4755)
		config.Cmd = []string{"nnp"}
	case "pause":
		if layer, err = pauseLayer(ctx, src, dir, log); err != nil {
			return fail(err)
		}
		config = v1.Config{Entrypoint: []string{"/pause"}}
	default:
		return fail(ErrNoLocalTestImage)
	}
	archive := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	if err := writeImage(archive, ref, layer, config); err != nil {
		return "", err
	}
	return archive, nil
}
