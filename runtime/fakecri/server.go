package fakecri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/unixsock"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultRuntimeName       = "fakecri"
	DefaultRuntimeVersion    = "1.0.0"
	DefaultImageFsMountpoint = "/var/lib/fakecri/images"
	// PullAnyImageSize is the size of an image that Options.PullAny makes up.
	PullAnyImageSize = 1 << 20
)

// Options configures a Server. The zero value is a ready runtime named
// "fakecri" with no images, an empty fake registry and the systemd cgroup
// driver.
type Options struct {
	// RuntimeName and RuntimeVersion are reported by Version
	// (defaults DefaultRuntimeName and DefaultRuntimeVersion).
	RuntimeName    string
	RuntimeVersion string
	// Images are present in the image store from the start. New copies them;
	// an image without an ID gets one derived from its first tag or digest.
	Images []*runtimeapi.Image
	// Pullable is the fake registry: PullImage succeeds for a reference that
	// names one of these images (by tag, digest or ID) and copies it into the
	// image store. Any other reference fails with codes.NotFound unless
	// PullAny is set.
	Pullable []*runtimeapi.Image
	// PullAny makes PullImage succeed for every valid reference that is not
	// in Pullable, storing NewImage(reference, PullAnyImageSize). Useful for
	// demos and simulations that run arbitrary pod specs.
	PullAny bool
	// CgroupDriver is reported by RuntimeConfig. The zero value is
	// runtimeapi.CgroupDriver_SYSTEMD.
	CgroupDriver runtimeapi.CgroupDriver
	// RuntimeHandlers are reported by Status. nil means the default handler
	// "" and "runc", like containerd, without optional features.
	RuntimeHandlers []*runtimeapi.RuntimeHandler
	// Features is reported by Status (nil: none reported).
	Features *runtimeapi.RuntimeFeatures
	// ImageFsMountpoint is the mount point ImageFsInfo reports for the image
	// and container filesystems (default DefaultImageFsMountpoint).
	ImageFsMountpoint string
	// Clock drives everything time-dependent: timestamps, scripted container
	// exits, stop grace periods, exec delays and stats (default
	// clock.RealClock{}). With a fake clock (k8s.io/utils/clock/testing)
	// tests step time deterministically: a container scripted to exit after
	// 10s exits when the clock passes that point, and a StopContainer call
	// that must wait for a grace period blocks until the clock is stepped.
	Clock clock.Clock
	// PodCIDRs are the ranges pod sandbox IPs are allocated from, one per IP
	// family, the first giving the primary IP (default DefaultPodCIDR).
	// Sandboxes in the node's network namespace get no IP, as with
	// containerd: the kubelet reports the node's IPs for them.
	PodCIDRs []string
	// Unimplemented lists RPCs (short names, such as "GetContainerEvents")
	// that answer codes.Unimplemented from the start, to emulate an older
	// runtime (containerd 1.6 lacks GetContainerEvents and RuntimeConfig).
	// See also SetUnimplemented.
	Unimplemented []string
	// EventBuffer is how many container events each GetContainerEvents
	// stream may have queued before further events for it are dropped
	// (default DefaultEventBuffer).
	EventBuffer int
	// Exec answers ExecSync; nil answers every command with exit code 0 and
	// no output. See SetExecHandler.
	Exec ExecHandler
	// SandboxImage, when set, is reported as containerd reports its
	// sandbox image: in the verbose Status' info["config"] JSON, field
	// "sandboxImage".
	SandboxImage string
}

// Server is a fake CRI runtime. Create it with New; it serves nothing until
// Serve or Start is called, and one Server may serve several sockets at once,
// all sharing its state. All methods are safe for concurrent use.
type Server struct {
	optsErr      error
	clock        clock.Clock
	mountpoint   string
	sandboxImage string
	ipam         *ipam
	eventBuf     int

	mu             sync.Mutex
	runtimeName    string
	runtimeVersion string
	runtimeReady   *runtimeapi.RuntimeCondition
	networkReady   *runtimeapi.RuntimeCondition
	cgroupDriver   runtimeapi.CgroupDriver
	handlers       []*runtimeapi.RuntimeHandler
	features       *runtimeapi.RuntimeFeatures
	images         imageStore
	pullable       imageStore
	pullAny        bool
	credentials    map[string]credential // normalized repository name to required auth
	faults         map[string]error
	rewrite        ReplyRewriter
	calls          map[string]int

	// Pods and containers (see pods.go).
	sandboxes    map[string]*sandbox
	sandboxNames map[string]string // reserved sandbox names to IDs
	containers   map[string]*container
	pending      map[*container]struct{} // running containers with a scripted exit
	nextID       uint64
	exec         ExecHandler
	subscribers  map[*subscriber]struct{}
	dropped      int
	timer        clock.Timer // fires at nextWake
	nextWake     time.Time
}

