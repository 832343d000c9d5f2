package podresources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"

	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/internal/unixsock"
)

const (
	// SocketName is the socket's name in Options.Dir, the kubelet's.
	SocketName = "kubelet.sock"
	// DefaultQPS and DefaultBurst are the kubelet's rate limit of the
	// API's calls: 100 per second, bursts of 10.
	DefaultQPS   = 100
	DefaultBurst = 10
)

// errLimitExceeded is the kubelet's answer to a call beyond the rate limit.
var errLimitExceeded = status.Error(codes.ResourceExhausted, "rejected by rate limit")

// DevicesProvider gives the devices allocated to containers and the node's
// devices; devices.Manager implements it. Its methods must be safe for
// concurrent use and must not block on a device plugin.
type DevicesProvider interface {
	// UpdateAllocatedDevices frees the devices of pods that are no longer
	// active; called before each List.
	UpdateAllocatedDevices()
	// ContainerDevices returns the devices allocated to the named
	// container of the pod with UID podUID.
	ContainerDevices(podUID, containerName string) []*podresourcesv1.ContainerDevices
	// AllocatableDevices returns the node's healthy devices, allocated or
	// not.
	AllocatableDevices() []*podresourcesv1.ContainerDevices
}

// CPUsProvider gives the exclusive CPUs of containers and the CPUs a CPU
// manager can give out. Its methods must be safe for concurrent use.
type CPUsProvider interface {
	// ContainerCPUs returns the CPU IDs given to c of pod exclusively;
	// empty when it runs on the shared pool.
	ContainerCPUs(pod *v1.Pod, c *v1.Container) []int64
	// AllocatableCPUs returns the CPU IDs that can be given out.
	AllocatableCPUs() []int64
}

// MemoryProvider gives the memory blocks (by NUMA node) of containers and
// the node's allocatable memory blocks. Its methods must be safe for
// concurrent use.
type MemoryProvider interface {
	// ContainerMemory returns the memory given to c of pod exclusively.
	ContainerMemory(pod *v1.Pod, c *v1.Container) []*podresourcesv1.ContainerMemory
	// AllocatableMemory returns the memory that can be given out.
	AllocatableMemory() []*podresourcesv1.ContainerMemory
}

// DynamicResourcesProvider gives the prepared ResourceClaims' devices of
// containers. Its method must be safe for concurrent use.
type DynamicResourcesProvider interface {
	// DynamicResources returns the claims' devices c of pod uses.
	DynamicResources(pod *v1.Pod, c *v1.Container) []*podresourcesv1.DynamicResource
}

// Options configure a Server.
type Options struct {
	// Dir is the socket's directory, <root-dir>/pod-resources. Required.
	Dir string
	// ActivePods returns the pods admitted on the node that are not
	// terminal (pods.Store.Active). Required.
	ActivePods func() []*v1.Pod
	// Devices gives the device plugins' devices; nil reports none.
	Devices DevicesProvider
	// CPUs gives a CPU manager's exclusive CPUs; nil reports none, as the
	// kubelet with cpuManagerPolicy none.
	CPUs CPUsProvider
	// Memory gives a memory manager's memory blocks; nil reports none, as
	// the kubelet with memoryManagerPolicy None.
	Memory MemoryProvider
	// DynamicResources gives the devices of prepared ResourceClaims; nil
	// reports none.
	DynamicResources DynamicResourcesProvider
	// QPS and Burst rate limit the API's calls; DefaultQPS and
	// DefaultBurst when 0.
	QPS   float64
	Burst int
	// Registerer takes the kubelet's pod resources API metrics; nil
	// registers nothing.
	Registerer prometheus.Registerer
}

// Server is the pod resources API: it implements v1's
// PodResourcesListerServer, so it can also be registered on another gRPC
// server, and Run serves it with v1alpha1 on the kubelet's socket. Its
// methods are safe for concurrent use.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	opts    Options
	metrics *metrics
}

