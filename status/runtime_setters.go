package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxNamesPerImageInNodeStatus is how many names of one image the node
// status lists, as in the kubelet.
const maxNamesPerImageInNodeStatus = 5

// defaultNodeStatusMaxImages is the kubelet's default nodeStatusMaxImages.
const defaultNodeStatusMaxImages = 50

// ListImagesFunc lists the images on the node, as CRI ListImages does with
// no filter. The Images setter does not modify what it returns. It must
// honour ctx.
type ListImagesFunc func(ctx context.Context) ([]*runtimeapi.Image, error)

// imagesSetter returns a Setter for status.images: the images from list, largest
// first (equal sizes by descending ID, as the kubelet sorts), at most
// maxImages of them (-1: all), each with at most 5 names (the kubelet's
// maxNamesPerImageInNodeStatus), digests before tags. When list fails
// the images are cleared and the error returned, as the kubelet does.
func imagesSetter(maxImages int32, list ListImagesFunc) (Setter, error) {
	if list == nil {
		return nil, errors.New("images: list func is required")
	}
	if maxImages < -1 {
		return nil, fmt.Errorf("images: nodeStatusMaxImages %d must be -1 (all) or more", maxImages)
	}
	return func(ctx context.Context, node *v1.Node) error {
		images, err := list(ctx)
		if err != nil {
			node.Status.Images = nil
			return fmt.Errorf("list images of node %s: %w", node.Name, err)
		}
		sorted := make([]*runtimeapi.Image, 0, len(images))
		for _, img := range images {
			if img != nil {
				sorted = append(sorted, img)
			}
		}
		slices.SortFunc(sorted, func(a, b *runtimeapi.Image) int {
			return cmp.Or(cmp.Compare(b.Size, a.Size), cmp.Compare(b.Id, a.Id))
		})
		if maxImages >= 0 && int(maxImages) < len(sorted) {
			sorted = sorted[:maxImages]
		}
		var out []v1.ContainerImage
		if len(sorted) > 0 {
			out = make([]v1.ContainerImage, 0, len(sorted))
		}
		for _, img := range sorted {
			names := make([]string, 0, min(len(img.RepoDigests)+len(img.RepoTags), maxNamesPerImageInNodeStatus))
			for _, list := range [][]string{img.RepoDigests, img.RepoTags} {
				for _, n := range list {
					if len(names) < maxNamesPerImageInNodeStatus {
						names = append(names, n)
					}
				}
			}
			size := int64(math.MaxInt64)
			if img.Size < math.MaxInt64 {
				size = int64(img.Size)
			}
			out = append(out, v1.ContainerImage{Names: names, SizeBytes: size})
		}
		node.Status.Images = out
		return nil
	}, nil
}

// RuntimeHandlersFunc returns the runtime handlers the container runtime
// reports in its CRI Status. It must honour ctx.
type RuntimeHandlersFunc func(ctx context.Context) ([]*runtimeapi.RuntimeHandler, error)

// runtimeHandlers returns a Setter for status.runtimeHandlers, sorted by
// name, with each handler's recursiveReadOnlyMounts and userNamespaces
// support. When fn fails the field is left as it was and the error returned.
func runtimeHandlers(fn RuntimeHandlersFunc) (Setter, error) {
	if fn == nil {
		return nil, errors.New("runtime handlers: func is required")
	}
	return func(ctx context.Context, node *v1.Node) error {
		handlers, err := fn(ctx)
		if err != nil {
			return fmt.Errorf("get runtime handlers of node %s: %w", node.Name, err)
		}
		out := make([]v1.NodeRuntimeHandler, 0, len(handlers))
		for _, h := range handlers {
			if h == nil {
				continue
			}
			rro, userns := h.GetFeatures().GetRecursiveReadOnlyMounts(), h.GetFeatures().GetUserNamespaces()
			out = append(out, v1.NodeRuntimeHandler{
				Name:     h.Name,
				Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &rro, UserNamespaces: &userns},
			})
		}
		slices.SortStableFunc(out, func(a, b v1.NodeRuntimeHandler) int { return cmp.Compare(a.Name, b.Name) })
		node.Status.RuntimeHandlers = out
		return nil
	}, nil
}

// RuntimeFeaturesFunc returns the features the container runtime reports in
// its CRI Status (nil when it reports none). It must honour ctx.
type RuntimeFeaturesFunc func(ctx context.Context) (*runtimeapi.RuntimeFeatures, error)

// nodeFeatures returns a Setter for status.features (supplementalGroupsPolicy)
// from the runtime's features; it leaves the field alone when the runtime
// reports none or fn fails (returning the error).
func nodeFeatures(fn RuntimeFeaturesFunc) (Setter, error) {
	if fn == nil {
		return nil, errors.New("node features: func is required")
	}
	return func(ctx context.Context, node *v1.Node) error {
		features, err := fn(ctx)
		if err != nil {
			return fmt.Errorf("get runtime features of node %s: %w", node.Name, err)
		}
		if features == nil {
			return nil
		}
		sgp := features.GetSupplementalGroupsPolicy()
		node.Status.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: &sgp}
		return nil
	}, nil
}

// declaredFeatures returns a Setter for status.declaredFeatures: the names
// of the node features (k8s.io/component-helpers/nodedeclaredfeatures) this
// agent implements, which the scheduler matches against what pods need. A
// nil list leaves the field alone.
func declaredFeatures(names []string) Setter {
	names = slices.Clone(names)
	slices.Sort(names)
	return func(_ context.Context, node *v1.Node) error {
		if names != nil {
			node.Status.DeclaredFeatures = slices.Clone(names)
		}
		return nil
	}
}

// goRuntime returns a Setter for nodeInfo.operatingSystem and architecture
// (GOOS and GOARCH).
func goRuntime() Setter {
	return func(_ context.Context, node *v1.Node) error {
		node.Status.NodeInfo.OperatingSystem = goruntime.GOOS
		node.Status.NodeInfo.Architecture = goruntime.GOARCH
		return nil
	}
}

// defaultKubeletPort is the kubelet's default port.
const defaultKubeletPort = 10250

// daemonEndpoints returns a Setter for status.daemonEndpoints: the port the
// agent's kubelet API listens on.
func daemonEndpoints(kubeletPort int32) (Setter, error) {
	if kubeletPort <= 0 || kubeletPort > 65535 {
		return nil, fmt.Errorf("daemon endpoints: kubelet port %d out of range", kubeletPort)
	}
	return func(_ context.Context, node *v1.Node) error {
		node.Status.DaemonEndpoints = v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: kubeletPort}}
		return nil
	}, nil
}
