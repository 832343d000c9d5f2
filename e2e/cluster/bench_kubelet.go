package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// BuildKubelet returns the upstream kubelet (k8s.io/kubernetes/cmd/kubelet)
// at the version e2e/tools pins, the anchor nodekit's benchmarks compare
// with. It is built like the control plane and cached next to it, keyed by
// the same inputs. The tools module does not list the kubelet's few extra
// dependencies, so the build runs in a copy of it with -mod=mod, which
// resolves them through the module proxy at the versions Kubernetes
// requires; e2e/tools itself is left untouched. A cold build takes a few
// minutes on two cores (less once the control plane is built: most packages
// are shared); a cached one returns at once.
func BuildKubelet(ctx context.Context, opts BuildOptions) (string, error) {
	// Linked statically, as Kubernetes' build does with
	// KUBE_STATIC_OVERRIDES=kubelet (its default links the kubelet with
	// cgo): so the kubelet shares every package it has in common with the
	// control plane's build (BuildControlPlane) instead of compiling them
	// again, and nothing it does on these nodes uses cgo.
	return buildKubernetesCommand(ctx, opts, "kubelet", []string{"CGO_ENABLED=0"})
}

// buildKubernetesCommand builds k8s.io/kubernetes/cmd/<name> at the version
// e2e/tools pins in a copy of the tools module with -mod=mod and the go
// command's environment env (CGO_ENABLED above all: it decides which
// compiled packages the build shares), cached in
// <cache>/<name>-<version>/bin, and returns the binary's path.
func buildKubernetesCommand(ctx context.Context, opts BuildOptions, name string, env []string) (string, error) {
	opts, goBin, err := opts.complete()
	if err != nil {
		return "", err
	}
	k8sVersion, _, err := pinnedVersions(opts.Source.Tools)
	if err != nil {
		return "", err
	}
	ldflags := versionLDFlags(k8sVersion)
	binDir := filepath.Join(opts.CacheDir, name+"-"+k8sVersion, "bin")
	bin := filepath.Join(binDir, name)
	err = buildInToolsCopy(ctx, opts, goBin, name+"-"+k8sVersion, binDir, []string{bin}, env, []byte(ldflags), func(build func(args ...string) error, staging string) error {
		fmt.Fprintf(opts.Log, "building %s %s into %s\n", name, k8sVersion, binDir)
		return build("build", "-ldflags", ldflags, "-o", filepath.Join(staging, name), kubernetesModule+"/cmd/"+name)
	})
	if err != nil {
		return "", fmt.Errorf("build %s %s: %w", name, k8sVersion, err)
	}
	return bin, nil
}

