package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/volume"
)

// VolumeManager sets up and tears down the volumes of the node's pods for
// the Backend: *volume.Manager is one; the values it hands over are the
// volume package's (volume.Mounted, volume.SubPathSpec). Its methods
// are safe for concurrent use and may block for I/O and API calls, bounded
// by ctx.
type VolumeManager interface {
	// MountPod sets up every volume of pod a container mounts and returns
	// them by name. It is called before every SyncPod of a pod that should
	// run, so it must be cheap once the volumes are set up. On error the
	// pod's containers are not started; MountPod records the pod's
	// FailedMount events itself. An error with a method RetryAt()
	// time.Time (non-zero) says when the volumes are tried again: the pod
	// is synced again then, instead of after the loop's error back-off.
	MountPod(ctx context.Context, pod *v1.Pod) (map[string]volume.Mounted, error)
	// UnmountPod tears down the volumes of pod uid once none of its
	// containers runs. It is idempotent.
	UnmountPod(ctx context.Context, uid types.UID) error
	// SubPath resolves a subPath volume mount to the host path to mount
	// instead of the volume, safely (a bind mount of the subPath), and
	// returns errors in the kubelet's words.
	SubPath(ctx context.Context, spec volume.SubPathSpec) (string, error)
}

// PodVolumes are the mounted volumes of one pod, for SyncPod.
type PodVolumes struct {
	// Mounted are the pod's volumes by name (MountPod's answer). A
	// container mounting a volume that is not here does not start
	// (CreateContainerConfigError "cannot find volume ...").
	Mounted map[string]volume.Mounted
	// SubPath resolves volume mounts with a subPath or subPathExpr; nil
	// makes such mounts fail to start.
	SubPath func(ctx context.Context, spec volume.SubPathSpec) (string, error)
	// images are the pulled images of the pod's image volumes a
	// container mounts, by volume name: the runtime mounts them itself
	// (CRI Mount.image), set by SyncPod.
	images map[string]*runtimeapi.ImageSpec
}

// volumeMounts returns the CRI mounts of c's volumeMounts, as the
// kubelet's makeMounts: each must name a volume in vols; a subPath (or
// subPathExpr expanded with env) is resolved by vols.SubPath; a volume the
// manager mounts read-only is mounted read-only; recursiveReadOnly is
// checked as on a runtime without recursive read-only mounts; an image
// volume (in vols.images) is the runtime's mount of the image, read-only,
// its subPath the CRI's image_sub_path after the kubelet's checks. It also
// reports whether c mounts a volume on /etc/hosts.
func volumeMounts(ctx context.Context, pod *v1.Pod, c *v1.Container, vols PodVolumes, env []envVar) ([]*runtimeapi.Mount, bool, error) {
	var out []*runtimeapi.Mount
	etcHosts := false
	for i, vm := range c.VolumeMounts {
		etcHosts = etcHosts || vm.MountPath == etcHostsPath
		vol, ok := vols.Mounted[vm.Name]
		if !ok {
			klog.FromContext(ctx).Error(nil, "Couldn't find volume with name", "volumeName", vm.Name, "pod", klog.KObj(pod))
			return nil, false, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		if err := checkRecursiveReadOnly(vm); err != nil {
			return nil, false, err
		}
		host := vol.Path
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			var err error
			if sub, err = expandSubPathExpr(vm.SubPathExpr, env); err != nil {
				return nil, false, err
			}
		}
		image := vols.images[vm.Name]
		if image != nil && sub != "" {
			if err := checkImageSubPath(sub); err != nil {
				return nil, false, err
			}
		}
		if image == nil && sub != "" {
			if vols.SubPath == nil {
				return nil, false, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", vm.Name, c.Name)
			}
			var err error
			host, err = vols.SubPath(ctx, volume.SubPathSpec{PodUID: pod.UID, VolumeName: vm.Name, VolumePath: vol.Path,
				SubPath: sub, ContainerName: c.Name, MountIndex: i})
			if err != nil {
				return nil, false, err
			}
		}
		mnt := &runtimeapi.Mount{
			ContainerPath:  vm.MountPath,
			HostPath:       host,
			Image:          image,
			Readonly:       vm.ReadOnly || vol.ReadOnly,
			SelinuxRelabel: vol.SELinuxRelabel,
			Propagation:    runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
		}
		if vm.MountPropagation != nil {
			switch *vm.MountPropagation {
			case v1.MountPropagationHostToContainer:
				mnt.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			case v1.MountPropagationBidirectional:
				mnt.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
			}
		}
		if image != nil {
			mnt.HostPath, mnt.ImageSubPath = "", sub
		}
		out = append(out, mnt)
	}
	return out, etcHosts, nil
}

