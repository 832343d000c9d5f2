package cluster

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ContainerdBinaries are the programs of the containerd 2 runtime the
// harness runs, built from the Go modules e2e/tools/containerd, runc and
// crictl pin.
type ContainerdBinaries struct {
	// Version is containerd's, e.g. "v2.4.2"; the CRI reports it.
	Version string
	// Containerd, Shim and Ctr are the daemon, its runc shim
	// (containerd-shim-runc-v2) and the ctr client, all in one directory.
	Containerd, Shim, Ctr string
	// RuncVersion is runc's, e.g. "v1.5.3"; Runc is the binary, built
	// with seccomp support.
	RuncVersion string
	Runc        string
	// CrictlVersion is crictl's, e.g. "v1.37.0"; Crictl is the binary.
	CrictlVersion string
	Crictl        string
}

const (
	containerdModule = "github.com/containerd/containerd/v2"
	runcModule       = "github.com/opencontainers/runc"
	crictlModule     = "sigs.k8s.io/cri-tools"
)

// BuildContainerd2 returns containerd 2, runc and crictl, building them with
// the go command into the cache directory when the cache does not hold them
// for the pinned versions, as BuildControlPlane does for the control plane
// (about four minutes cold on two cores). runc needs cgo, a C compiler and
// libseccomp's headers (Debian's gcc, pkg-config and libseccomp-dev).
func BuildContainerd2(ctx context.Context, opts BuildOptions) (ContainerdBinaries, error) {
	opts, goBin, err := opts.complete()
	if err != nil {
		return ContainerdBinaries{}, err
	}
	var bins ContainerdBinaries
	var out []string
	bins.Version, out, err = buildPinned(ctx, opts, goBin, pinnedTool{
		dir: "containerd", module: containerdModule, name: "containerd",
		// As containerd's Makefile: static, without cgo (which leaves out
		// the btrfs snapshotter only), the version stamped in.
		env: []string{"CGO_ENABLED=0"},
		ldflags: func(version string) string {
			pkg := containerdModule + "/version"
			return "-X " + pkg + ".Version=" + version + " -X " + pkg + ".Package=" + containerdModule
		},
		pkgs: []string{containerdModule + "/cmd/containerd", containerdModule + "/cmd/" + shimBinaryName, containerdModule + "/cmd/ctr"},
	})
	if err != nil {
		return ContainerdBinaries{}, err
	}
	bins.Containerd, bins.Shim, bins.Ctr = out[0], out[1], out[2]
	bins.RuncVersion, out, err = buildPinned(ctx, opts, goBin, pinnedTool{
		dir: "runc", module: runcModule, name: "runc",
		// runc's Makefile's tags but libpathrs (a Rust library; runc falls
		// back to its Go implementation of the same checks).
		env:  []string{"CGO_ENABLED=1"},
		tags: "seccomp urfave_cli_no_docs",
		pkgs: []string{runcModule},
	})
	if err != nil {
		return ContainerdBinaries{}, fmt.Errorf("%w (runc needs cgo: gcc, pkg-config and libseccomp-dev; hack/install-deps.sh installs them)", err)
	}
	bins.Runc = out[0]
	if bins.CrictlVersion, bins.Crictl, err = buildCrictl(ctx, opts, goBin); err != nil {
		return ContainerdBinaries{}, err
	}
	return bins, nil
}

// buildCrictl builds (or finds in the cache) the crictl e2e/tools/crictl
// pins and returns its version and path.
func buildCrictl(ctx context.Context, opts BuildOptions, goBin string) (string, string, error) {
	version, out, err := buildPinned(ctx, opts, goBin, pinnedTool{
		dir: "crictl", module: crictlModule, name: "crictl",
		env: []string{"CGO_ENABLED=0"},
		ldflags: func(version string) string {
			return "-X " + crictlModule + "/pkg/version.Version=" + version
		},
		pkgs: []string{crictlModule + "/cmd/crictl"},
	})
	if err != nil {
		return "", "", err
	}
	return version, out[0], nil
}

// pinnedTool is a set of programs built from one module that a module of
// its own under e2e/tools pins (and lists as tools).
type pinnedTool struct {
	dir    string   // the pinning module's directory under e2e/tools
	module string   // the module whose required version names the build
	name   string   // the cache entry: <name>-<version>
	pkgs   []string // main packages; each builds to its last path element
	// env (go build's extra environment), tags (its -tags) and ldflags
	// (its -ldflags for the module's version, after "-s -w") are part of
	// the cache key when set.
	env     []string
	tags    string
	ldflags func(version string) string
}

// buildPinned builds t's packages into <cache>/<name>-<version>/bin unless
// the cache holds them for the same go.mod, go.sum, toolchain and flags,
// and returns the module's version and the binaries, in t.pkgs' order.
func buildPinned(ctx context.Context, opts BuildOptions, goBin string, t pinnedTool) (string, []string, error) {
	modDir := filepath.Join(opts.Source.Tools, t.dir)
	version, _, err := requiredVersions(filepath.Join(modDir, "go.mod"), t.module, t.module)
	if err != nil {
		return "", nil, fmt.Errorf("build %s: %w", t.name, err)
	}
	goMod, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	if err != nil {
		return "", nil, fmt.Errorf("build %s: %w", t.name, err)
	}
	goSum, err := os.ReadFile(filepath.Join(modDir, "go.sum"))
	if err != nil {
		return "", nil, fmt.Errorf("build %s: %w", t.name, err)
	}
	// Asked with the build's own environment, so that the caller's
	// CGO_ENABLED (hack/test.sh sets 0) does not change the key of a
	// build that pins it.
	goVersion, err := runCommand(ctx, modDir, t.env, nil, goBin, "env", "GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED")
	if err != nil {
		return "", nil, fmt.Errorf("build %s: %w", t.name, err)
	}
	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("build %s: %w", t.name, err)
	}
	ldflags := ""
	if t.ldflags != nil {
		ldflags = t.ldflags(version)
	}
	flags := []string{"-ldflags", strings.TrimSpace("-s -w " + ldflags)}
	if t.tags != "" {
		flags = append(flags, "-tags", t.tags)
	}
	keyParts := [][]byte{goMod, goSum, goVersion}
	if len(t.env) > 0 || t.tags != "" || ldflags != "" {
		keyParts = append(keyParts, []byte(strings.Join(append(append([]string{}, t.env...), flags...), "\x00")))
	}
	binDir := filepath.Join(opts.CacheDir, t.name+"-"+version, "bin")
	var outputs []string
	for _, pkg := range t.pkgs {
		outputs = append(outputs, filepath.Join(binDir, path.Base(pkg)))
	}
	err = cached(opts.CacheDir, t.name+"-"+version, binDir, cacheKey(keyParts...), outputs, func(staging string) error {
		fmt.Fprintf(opts.Log, "building %s %s into %s\n", t.name, version, binDir)
		args := append(append([]string{"build"}, flags...), "-o", staging+string(filepath.Separator))
		_, err := runCommand(ctx, modDir, append([]string{"GOWORK=off"}, t.env...), opts.Log, goBin, append(args, t.pkgs...)...)
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("build %s %s: %w", t.name, version, err)
	}
	return version, outputs, nil
}
