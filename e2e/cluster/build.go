package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/mod/modfile"
)

// Binaries are the control-plane programs the harness runs, built from Go
// modules at the versions e2e/tools/go.mod pins.
type Binaries struct {
	// KubernetesVersion is the k8s.io/kubernetes version, e.g. "v1.37.2".
	KubernetesVersion string
	// EtcdVersion is the etcd version Kubernetes pins, e.g. "v3.7.0".
	EtcdVersion string

	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	Kubectl               string
}

// BuildOptions configure BuildControlPlane.
type BuildOptions struct {
	// Source is the checkout to build from; zero means LocateSource().
	Source Source
	// CacheDir keeps built binaries between runs, keyed by version;
	// empty means DefaultCacheDir().
	CacheDir string
	// Log receives progress and the go command's output; nil discards it.
	Log io.Writer
}

// complete fills opts' zero fields with their defaults and finds the go
// command to build with.
func (opts BuildOptions) complete() (BuildOptions, string, error) {
	if opts.Source == (Source{}) {
		src, err := LocateSource()
		if err != nil {
			return opts, "", err
		}
		opts.Source = src
	}
	if opts.CacheDir == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return opts, "", err
		}
		opts.CacheDir = dir
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	goBin, err := goCommand()
	return opts, goBin, err
}

const (
	kubernetesModule = "k8s.io/kubernetes"
	etcdAPIModule    = "go.etcd.io/etcd/api/v3"
	etcdServerModule = "go.etcd.io/etcd/server/v3"
)

// BuildControlPlane returns etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl, building them with the go command when the
// cache does not hold them for the pinned versions. They are built as
// upstream releases them, with CGO_ENABLED=0: statically linked, so that an
// image holding nothing but the binary runs them (ControlPlaneImage), as
// kubeadm runs them in static pods, and one build serves both the harness's
// control plane and kubeadm's. A cold build takes about ten minutes on two
// cores; a cached one returns at once. Concurrent callers (several test
// processes) serialize on a lock file in the cache directory.
func BuildControlPlane(ctx context.Context, opts BuildOptions) (Binaries, error) {
	opts, goBin, err := opts.complete()
	if err != nil {
		return Binaries{}, err
	}
	k8sVersion, etcdVersion, err := pinnedVersions(opts.Source.Tools)
	if err != nil {
		return Binaries{}, err
	}
	env := []string{"CGO_ENABLED=0"}
	goVersion, err := runCommand(ctx, opts.Source.Tools, env, nil, goBin, "env", "GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED")
	if err != nil {
		return Binaries{}, fmt.Errorf("build control plane: %w", err)
	}
	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("build control plane: %w", err)
	}
	env = append([]string{"GOWORK=off"}, env...)

	bins := Binaries{KubernetesVersion: k8sVersion, EtcdVersion: etcdVersion}
	k8sName := "k8s-" + k8sVersion
	k8sDir := filepath.Join(opts.CacheDir, k8sName, "bin")
	bins.KubeAPIServer = filepath.Join(k8sDir, "kube-apiserver")
	bins.KubeControllerManager = filepath.Join(k8sDir, "kube-controller-manager")
	bins.KubeScheduler = filepath.Join(k8sDir, "kube-scheduler")
	bins.Kubectl = filepath.Join(k8sDir, "kubectl")
	commands := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}
	outputs := []string{bins.KubeAPIServer, bins.KubeControllerManager, bins.KubeScheduler, bins.Kubectl}
	ldflags := versionLDFlags(k8sVersion)
	goMod, err := os.ReadFile(filepath.Join(opts.Source.Tools, "go.mod"))
	if err != nil {
		return Binaries{}, fmt.Errorf("build control plane: %w", err)
	}
	goSum, err := os.ReadFile(filepath.Join(opts.Source.Tools, "go.sum"))
	if err != nil {
		return Binaries{}, fmt.Errorf("build control plane: %w", err)
	}
	k8sKey := cacheKey(goMod, goSum, goVersion, []byte(ldflags))
	err = cached(opts.CacheDir, k8sName, k8sDir, k8sKey, outputs, func(staging string) error {
		fmt.Fprintf(opts.Log, "building %s %s, statically linked, into %s (cold: ~10 min on 2 cores)\n", strings.Join(commands, ", "), k8sVersion, k8sDir)
		args := []string{"build", "-ldflags", ldflags, "-o", staging + string(filepath.Separator)}
		for _, cmd := range commands {
			args = append(args, kubernetesModule+"/cmd/"+cmd)
		}
		_, err := runCommand(ctx, opts.Source.Tools, env, opts.Log, goBin, args...)
		return err
	})
	if err != nil {
		return Binaries{}, fmt.Errorf("build kubernetes %s: %w", k8sVersion, err)
	}

	etcdModDir := filepath.Join(opts.Source.Tools, "etcd")
	etcdMod, err := os.ReadFile(filepath.Join(etcdModDir, "go.mod"))
	if err != nil {
		return Binaries{}, fmt.Errorf("build etcd: %w", err)
	}
	etcdSum, err := os.ReadFile(filepath.Join(etcdModDir, "go.sum"))
	if err != nil {
		return Binaries{}, fmt.Errorf("build etcd: %w", err)
	}
	etcdName := "etcd-" + etcdVersion
	etcdDir := filepath.Join(opts.CacheDir, etcdName, "bin")
	bins.Etcd = filepath.Join(etcdDir, "etcd")
	etcdKey := cacheKey(etcdMod, etcdSum, goVersion)
	err = cached(opts.CacheDir, etcdName, etcdDir, etcdKey, []string{bins.Etcd}, func(staging string) error {
		fmt.Fprintf(opts.Log, "building etcd %s, statically linked, into %s\n", etcdVersion, etcdDir)
		_, err := runCommand(ctx, etcdModDir, env, opts.Log, goBin, "build", "-o", filepath.Join(staging, "etcd"), etcdServerModule)
		return err
	})
	if err != nil {
		return Binaries{}, fmt.Errorf("build etcd %s: %w", etcdVersion, err)
	}
	return bins, nil
}

