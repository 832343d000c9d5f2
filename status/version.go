package status

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/machine"
)

// RuntimeVersionFunc returns the container runtime's name and version, as
// CRI Version reports them (RuntimeName, RuntimeVersion), e.g. "containerd",
// "1.6.20". It must honour ctx.
type RuntimeVersionFunc func(ctx context.Context) (name, version string, err error)

// versionInfoOptions configures versionInfo.
type versionInfoOptions struct {
	// Machine supplies the kernel version and OS image; required.
	Machine machine.Func
	// RuntimeVersion is required.
	RuntimeVersion RuntimeVersionFunc
	// KubeletVersion is reported as nodeInfo.kubeletVersion; default
	// nodekit.KubeletVersion().
	KubeletVersion string
}

// versionInfo returns a Setter for nodeInfo.kernelVersion, osImage,
// containerRuntimeVersion ("<name>://<version>"), kubeletVersion, and clears
// the deprecated kubeProxyVersion. When the runtime does not answer, the
// runtime version is reported as "<name>://Unknown" with the last name it
// gave (or the name already on the node, else "Unknown"), as the kubelet does.
func versionInfo(opts versionInfoOptions) (Setter, error) {
	if opts.Machine == nil || opts.RuntimeVersion == nil {
		return nil, errors.New("version info: Machine and RuntimeVersion are required")
	}
	if opts.KubeletVersion == "" {
		opts.KubeletVersion = nodekit.KubeletVersion()
	}
	lastName := ""
	return func(ctx context.Context, node *v1.Node) error {
		info := &node.Status.NodeInfo
		name, version, err := opts.RuntimeVersion(ctx)
		if err != nil || name == "" {
			if lastName != "" {
				name = lastName
			} else if prev, _, ok := strings.Cut(info.ContainerRuntimeVersion, "://"); ok && prev != "" {
				name = prev
			} else {
				name = "Unknown"
			}
			version = "Unknown"
		} else {
			lastName = name
		}
		info.ContainerRuntimeVersion = name + "://" + version
		info.KubeletVersion = opts.KubeletVersion
		info.KubeProxyVersion = ""
		m, machineErr := opts.Machine()
		if machineErr != nil {
			return fmt.Errorf("read version info of node %s: %w", node.Name, machineErr)
		}
		info.KernelVersion = m.KernelVersion
		info.OSImage = m.OSImage
		return nil
	}, nil
}
