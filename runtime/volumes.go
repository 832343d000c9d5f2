package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// emptyDirPath is where an emptyDir volume lives, as with the kubelet.
func (m *PodManager) emptyDirPath(pod *v1.Pod, name string) string {
	return filepath.Join(m.podDir(pod.UID), "volumes", "kubernetes.io~empty-dir", name)
}

// volumePaths returns the host path of each of the pod's volumes that can
// be mounted: emptyDir volumes (a directory in the pod's directory; medium
// Memory is a plain directory too, not a tmpfs) and hostPath volumes
// (checked against their type, created for the *OrCreate types) set up
// here, and whatever VolumePaths provides for the others.
func (m *PodManager) volumePaths(ctx context.Context, pod *v1.Pod) (map[string]string, error) {
	paths := map[string]string{}
	if m.opts.VolumePaths != nil {
		provided, err := m.opts.VolumePaths(ctx, pod)
		if err != nil {
			return nil, fmt.Errorf("volumes of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		for k, v := range provided {
			paths[k] = v
		}
	}
	for _, vol := range pod.Spec.Volumes {
		switch {
		case vol.EmptyDir != nil:
			dir := m.emptyDirPath(pod, vol.Name)
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return nil, fmt.Errorf("emptyDir volume %s of pod %s/%s: %w", vol.Name, pod.Namespace, pod.Name, err)
			}
			// Any container user may write to it, whatever the umask.
			if err := os.Chmod(dir, 0o777); err != nil {
				return nil, fmt.Errorf("emptyDir volume %s of pod %s/%s: %w", vol.Name, pod.Namespace, pod.Name, err)
			}
			paths[vol.Name] = dir
		case vol.HostPath != nil:
			if err := checkHostPath(vol.HostPath); err != nil {
				return nil, fmt.Errorf("hostPath volume %s of pod %s/%s: %w", vol.Name, pod.Namespace, pod.Name, err)
			}
			paths[vol.Name] = vol.HostPath.Path
		}
	}
	return paths, nil
}

// checkHostPath checks a hostPath volume against its type, creating a
// directory or file for DirectoryOrCreate and FileOrCreate.
func checkHostPath(hp *v1.HostPathVolumeSource) error {
	typ := v1.HostPathUnset
	if hp.Type != nil {
		typ = *hp.Type
	}
	if typ == v1.HostPathUnset {
		return nil
	}
	fi, err := os.Stat(hp.Path)
	switch {
	case os.IsNotExist(err) && typ == v1.HostPathDirectoryOrCreate:
		if err := os.MkdirAll(hp.Path, 0o755); err != nil {
			return err
		}
		return nil
	case os.IsNotExist(err) && typ == v1.HostPathFileOrCreate:
		if err := os.MkdirAll(filepath.Dir(hp.Path), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(hp.Path, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	case err != nil:
		return fmt.Errorf("hostPath type check failed: %s is not a %s: %w", hp.Path, typ, err)
	}
	mode := fi.Mode()
	ok := true
	switch typ {
	case v1.HostPathDirectory, v1.HostPathDirectoryOrCreate:
		ok = mode.IsDir()
	case v1.HostPathFile, v1.HostPathFileOrCreate:
		ok = mode.IsRegular()
	case v1.HostPathSocket:
		ok = mode&os.ModeSocket != 0
	case v1.HostPathCharDev:
		ok = mode&os.ModeCharDevice != 0
	case v1.HostPathBlockDev:
		ok = mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0
	default:
		return fmt.Errorf("unknown hostPath type %q", typ)
	}
	if !ok {
		return fmt.Errorf("hostPath type check failed: %s is not a %s", hp.Path, typ)
	}
	return nil
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
		hostname, _, _ = strings.Cut(hostname, ".")
		names := hostname
		if pod.Spec.Subdomain != "" && m.opts.ClusterDomain != "" {
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
