package volume

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

// imagePlugin stands for a pod's image volumes, as the kubelet's
// kubernetes.io/image plugin: the runtime mounts the image itself (the CRI
// Mount's image, pulled by the runtime package before the pod's containers
// start), so SetUp makes nothing on the node and returns a read-only volume
// without a host path, and TearDown has nothing to remove.
type imagePlugin struct{}

func (imagePlugin) Name() string { return PluginImage }

func (imagePlugin) CanSupport(vol *v1.Volume) bool { return vol.Image != nil }

func (imagePlugin) SetUp(context.Context, *VolumeContext) (Mounted, error) {
	return Mounted{ReadOnly: true}, nil
}

func (imagePlugin) TearDown(context.Context, *VolumeContext) error { return nil }
