package fakecri

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// kubeletAPIVersion is the version of the kubelet's runtime API that
	// Version reports, as containerd does.
	kubeletAPIVersion = "0.1.0"
	// criAPIVersion is the CRI version this server speaks.
	criAPIVersion = "v1"
)

// runtimeService serves the CRI RuntimeService from a Server's state. RPCs
// it does not override answer codes.Unimplemented.
type runtimeService struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	s *Server
}

func (r *runtimeService) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return &runtimeapi.VersionResponse{
		Version:           kubeletAPIVersion,
		RuntimeName:       r.s.runtimeName,
		RuntimeVersion:    r.s.runtimeVersion,
		RuntimeApiVersion: criAPIVersion,
	}, nil
}

func (r *runtimeService) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			clone(r.s.runtimeReady),
			clone(r.s.networkReady),
		}},
		RuntimeHandlers: cloneAll(r.s.handlers),
		Features:        clone(r.s.features),
	}, nil
}

func (r *runtimeService) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return &runtimeapi.RuntimeConfigResponse{
		Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: r.s.cgroupDriver},
	}, nil
}

// imageService serves the CRI ImageService from a Server's state.
type imageService struct {
	runtimeapi.UnimplementedImageServiceServer
	s *Server
}

func (i *imageService) ListImages(_ context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	ref := req.GetFilter().GetImage().GetImage()
	if ref == "" {
		return &runtimeapi.ListImagesResponse{Images: i.s.images.list()}, nil
	}
	img, err := i.s.images.lookup(ref)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &runtimeapi.ListImagesResponse{}
	if img != nil {
		resp.Images = []*runtimeapi.Image{clone(img)}
	}
	return resp, nil
}

func (i *imageService) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref, err := imageRef(req.GetImage())
	if err != nil {
		return nil, err
	}
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	img, err := i.s.images.lookup(ref)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// An absent image is a nil Image and no error (CRI contract).
	return &runtimeapi.ImageStatusResponse{Image: clone(img)}, nil
}

func (i *imageService) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref, err := imageRef(req.GetImage())
	if err != nil {
		return nil, err
	}
	named, err := parseRef(ref)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	img, err := i.s.pullable.lookup(ref)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if img == nil && i.s.pullAny {
		img, err = NewImage(ref, PullAnyImageSize)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if img == nil {
		return nil, status.Errorf(codes.NotFound, "pull image %q: %s not found in the fake registry (add it with Options.Pullable or Server.AddPullable)", ref, named)
	}
	return &runtimeapi.PullImageResponse{ImageRef: i.s.images.add(img).Id}, nil
}

func (i *imageService) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref, err := imageRef(req.GetImage())
	if err != nil {
		return nil, err
	}
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	img, err := i.s.images.lookup(ref)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Removing an absent image succeeds (CRI contract: idempotent).
	if img != nil {
		i.s.images.remove(img.Id)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (i *imageService) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	i.s.mu.Lock()
	used, count := i.s.images.usage()
	i.s.mu.Unlock()
	fs := func() *runtimeapi.FilesystemUsage {
		return &runtimeapi.FilesystemUsage{
			Timestamp:  i.s.clock.Now().UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: i.s.mountpoint},
			UsedBytes:  &runtimeapi.UInt64Value{Value: used},
			InodesUsed: &runtimeapi.UInt64Value{Value: count},
		}
	}
	// Images and container layers share one filesystem, as with containerd's
	// default snapshotter.
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{fs()},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{fs()},
	}, nil
}

// imageRef returns the reference of spec, or an InvalidArgument error if it
// is empty.
func imageRef(spec *runtimeapi.ImageSpec) (string, error) {
	if spec.GetImage() == "" {
		return "", status.Error(codes.InvalidArgument, "image reference is empty")
	}
	return spec.GetImage(), nil
}