// Defaults applied by New to zero Options fields.
const (
	DefaultPodCIDR     = "10.88.0.0/16"
	DefaultEventBuffer = 1000
)

// New returns a Server configured by opts. It does no I/O. Options that
// cannot be used (a malformed PodCIDRs entry, an unknown method in
// Unimplemented) do not make New fail: Err reports them, and every RPC
// answers codes.InvalidArgument with the same message, so a misconfigured
// fake fails loudly at its first use.
func New(opts Options) *Server {
	cidrs := opts.PodCIDRs
	if len(cidrs) == 0 {
		cidrs = []string{DefaultPodCIDR}
	}
	pool, err := newIPAM(cidrs)
	s := &Server{
		optsErr:        err,
		ipam:           pool,
		eventBuf:       opts.EventBuffer,
		sandboxes:      map[string]*sandbox{},
		sandboxNames:   map[string]string{},
		containers:     map[string]*container{},
		pending:        map[*container]struct{}{},
		exec:           opts.Exec,
		subscribers:    map[*subscriber]struct{}{},
		clock:          opts.Clock,
		mountpoint:     opts.ImageFsMountpoint,
		sandboxImage:   opts.SandboxImage,
		runtimeName:    opts.RuntimeName,
		runtimeVersion: opts.RuntimeVersion,
		runtimeReady:   &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true},
		networkReady:   &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true},
		cgroupDriver:   opts.CgroupDriver,
		handlers:       cloneAll(opts.RuntimeHandlers),
		features:       clone(opts.Features),
		pullAny:        opts.PullAny,
		faults:         map[string]error{},
		calls:          map[string]int{},
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.mountpoint == "" {
		s.mountpoint = DefaultImageFsMountpoint
	}
	if s.runtimeName == "" {
		s.runtimeName = DefaultRuntimeName
	}
	if s.runtimeVersion == "" {
		s.runtimeVersion = DefaultRuntimeVersion
	}
	if opts.RuntimeHandlers == nil {
		s.handlers = []*runtimeapi.RuntimeHandler{
			{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}},
			{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{}},
		}
	}
	for _, img := range opts.Images {
		s.images.add(img)
	}
	for _, img := range opts.Pullable {
		s.pullable.add(img)
	}
	if s.eventBuf <= 0 {
		s.eventBuf = DefaultEventBuffer
	}
	for _, m := range opts.Unimplemented {
		if err := s.SetUnimplemented(m); err != nil {
			s.optsErr = errors.Join(s.optsErr, err)
		}
	}
	if s.optsErr != nil {
		s.optsErr = fmt.Errorf("fakecri: invalid Options: %w", s.optsErr)
	}
	return s
}

// Err returns the error that makes every RPC fail because the Options given
// to New cannot be used, or nil.
func (s *Server) Err() error { return s.optsErr }

// SetRuntimeReady sets the RuntimeReady condition that Status reports.
func (s *Server) SetRuntimeReady(ready bool, reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runtimeReady = &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: ready, Reason: reason, Message: message}
}

// SetNetworkReady sets the NetworkReady condition that Status reports.
func (s *Server) SetNetworkReady(ready bool, reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.networkReady = &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: ready, Reason: reason, Message: message}
}

// SetVersion sets the runtime name and version that Version reports. Empty
// values are reported as they are (a real client rejects them).
func (s *Server) SetVersion(name, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runtimeName, s.runtimeVersion = name, version
}

