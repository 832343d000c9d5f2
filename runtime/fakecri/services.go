package fakecri

import (
	"context"
	"encoding/json"

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

func (r *runtimeService) Status(_ context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	resp := &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			clone(r.s.runtimeReady),
			clone(r.s.networkReady),
		}},
		RuntimeHandlers: cloneAll(r.s.handlers),
		Features:        clone(r.s.features),
	}
	if req.GetVerbose() && r.s.sandboxImage != "" {
		// containerd's verbose status carries its configuration as JSON.
		cfg, err := json.Marshal(map[string]string{"sandboxImage": r.s.sandboxImage})
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		resp.Info = map[string]string{"config": string(cfg)}
	}
	return resp, nil
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
	if want, ok := i.s.credentials[named.Name()]; ok {
		auth := req.GetAuth()
		if auth.GetUsername() != want.username || auth.GetPassword() != want.password {
			return nil, status.Errorf(codes.Unauthenticated, "pull image %q: failed to authorize: 401 Unauthorized", ref)
		}
	}
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

func (r *runtimeService) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	id, err := r.s.runSandbox(req.GetConfig(), req.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (r *runtimeService) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	if err := r.s.stopSandbox(req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (r *runtimeService) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	if err := r.s.removeSandbox(req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (r *runtimeService) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.advanceLocked()
	sb, err := r.s.lookupSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: r.s.sandboxStatusLocked(sb)}, nil
}

func (r *runtimeService) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: r.s.listSandboxes(req.GetFilter())}, nil
}

func (r *runtimeService) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	id, err := r.s.createContainer(req.GetPodSandboxId(), req.GetConfig())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (r *runtimeService) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	if err := r.s.startContainer(req.GetContainerId()); err != nil {
		return nil, err
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

func (r *runtimeService) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if err := r.s.stopContainer(ctx.Done(), req.GetContainerId(), req.GetTimeout()); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (r *runtimeService) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	if err := r.s.removeContainer(req.GetContainerId()); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (r *runtimeService) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: r.s.listContainers(req.GetFilter())}, nil
}

func (r *runtimeService) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.advanceLocked()
	c, err := r.s.lookupContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: r.s.containerStatusLocked(c)}
	if req.GetVerbose() {
		if resp.Info, err = r.s.containerInfoLocked(c); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return resp, nil
}

func (r *runtimeService) UpdateContainerResources(_ context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.advanceLocked()
	c, err := r.s.lookupContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if c.state == runtimeapi.ContainerState_CONTAINER_EXITED {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s has exited; its resources cannot be updated", c.id)
	}
	if req.GetLinux() != nil {
		c.resources = &runtimeapi.ContainerResources{Linux: clone(req.GetLinux())}
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func (r *runtimeService) ReopenContainerLog(_ context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.advanceLocked()
	c, err := r.s.lookupContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", c.id)
	}
	// As containerd: the log file is opened anew at its path (created when
	// a log rotation moved it away); later output goes there.
	if c.logPath != "" {
		if err := writeLog(c.logPath, r.s.clock.Now(), nil); err != nil {
			return nil, status.Errorf(codes.Internal, "reopen log of container %s: %v", c.id, err)
		}
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

func (r *runtimeService) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	return r.s.execSync(ctx.Done(), req)
}

func (r *runtimeService) ContainerStats(_ context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.advanceLocked()
	c, err := r.s.lookupContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: r.s.containerStatsLocked(c, r.s.clock.Now())}, nil
}

func (r *runtimeService) ListContainerStats(_ context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	return &runtimeapi.ListContainerStatsResponse{Stats: r.s.listContainerStats(req.GetFilter())}, nil
}

func (r *runtimeService) PodSandboxStats(_ context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.advanceLocked()
	sb, err := r.s.lookupSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: r.s.sandboxStatsLocked(sb, r.s.clock.Now())}, nil
}

func (r *runtimeService) ListPodSandboxStats(_ context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: r.s.listSandboxStats(req.GetFilter())}, nil
}

// GetContainerEvents streams container events until the client goes away.
func (r *runtimeService) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	sub := r.s.subscribe()
	defer r.s.unsubscribe(sub)
	for {
		if ev, ok := sub.pop(); ok {
			if err := stream.Send(ev); err != nil {
				return err
			}
			continue
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-sub.ready:
		}
	}
}