// buildInToolsCopy builds outputs (by base name into the staging directory
// steps receives) with the go command run in a copy of the e2e/tools
// module with -mod=mod, so that programs of the pinned k8s.io/kubernetes
// the tools module does not list resolve their extra dependencies through
// the module proxy at the versions Kubernetes requires, leaving e2e/tools
// untouched. Every go command runs with env added to the process's
// environment, so what the caller's environment holds (CGO_ENABLED) does not
// change the binaries or their cache key. The outputs are cached under
// name in the cache directory, keyed by the tools module, the go toolchain
// and extra.
func buildInToolsCopy(ctx context.Context, opts BuildOptions, goBin, name, binDir string, outputs []string, env []string, extra []byte,
	steps func(build func(args ...string) error, staging string) error) error {
	goVersion, err := runCommand(ctx, opts.Source.Tools, env, nil, goBin, "env", "GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED")
	if err != nil {
		return err
	}
	goMod, err := os.ReadFile(filepath.Join(opts.Source.Tools, "go.mod"))
	if err != nil {
		return err
	}
	goSum, err := os.ReadFile(filepath.Join(opts.Source.Tools, "go.sum"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return err
	}
	key := cacheKey(goMod, goSum, goVersion, extra)
	return cached(opts.CacheDir, name, binDir, key, outputs, func(staging string) error {
		mod := filepath.Join(staging, "module")
		if err := os.MkdirAll(mod, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(mod, "go.mod"), goMod, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(mod, "go.sum"), goSum, 0o644); err != nil {
			return err
		}
		return steps(func(args ...string) error {
			_, err := runCommand(ctx, mod, append([]string{"GOWORK=off", "GOFLAGS=-mod=mod"}, env...), opts.Log, goBin, args...)
			return err
		}, staging)
	})
}

// KubeletOptions describe an upstream kubelet process (BuildKubelet) run
// the way NewAgent runs a nodekit agent, for benchmarks that measure the
// kubelet as an anchor.
type KubeletOptions struct {
	// Binary is the kubelet program (BuildKubelet). Required.
	Binary string
	// NodeName is --hostname-override. Required.
	NodeName string
	// NodeIP is --node-ip; empty means ControlPlane.AllocateNodeIP().
	NodeIP string
	// RuntimeEndpoint is containerRuntimeEndpoint (unix://…). Required.
	RuntimeEndpoint string
	// CgroupRoot is cgroupRoot, the parent of the kubelet's kubepods
	// cgroup; it must exist (CreateCgroup). Required: two node agents
	// sharing a kubepods cgroup remove each other's pod cgroups.
	CgroupRoot string
	// StaticPodPath is staticPodPath, the static pod manifest directory;
	// empty runs no static pods.
	StaticPodPath string
	// Verbosity is --v (default 2).
	Verbosity int
}

// NewKubelet prepares an upstream kubelet for nodeName, as NewAgent does a
// nodekit agent: the node's client certificate and kubeconfig, and a
// KubeletConfiguration with the cgroupfs driver, cgroupRoot, pod logs under
// Dir, healthz and the kubelet API on the node's IP (no read-only port),
// cgroup v1 allowed (failCgroupV1: false) and swap tolerated. Start waits
// for its /healthz. The kubelet serves /metrics only on its authenticated
// port, so Metrics does not work on the returned Agent.
//
// While it runs, the kubelet sets the kernel tunables it requires
// (vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10,
// kernel.panic_on_oops=1, kernel.keys.root_maxkeys and root_maxbytes); see
// SaveKernelTunables to restore them. It writes container log symlinks to
// /var/log/containers, which it removes with the containers, and leaves its
// root directory mounted (see UnmountUnder).
//
// The kubelet has paths of the host built in: its device plugin socket is
// always /var/lib/kubelet/device-plugins/kubelet.sock, whatever --root-dir
// says. So it runs in a mount namespace of its own in which
// /var/lib/kubelet is a directory under Dir (as a NodeRoot's), and its
// certificates are in Dir/pki (--cert-dir): nothing it writes reaches the
// host's /var/lib/kubelet. Its root directory is a shared bind mount made
// on the host before it starts, so the volumes it mounts there (secrets,
// projected tokens) reach containerd, which runs outside the namespace.
func (c *ControlPlane) NewKubelet(opts KubeletOptions) (*Agent, error) {
	if opts.Binary == "" || opts.NodeName == "" || opts.RuntimeEndpoint == "" || opts.CgroupRoot == "" {
		return nil, errors.New("new kubelet: Binary, NodeName, RuntimeEndpoint and CgroupRoot are required")
	}
	if opts.NodeIP == "" {
		opts.NodeIP = c.AllocateNodeIP()
	}
	if opts.Verbosity == 0 {
		opts.Verbosity = 2
	}
	a, healthzPort, apiPort, err := c.newNodeProcess("kubelet", opts.NodeName, opts.NodeIP, opts.Binary)
	if err != nil {
		return nil, err
	}
	a.LogPath = filepath.Join(a.Dir, "kubelet.log")
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"healthzBindAddress":       a.IP,
		"healthzPort":              healthzPort,
		"address":                  a.IP,
		"port":                     apiPort,
		"readOnlyPort":             0,
		"containerRuntimeEndpoint": opts.RuntimeEndpoint,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               opts.CgroupRoot,
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"evictionHard":             sharedDiskEvictionHard(),
		// No image garbage collection by disk usage, as for the agent
		// (NewAgent): on a host disk the kubelet measures 85 % full it
		// removed the side-loaded pause image mid-run, and every later
		// pod failed to get its sandbox.
		"imageGCHighThresholdPercent": 100,
		"podLogsDir":                  filepath.Join(a.Dir, "pod-logs"),
		"authentication": map[string]any{
			"x509": map[string]any{"clientCAFile": c.PKI.CA.Cert},
		},
	}
	if opts.StaticPodPath != "" {
		cfg["staticPodPath"] = opts.StaticPodPath
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("new kubelet %s: encode configuration: %w", a.Name, err)
	}
	a.ConfigPath = filepath.Join(a.Dir, "config.yaml")
	if err := os.WriteFile(a.ConfigPath, data, 0o644); err != nil {
		return nil, fmt.Errorf("new kubelet %s: %w", a.Name, err)
	}
	root := filepath.Join(a.Dir, "root")
	tools := map[string]string{}
	for _, name := range []string{"unshare", "mount", "findmnt"} {
		if tools[name], err = exec.LookPath(name); err != nil {
			return nil, fmt.Errorf("new kubelet %s: %w", a.Name, err)
		}
	}
	cover, err := coverScript(filepath.Join(a.Dir, "host"), tools["mount"], []string{"/var/lib/kubelet"})
	if err != nil {
		return nil, fmt.Errorf("new kubelet %s: %w", a.Name, err)
	}
	script := append(append([]string{"set -e"}, cover...), `exec "$@"`)
	// unshare and sh exec the kubelet: its PID is the process's.
	a.binary = tools["unshare"]
	a.args = []string{"--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", strings.Join(script, "\n"), "kubelet",
		opts.Binary,
		"--kubeconfig=" + a.Kubeconfig,
		"--config=" + a.ConfigPath,
		"--hostname-override=" + a.Name,
		"--node-ip=" + a.IP,
		"--root-dir=" + root,
		"--cert-dir=" + filepath.Join(a.Dir, "pki"),
		"--v=" + strconv.Itoa(opts.Verbosity),
	}
	a.prepare = func() error {
		if err := os.MkdirAll(root, 0o750); err != nil {
			return err
		}
		return sharedBindMount(root)
	}
	return a, nil
}

// kernelTunables are the sysctls the kubelet sets when it starts (unless
// protectKernelDefaults, with which it refuses to start when they differ).
var kernelTunables = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// KernelTunables are saved values of the sysctls the kubelet sets, by path
// under /proc/sys.
type KernelTunables map[string]string

// SaveKernelTunables reads the sysctls the kubelet changes when it starts,
// so that Restore can put them back after it stopped.
func SaveKernelTunables() (KernelTunables, error) {
	saved := KernelTunables{}
	for _, name := range kernelTunables {
		data, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil {
			return nil, fmt.Errorf("save kernel tunables: %w", err)
		}
		saved[name] = string(data)
	}
	return saved, nil
}

// Restore writes the saved values back, reporting every one it could not.
func (k KernelTunables) Restore() error {
	var errs []error
	for name, value := range k {
		if err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore kernel tunable %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// UnmountUnder detaches every mount at or below dir, deepest first. The
// kubelet makes its root directory an rshared bind mount of itself and
// leaves it when it stops; call this on the kubelet's Agent.Dir once it
// stopped, before removing the directory.
func UnmountUnder(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return fmt.Errorf("unmount under %s: %w", dir, err)
	}
	return nil
}