// SetCgroupDriver sets the cgroup driver that RuntimeConfig reports.
func (s *Server) SetCgroupDriver(driver runtimeapi.CgroupDriver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cgroupDriver = driver
}

// SetError makes every later call of the RPC named method (its short name,
// such as "PullImage" or "RuntimeConfig"), on a socket or in process
// (InProcess), fail with err before it reaches the fake runtime; a nil err
// clears the fault. A status error (status.Error)
// reaches the client with its code, any other error as codes.Unknown. It
// returns an error if method is not an RPC of the CRI v1 RuntimeService or
// ImageService.
func (s *Server) SetError(method string, err error) error {
	if !criMethods[method] {
		return fmt.Errorf("fakecri: %q is not a CRI v1 RuntimeService or ImageService method", method)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.faults, method)
	} else {
		s.faults[method] = err
	}
	return nil
}

// SetUnimplemented makes the RPC named method answer codes.Unimplemented, the
// way a runtime that predates it does (containerd 1.6 and RuntimeConfig). It
// is SetError with an Unimplemented status; SetError(method, nil) undoes it.
func (s *Server) SetUnimplemented(method string) error {
	return s.SetError(method, status.Errorf(codes.Unimplemented, "fakecri: method %s not implemented", method))
}

// Calls returns how many calls of the RPC named method (its short name) the
// server has received on all its sockets and from its in-process clients
// (InProcess), including failed ones.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// criMethods holds the short names of all RPCs of the CRI v1 services.
var criMethods = func() map[string]bool {
	m := map[string]bool{}
	for _, desc := range []grpc.ServiceDesc{runtimeapi.RuntimeService_ServiceDesc, runtimeapi.ImageService_ServiceDesc} {
		for _, md := range desc.Methods {
			m[md.MethodName] = true
		}
		for _, sd := range desc.Streams {
			m[sd.StreamName] = true
		}
	}
	return m
}()

// admit counts a call of fullMethod and returns the fault injected for it.
func (s *Server) admit(fullMethod string) error {
	if s.optsErr != nil {
		return status.Error(codes.InvalidArgument, s.optsErr.Error())
	}
	method := path.Base(fullMethod)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	return s.faults[method]
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.admit(info.FullMethod); err != nil {
		return nil, err
	}
	reply, err := handler(ctx, req)
	s.mu.Lock()
	rewrite := s.rewrite
	s.mu.Unlock()
	if rewrite == nil || err != nil {
		return reply, err
	}
	msg, ok := reply.(proto.Message)
	if !ok {
		return reply, err
	}
	// The rewriter gets a copy: the fake's own state stays what it did.
	return rewrite(path.Base(info.FullMethod), req, proto.Clone(msg))
}

// ReplyRewriter rewrites the reply of a unary RPC that the fake runtime
// answered without an error, before it goes on the wire (or, in process,
// back to the caller, which unlike cri-client does not check it): method is the
// RPC's short name ("ListPodSandbox"), req its request (read only), reply
// a copy of the fake's answer (a *runtimeapi.<Method>Response) that the
// rewriter may change in place or replace. A non-nil error is sent instead
// of the reply (a status error with its code, any other as codes.Unknown).
// What the fake runtime did stays done: a rewritten StopContainer still
// stopped the container. It is called on the RPC's goroutine, one call at
// a time per RPC but concurrently across RPCs.
type ReplyRewriter func(method string, req any, reply proto.Message) (proto.Message, error)

