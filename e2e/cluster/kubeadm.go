package cluster

import "context"

// BuildKubeadm returns kubeadm (k8s.io/kubernetes/cmd/kubeadm) at the
// version e2e/tools pins, built like the control plane (statically
// linked, as upstream releases it, so the two share their common packages) and cached in
// <cache>/kubeadm-<version>/bin. kubeadm needs two modules the control
// plane does not (github.com/coredns/corefile-migration and
// k8s.io/system-validators), so, as BuildKubelet, it is built in a copy of
// the tools module with -mod=mod: adding them to e2e/tools would change the
// control plane's cache key and rebuild all of it. With the control plane
// built, a cold build compiles only kubeadm's own packages (about two
// minutes on two cores); a cached one returns at once.
func BuildKubeadm(ctx context.Context, opts BuildOptions) (string, error) {
	return buildKubernetesCommand(ctx, opts, "kubeadm", []string{"CGO_ENABLED=0"})
}

// SharedDiskKubeletConfig returns the KubeletConfiguration fields every
// node the harness starts has (NewAgent), for a node whose configuration
// kubeadm writes: disk eviction thresholds at 1 % and no image garbage
// collection by disk usage. Every node's disks are the test host's one
// disk, which the kubelet's measure can put below kubeadm's default
// thresholds (10 % and 15 % available) on a shared machine: the node
// would report DiskPressure, be tainted, and reclaim space by removing the
// images the harness side-loaded, which no registry serves.
func SharedDiskKubeletConfig() map[string]any {
	return map[string]any{"evictionHard": sharedDiskEvictionHard(), "imageGCHighThresholdPercent": 100}
}
