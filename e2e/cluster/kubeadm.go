package cluster

import (
	"context"
	"fmt"
	"path/filepath"
)

// BuildKubeadm returns kubeadm (k8s.io/kubernetes/cmd/kubeadm) at the
// version e2e/tools pins, built like the control plane and cached in
// <cache>/kubeadm-<version>/bin. kubeadm needs two modules the control
// plane does not (github.com/coredns/corefile-migration and
// k8s.io/system-validators), so, as BuildKubelet, it is built in a copy of
// the tools module with -mod=mod: adding them to e2e/tools would change the
// control plane's cache key and rebuild all of it. With the control plane
// built, a cold build compiles only kubeadm's own packages (about two
// minutes on two cores); a cached one returns at once.
func BuildKubeadm(ctx context.Context, opts BuildOptions) (string, error) {
	opts, goBin, err := opts.complete()
	if err != nil {
		return "", err
	}
	k8sVersion, _, err := pinnedVersions(opts.Source.Tools)
	if err != nil {
		return "", err
	}
	ldflags := versionLDFlags(k8sVersion)
	binDir := filepath.Join(opts.CacheDir, "kubeadm-"+k8sVersion, "bin")
	bin := filepath.Join(binDir, "kubeadm")
	err = buildInToolsCopy(ctx, opts, goBin, "kubeadm-"+k8sVersion, binDir, []string{bin}, []byte(ldflags), func(build func(env []string, args ...string) error, staging string) error {
		fmt.Fprintf(opts.Log, "building kubeadm %s into %s\n", k8sVersion, binDir)
		return build(nil, "build", "-ldflags", ldflags, "-o", filepath.Join(staging, "kubeadm"), kubernetesModule+"/cmd/kubeadm")
	})
	if err != nil {
		return "", fmt.Errorf("build kubeadm %s: %w", k8sVersion, err)
	}
	return bin, nil
}