// pinnedVersions reads the Kubernetes version from the tools module and the
// etcd server version from tools/etcd, which must match the version of the
// etcd API Kubernetes requires.
func pinnedVersions(toolsDir string) (k8s, etcd string, err error) {
	k8s, etcdAPI, err := requiredVersions(filepath.Join(toolsDir, "go.mod"), kubernetesModule, etcdAPIModule)
	if err != nil {
		return "", "", err
	}
	etcd, _, err = requiredVersions(filepath.Join(toolsDir, "etcd", "go.mod"), etcdServerModule, etcdServerModule)
	if err != nil {
		return "", "", err
	}
	if etcd != etcdAPI {
		return "", "", fmt.Errorf("pinned versions: e2e/tools/etcd builds etcd %s but Kubernetes %s requires %s %s; update e2e/tools/etcd/go.mod", etcd, k8s, etcdAPIModule, etcdAPI)
	}
	return k8s, etcd, nil
}

// requiredVersions returns the versions a go.mod requires of modules a and b.
func requiredVersions(path, a, b string) (string, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("read pinned versions: %w", err)
	}
	f, err := modfile.ParseLax(path, data, nil)
	if err != nil {
		return "", "", fmt.Errorf("read pinned versions: %w", err)
	}
	var va, vb string
	for _, r := range f.Require {
		if r.Mod.Path == a {
			va = r.Mod.Version
		}
		if r.Mod.Path == b {
			vb = r.Mod.Version
		}
	}
	if va == "" || vb == "" {
		return "", "", fmt.Errorf("read pinned versions: %s must require %s and %s", path, a, b)
	}
	return va, vb, nil
}

// versionLDFlags stamps the version into component-base and client-go, as
// the upstream build does; without it every binary reports v0.0.0-master.
func versionLDFlags(version string) string {
	major, minor := "", ""
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+version,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean")
	}
	return strings.Join(flags, " ")
}

func cacheKey(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// cached makes sure binDir holds outputs built for key. Under an exclusive
// lock on CacheDir/<name>.lock it checks the stamp file; when stale, build
// writes the outputs (by base name) into a staging directory, which are then
// renamed into binDir one by one and the stamp written last, so an
// interrupted build never leaves a valid-looking cache.
func cached(cacheDir, name, binDir, key string, outputs []string, build func(staging string) error) error {
	lock, err := os.OpenFile(filepath.Join(cacheDir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	stamp := filepath.Join(binDir, ".stamp")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == key && allExist(outputs) {
		return nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(stamp)
	staging, err := os.MkdirTemp(filepath.Dir(binDir), "staging-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(staging)
	if err := build(staging); err != nil {
		return err
	}
	for _, out := range outputs {
		if err := os.Rename(filepath.Join(staging, filepath.Base(out)), out); err != nil {
			return fmt.Errorf("install %s: %w", out, err)
		}
	}
	return os.WriteFile(stamp, []byte(key), 0o644)
}

func allExist(paths []string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// goCommand finds the go command: on PATH, else next to the toolchain this
// program was built with.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the go command is neither on PATH nor in %s", filepath.Dir(p))
}

// BuildAgent compiles the node agent under test,
// github.com/nodekit/nodekit/examples/nodeagent, into outDir and returns the
// binary's path. The go build cache makes repeated builds quick. It is
// linked statically (CGO_ENABLED=0), as README tells users to build it and
// as BuildKubelet builds the kubelet beside it: the agent uses cgo only
// through net's and os/user's resolvers, and a dynamic build maps libc,
// libm, the dynamic loader and NSS modules (~2.3 MiB of RSS,
// docs/performance.md) for them.
func BuildAgent(ctx context.Context, src Source, outDir string, log io.Writer) (string, error) {
	return buildProgram(ctx, src.Root, "./examples/nodeagent", filepath.Join(outDir, "nodeagent"), []string{"CGO_ENABLED=0"}, log)
}

// BuildExample builds the program examples/<name> of the nodekit module
// into outDir and returns its path.
func BuildExample(ctx context.Context, src Source, name, outDir string, log io.Writer) (string, error) {
	return buildProgram(ctx, src.Root, "./examples/"+name, filepath.Join(outDir, name), nil, log)
}

// buildProgram runs go build for one main package of the module in dir.
func buildProgram(ctx context.Context, dir, pkg, out string, env []string, log io.Writer) (string, error) {
	goBin, err := goCommand()
	if err != nil {
		return "", err
	}
	// A relative package must exist; an import path (a package of a module
	// the e2e module requires, such as the repository's own) is go's to
	// resolve.
	if strings.HasPrefix(pkg, ".") {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(pkg))); err != nil {
			return "", fmt.Errorf("build %s: %w", pkg, err)
		}
	}
	if _, err := runCommand(ctx, dir, append([]string{"GOWORK=off"}, env...), log, goBin, "build", "-o", out, pkg); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	return out, nil
}