// SetReplyRewriter makes every later successful unary RPC's reply pass
// through rewrite, which can make the runtime answer anything the CRI's
// messages can carry: odd states, missing fields, wrong IDs, errors of any
// code after the deed. nil stops rewriting. SetError faults come first
// and are not rewritten; neither are the streams (GetContainerEvents).
func (s *Server) SetReplyRewriter(rewrite ReplyRewriter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rewrite = rewrite
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.admit(info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// Serve serves the CRI on a unix socket at socketPath until ctx is done, then
// stops the server and removes the socket. A stale socket left at
// socketPath is replaced; any other file there is an error. It returns nil
// when ctx ends and an error if the socket cannot be created or serving
// fails.
func (s *Server) Serve(ctx context.Context, socketPath string) error {
	lis, err := listen(socketPath)
	if err != nil {
		return err
	}
	served, stop := s.serve(lis)
	select {
	case <-ctx.Done():
		stop()
		return nil
	case err := <-served:
		stop()
		return fmt.Errorf("fakecri: serve %s: %w", socketPath, err)
	}
}

// Start serves the CRI on a unix socket at socketPath in the background. The
// socket accepts connections when Start returns. It returns the endpoint to
// dial ("unix://" and the absolute socket path) and stop, which stops the
// server, waits for it and removes the socket; stop may be called more than
// once.
func (s *Server) Start(socketPath string) (endpoint string, stop func(), err error) {
	abs, err := filepath.Abs(socketPath)
	if err != nil {
		return "", nil, fmt.Errorf("fakecri: socket path %q: %w", socketPath, err)
	}
	lis, err := listen(abs)
	if err != nil {
		return "", nil, err
	}
	_, stopServer := s.serve(lis)
	var once sync.Once
	return "unix://" + abs, func() { once.Do(stopServer) }, nil
}

// serve runs a gRPC server for s on lis in a goroutine. The channel receives
// the error if serving fails before stop; stop ends serving (closing lis,
// which removes the socket) and waits for the goroutine.
func (s *Server) serve(lis *net.UnixListener) (<-chan error, func()) {
	g := grpc.NewServer(
		// Each connection's 32 KiB write buffer goes back to a pool
		// after every flush instead of staying with the connection:
		// where many fake runtimes share a process (agent/fleet), their
		// idle connections hold none.
		grpc.SharedWriteBuffer(true),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	runtimeapi.RegisterRuntimeServiceServer(g, &runtimeService{s: s})
	runtimeapi.RegisterImageServiceServer(g, &imageService{s: s})
	served := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(lis); err != nil {
			served <- err
		}
	}()
	return served, func() {
		// The listener unlinks the socket when the gRPC server closes it.
		g.Stop()
		<-done
	}
}

// listen creates a unix socket at socketPath, replacing a stale socket. The
// listener removes the socket when it is closed.
func listen(socketPath string) (*net.UnixListener, error) {
	if socketPath == "" {
		return nil, errors.New("fakecri: socket path is empty")
	}
	if err := unixsock.CheckPath(socketPath); err != nil {
		return nil, fmt.Errorf("fakecri: %w", err)
	}
	if fi, err := os.Lstat(socketPath); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("fakecri: %s exists and is not a socket", socketPath)
		}
		if err := os.Remove(socketPath); err != nil {
			return nil, fmt.Errorf("fakecri: remove stale socket %s: %w", socketPath, err)
		}
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: socketPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("fakecri: listen on %s: %w", socketPath, err)
	}
	lis.SetUnlinkOnClose(true)
	return lis, nil
}

// SetImages replaces the image store with copies of imgs (normalized as for
// Options.Images).
func (s *Server) SetImages(imgs []*runtimeapi.Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images.set(imgs)
}

// AddImage stores a copy of img as if it had been pulled: its tags and
// digests are normalized, an empty ID is derived from its first reference, an
// image with the same ID is replaced and a tag naming another image moves to
// it. It returns the ID stored.
func (s *Server) AddImage(img *runtimeapi.Image) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.images.add(img).Id
}

// AddPullable adds a copy of img to the fake registry PullImage draws from
// (normalized as for AddImage) and returns its ID.
func (s *Server) AddPullable(img *runtimeapi.Image) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pullable.add(img).Id
}

// Images returns copies of the images in the store, ordered by ID.
func (s *Server) Images() []*runtimeapi.Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.images.list()
}

// credential is what the fake registry requires to pull a repository.
type credential struct{ username, password string }

// RequireAuth makes the fake registry refuse to pull images of the
// repository of ref (any tag or digest) with codes.Unauthenticated unless
// the PullImage request carries this username and password, as a private
// registry does. It returns an error for an invalid reference.
func (s *Server) RequireAuth(ref, username, password string) error {
	named, err := parseRef(ref)
	if err != nil {
		return fmt.Errorf("fakecri: require auth: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.credentials == nil {
		s.credentials = map[string]credential{}
	}
	s.credentials[named.Name()] = credential{username, password}
	return nil
}