// checkImageSubPath checks an image volume's subPath as the kubelet's
// makeMounts checks every subPath: relative, without "..".
func checkImageSubPath(sub string) error {
	if filepath.IsAbs(sub) {
		return fmt.Errorf("error SubPath `%s` must not be an absolute path", sub)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(sub), "/"), "..") {
		return fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", sub)
	}
	return nil
}

// checkRecursiveReadOnly applies the kubelet's rules for a volumeMount's
// recursiveReadOnly as on a runtime without recursive read-only mounts
// (this agent does not ask for them): IfPossible mounts read-only but not
// recursively, Enabled fails the container.
func checkRecursiveReadOnly(vm v1.VolumeMount) error {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == v1.RecursiveReadOnlyDisabled {
		return nil
	}
	if !vm.ReadOnly {
		return fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	if vm.MountPropagation != nil && *vm.MountPropagation != v1.MountPropagationNone {
		return fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", vm.Name, *vm.MountPropagation)
	}
	switch *vm.RecursiveReadOnly {
	case v1.RecursiveReadOnlyIfPossible:
		return nil
	case v1.RecursiveReadOnlyEnabled:
		return fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
	}
	return fmt.Errorf("unknown recursive read-only mode %q", *vm.RecursiveReadOnly)
}

// etcHostsPath is where the pod's hosts file is mounted.
const etcHostsPath = "/etc/hosts"

// expandSubPathExpr expands a subPathExpr with the container's environment,
// failing when a referenced variable is unset or empty, as the kubelet's
// ExpandContainerVolumeMounts.
func expandSubPathExpr(expr string, env []envVar) (string, error) {
	values := make(map[string]string, len(env))
	for _, e := range env {
		values[e.name] = e.value
	}
	var missing []string
	out := expand(expr, func(name string) (string, bool) {
		v := values[name]
		if v == "" && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
		return v, true
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// writeEtcHosts writes the pod's hosts file and returns its path: the
// kubelet's managed file with the pod's IPs and hostname (for a hostNetwork
// pod, a copy of the node's), then the pod's host aliases.
func (m *PodManager) writeEtcHosts(pod *v1.Pod, podIPs []string) (string, error) {
	var b strings.Builder
	if pod.Spec.HostNetwork {
		data, _ := os.ReadFile(m.opts.HostsFile)
		b.Write(data)
		if len(data) > 0 && !strings.HasSuffix(string(data), "\n") {
			b.WriteByte('\n')
		}
	} else {
		b.WriteString("# Kubernetes-managed hosts file.\n" +
			"127.0.0.1\tlocalhost\n" +
			"::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"fe00::0\tip6-localnet\n" +
			"fe00::0\tip6-mcastprefix\n" +
			"fe00::1\tip6-allnodes\n" +
			"fe00::2\tip6-allrouters\n")
		hostname, err := m.podHostname(pod)
		if err != nil {
			return "", err
		}
		names := hostname
		if pod.Spec.HostnameOverride == nil {
			hostname, _, _ = strings.Cut(hostname, ".")
			names = hostname
		}
		if pod.Spec.HostnameOverride == nil && pod.Spec.Subdomain != "" && m.opts.ClusterDomain != "" {
			names = fmt.Sprintf("%s.%s.%s.svc.%s\t%s", hostname, pod.Spec.Subdomain, pod.Namespace, m.opts.ClusterDomain, hostname)
		}
		for _, ip := range podIPs {
			b.WriteString(ip + "\t" + names + "\n")
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			b.WriteString(a.IP + "\t" + strings.Join(a.Hostnames, "\t") + "\n")
		}
	}
	dir := m.podDir(pod.UID)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("write hosts file of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	path := filepath.Join(dir, "etc-hosts")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("write hosts file of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return path, nil
}