// New returns a Server; it touches no file until Run.
func New(opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("pod resources API: Dir is required")
	}
	if opts.ActivePods == nil {
		return nil, errors.New("pod resources API: ActivePods is required")
	}
	if opts.Devices == nil {
		opts.Devices = none{}
	}
	if opts.CPUs == nil {
		opts.CPUs = none{}
	}
	if opts.Memory == nil {
		opts.Memory = none{}
	}
	if opts.DynamicResources == nil {
		opts.DynamicResources = none{}
	}
	if opts.QPS == 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst == 0 {
		opts.Burst = DefaultBurst
	}
	return &Server{opts: opts, metrics: newMetrics(opts.Registerer)}, nil
}

// SocketPath returns the socket's path, Options.Dir/kubelet.sock.
func (s *Server) SocketPath() string {
	return filepath.Join(s.opts.Dir, SocketName)
}

// Run creates Options.Dir (0750) and serves the API on SocketPath until ctx
// is done, then removes the socket. As the kubelet, a stale socket is
// replaced, and the new one is bound under a temporary name and renamed
// into place so a client never dials a half-made socket. A socket path too
// long for a unix socket address is logged as an error and Run waits for
// ctx without serving, rather than stopping the agent.
func (s *Server) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	path := s.SocketPath()
	if err := os.MkdirAll(s.opts.Dir, 0o750); err != nil {
		return fmt.Errorf("pod resources API: create %s: %w", s.opts.Dir, err)
	}
	if n := len(path); n > unixsock.MaxPathLen {
		log.Error(nil, "The pod resources API cannot be served on this node: its socket's path is longer than a unix socket address allows", "socket", path, "length", n, "max", unixsock.MaxPathLen)
		<-ctx.Done()
		return nil
	}
	lis, err := listen(path)
	if err != nil {
		return fmt.Errorf("pod resources API: %w", err)
	}
	limiter := rate.NewLimiter(rate.Limit(s.opts.QPS), s.opts.Burst)
	log.Info("Setting rate limiting for endpoint", "service", "podresources", "qps", s.opts.QPS, "burstTokens", s.opts.Burst)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !limiter.Allow() {
			return nil, errLimitExceeded
		}
		return handler(ctx, req)
	}))
	v1alpha1.RegisterPodResourcesListerServer(srv, alphaServer{s: s})
	podresourcesv1.RegisterPodResourcesListerServer(srv, s)
	log.Info("Starting to serve the podresources API", "endpoint", "unix://"+path)
	err = runner.ServeGRPC(ctx, srv, lis)
	os.Remove(path)
	if err != nil {
		return fmt.Errorf("pod resources API: serve %s: %w", path, err)
	}
	return nil
}

// listen binds a unix socket at path as the kubelet's CreateListener: the
// old socket unlinked, the new one bound to a temporary name in the same
// directory and renamed to path.
func listen(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "")
	if err != nil {
		return nil, fmt.Errorf("create a temporary socket name for %s: %w", path, err)
	}
	tmp := f.Name()
	f.Close()
	if err := os.Remove(tmp); err != nil {
		return nil, fmt.Errorf("remove temporary file %s: %w", tmp, err)
	}
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		lis.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("move socket %s to %s: %w", tmp, path, err)
	}
	return lis, nil
}

// List returns the resources of the active pods' app and restartable init
// containers.
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.metrics.total.WithLabelValues(versionV1).Inc()
	s.metrics.list.WithLabelValues(versionV1).Inc()
	pods := s.opts.ActivePods()
	s.opts.Devices.UpdateAllocatedDevices()
	out := make([]*podresourcesv1.PodResources, len(pods))
	for i, pod := range pods {
		out[i] = s.podResources(pod)
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: out}, nil
}

// Get returns the resources of one active pod; a pod that is not active
// is an error, the kubelet's "pod <name> in namespace <ns> not found".
func (s *Server) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	s.metrics.total.WithLabelValues(versionV1).Inc()
	s.metrics.get.WithLabelValues(versionV1).Inc()
	for _, pod := range s.opts.ActivePods() {
		if pod.Namespace == req.PodNamespace && pod.Name == req.PodName {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: s.podResources(pod)}, nil
		}
	}
	s.metrics.getErrors.WithLabelValues(versionV1).Inc()
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

