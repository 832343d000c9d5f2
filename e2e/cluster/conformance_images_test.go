package cluster

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/nodekit/nodekit/internal/testenv"
)

// TestBuildTestImage builds the agnhost and nonroot stand-ins from a fake
// agnhost program and checks what the framework relies on: the entrypoint
// and command, the user, the program and the curl and bash stand-ins in the
// layer.
func TestBuildTestImage(t *testing.T) {
	if err := checkStatic(busyboxPath); err != nil {
		testenv.Unavailable(t, "a static busybox: %v", err)
	}
	dir := t.TempDir()
	fakeAgnhost := filepath.Join(dir, "agnhost-program")
	if err := os.WriteFile(fakeAgnhost, []byte("agnhost"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The source holds the image's TLS key pair.
	porter := filepath.Join(dir, "src", "test", "images", "agnhost", "porter")
	if err := os.MkdirAll(porter, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		if err := os.WriteFile(filepath.Join(porter, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fakeAsh := filepath.Join(dir, "ash-program")
	if err := os.WriteFile(fakeAsh, []byte("ash"), 0o755); err != nil {
		t.Fatal(err)
	}
	bins := ConformanceBinaries{Agnhost: fakeAgnhost, Ash: fakeAsh, Source: filepath.Join(dir, "src")}

	ref := "nodekit.local/e2e/agnhost:2.66.1"
	archive, err := BuildTestImage(t.Context(), Source{}, bins, ref, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, files := readTestImage(t, archive, ref)
	if got := cfg.Entrypoint; len(got) != 1 || got[0] != "/agnhost" {
		t.Errorf("agnhost entrypoint = %q, want [/agnhost]", got)
	}
	if got := cfg.Cmd; len(got) != 1 || got[0] != "pause" {
		t.Errorf("agnhost command = %q, want [pause]", got)
	}
	for _, f := range []string{"agnhost", "agnhost-2", "usr/bin/curl", "bin/bash", "bin/sh", "etc/passwd", "uploads", "localhost.crt", "localhost.key", "etc/os-release"} {
		if files[f] == nil {
			t.Errorf("agnhost image lacks %s", f)
		}
	}
	if h := files["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink {
		t.Errorf("agnhost image: bin/sh = %+v, want busybox's applet link", h)
	}

	// The bash stand-in runs a probe test's kind of script with sh.
	bash := filepath.Join(dir, "bash")
	if err := os.WriteFile(bash, []byte(bashStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bash, "-c", `_term() { echo "$1"; }; trap '_term late' TERM; _term ok`).CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Errorf("bash stand-in: %q, %v; want ok", out, err)
	}

	ref = "nodekit.local/e2e/nonroot:1.5"
	if archive, err = BuildTestImage(t.Context(), Source{}, bins, ref, dir, nil); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := readTestImage(t, archive, ref); cfg.User != "1234" {
		t.Errorf("nonroot user = %q, want 1234", cfg.User)
	}

	ref = "nodekit.local/e2e/glibc-dns-testing:2.1.1"
	if archive, err = BuildTestImage(t.Context(), Source{}, bins, ref, dir, nil); err != nil {
		t.Fatal(err)
	}
	cfg, files = readTestImage(t, archive, ref)
	// The busybox images' sh and ash are upstream's ash; agnhost's are
	// Debian busybox's applet.
	for _, sh := range []string{"bin/sh", "bin/ash"} {
		if h := files[sh]; h == nil || h.Typeflag != tar.TypeReg || h.Size != int64(len("ash")) {
			t.Errorf("glibc-dns-testing (the busybox image): %s = %+v, want the ash program", sh, h)
		}
	}
	if files["bin/hostname"] == nil || files["bin/sysctl"] == nil || len(cfg.Cmd) != 1 || cfg.Cmd[0] != "sh" {
		t.Errorf("glibc-dns-testing (the busybox image): command %q, hostname and /bin/sysctl in the layer: %v, %v; want sh and both",
			cfg.Cmd, files["bin/hostname"] != nil, files["bin/sysctl"] != nil)
	}

	if _, err := BuildTestImage(t.Context(), Source{}, bins, "nodekit.local/e2e/perl:5.26", dir, nil); !errors.Is(err, ErrNoLocalTestImage) {
		t.Errorf("perl: err = %v, want ErrNoLocalTestImage", err)
	}
}

// readTestImage returns the configuration and the file names of the
// single-image docker archive at path.
func readTestImage(t *testing.T, path, ref string) (cfg struct {
	Entrypoint, Cmd, Env []string
	User                 string
}, files map[string]*tar.Header) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Entrypoint, cfg.Cmd, cfg.Env, cfg.User = cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Env, cf.Config.User
	rc := mutate.Extract(img)
	defer rc.Close()
	files = map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
	}
	return cfg, files
}