// GetAllocatableResources returns the node's devices, CPUs and memory that
// can be given to containers: its capacity for them, not what is free.
func (s *Server) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	s.metrics.total.WithLabelValues(versionV1).Inc()
	s.metrics.getAllocatable.WithLabelValues(versionV1).Inc()
	return &podresourcesv1.AllocatableResourcesResponse{
		Devices: s.opts.Devices.AllocatableDevices(),
		CpuIds:  s.opts.CPUs.AllocatableCPUs(),
		Memory:  s.opts.Memory.AllocatableMemory(),
	}, nil
}

func (s *Server) podResources(pod *v1.Pod) *podresourcesv1.PodResources {
	out := &podresourcesv1.PodResources{
		Name:       pod.Name,
		Namespace:  pod.Namespace,
		Containers: make([]*podresourcesv1.ContainerResources, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers)),
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			out.Containers = append(out.Containers, s.containerResources(pod, c))
		}
	}
	for i := range pod.Spec.Containers {
		out.Containers = append(out.Containers, s.containerResources(pod, &pod.Spec.Containers[i]))
	}
	return out
}

func (s *Server) containerResources(pod *v1.Pod, c *v1.Container) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{
		Name:             c.Name,
		Devices:          s.opts.Devices.ContainerDevices(string(pod.UID), c.Name),
		CpuIds:           s.opts.CPUs.ContainerCPUs(pod, c),
		Memory:           s.opts.Memory.ContainerMemory(pod, c),
		DynamicResources: s.opts.DynamicResources.DynamicResources(pod, c),
	}
}

// alphaServer is v1alpha1's List, which the kubelet still serves: the
// pods' app containers and their devices. (The kubelet lists every pod it
// knows there, terminal ones too; this lists the active pods, as v1.)
type alphaServer struct {
	v1alpha1.UnimplementedPodResourcesListerServer
	s *Server
}

// List returns the active pods' app containers and their devices.
func (a alphaServer) List(context.Context, *v1alpha1.ListPodResourcesRequest) (*v1alpha1.ListPodResourcesResponse, error) {
	a.s.metrics.total.WithLabelValues(versionV1alpha1).Inc()
	pods := a.s.opts.ActivePods()
	a.s.opts.Devices.UpdateAllocatedDevices()
	out := make([]*v1alpha1.PodResources, len(pods))
	for i, pod := range pods {
		pr := &v1alpha1.PodResources{Name: pod.Name, Namespace: pod.Namespace, Containers: make([]*v1alpha1.ContainerResources, len(pod.Spec.Containers))}
		for j, c := range pod.Spec.Containers {
			var devs []*v1alpha1.ContainerDevices
			for _, d := range a.s.opts.Devices.ContainerDevices(string(pod.UID), c.Name) {
				devs = append(devs, &v1alpha1.ContainerDevices{ResourceName: d.ResourceName, DeviceIds: d.DeviceIds})
			}
			pr.Containers[j] = &v1alpha1.ContainerResources{Name: c.Name, Devices: devs}
		}
		out[i] = pr
	}
	return &v1alpha1.ListPodResourcesResponse{PodResources: out}, nil
}

// none is the provider of nothing: no devices, CPUs, memory or claims.
type none struct{}

func (none) UpdateAllocatedDevices()                                            {}
func (none) ContainerDevices(string, string) []*podresourcesv1.ContainerDevices { return nil }
func (none) AllocatableDevices() []*podresourcesv1.ContainerDevices             { return nil }
func (none) ContainerCPUs(*v1.Pod, *v1.Container) []int64                       { return nil }
func (none) AllocatableCPUs() []int64                                           { return nil }
func (none) ContainerMemory(*v1.Pod, *v1.Container) []*podresourcesv1.ContainerMemory {
	return nil
}
func (none) AllocatableMemory() []*podresourcesv1.ContainerMemory { return nil }
func (none) DynamicResources(*v1.Pod, *v1.Container) []*podresourcesv1.DynamicResource {
	return nil
}
