package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
)

const testNode = "node-a"

// fakeRuntime is a Runtime with fixed sandboxes and containers; its
// streaming calls return the configured URLs and record their requests.
type fakeRuntime struct {
	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	statuses   map[string]*runtimeapi.ContainerStatus
	streamURL  string
	// cri, when set, serves the streaming calls (their URLs are its).
	cri       streaming.Server
	streamErr error
	execSync  func(id string, cmd []string) ([]byte, []byte, error)

	checkpoint func(*runtimeapi.CheckpointContainerRequest) error

	execReqs   []*runtimeapi.ExecRequest
	attachReqs []*runtimeapi.AttachRequest
	pfReqs     []*runtimeapi.PortForwardRequest
}

func (f *fakeRuntime) Exec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execReqs = append(f.execReqs, req)
	if f.streamErr != nil {
		return nil, f.streamErr
	}
	if f.cri != nil {
		return f.cri.GetExec(req)
	}
	return &runtimeapi.ExecResponse{Url: f.streamURL + "/exec/" + req.ContainerId}, nil
}

func (f *fakeRuntime) Attach(_ context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attachReqs = append(f.attachReqs, req)
	if f.streamErr != nil {
		return nil, f.streamErr
	}
	if f.cri != nil {
		return f.cri.GetAttach(req)
	}
	return &runtimeapi.AttachResponse{Url: f.streamURL + "/attach/" + req.ContainerId}, nil
}

func (f *fakeRuntime) PortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pfReqs = append(f.pfReqs, req)
	if f.streamErr != nil {
		return nil, f.streamErr
	}
	if f.cri != nil {
		return f.cri.GetPortForward(req)
	}
	return &runtimeapi.PortForwardResponse{Url: f.streamURL + "/portforward/" + req.PodSandboxId}, nil
}

func (f *fakeRuntime) ExecSync(_ context.Context, id string, cmd []string, _ time.Duration) ([]byte, []byte, error) {
	if f.execSync == nil {
		return nil, nil, grpcstatus.Error(codes.Unimplemented, "no exec")
	}
	return f.execSync(id, cmd)
}

func (f *fakeRuntime) CheckpointContainer(_ context.Context, req *runtimeapi.CheckpointContainerRequest) error {
	if f.checkpoint == nil {
		return grpcstatus.Error(codes.Unimplemented, "no checkpoints")
	}
	return f.checkpoint(req)
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for _, s := range f.sandboxes {
		if st := filter.GetState(); st != nil && st.State != s.State {
			continue
		}
		if uid, ok := filter.GetLabelSelector()[podUIDLabel]; ok && s.Labels[podUIDLabel] != uid {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		if st := filter.GetState(); st != nil && st.State != c.State {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.statuses[id]
	if !ok {
		return nil, grpcstatus.Errorf(codes.NotFound, "container %q not found", id)
	}
	return &runtimeapi.ContainerStatusResponse{Status: proto.Clone(st).(*runtimeapi.ContainerStatus)}, nil
}

// requests returns the streaming requests so far.
func (f *fakeRuntime) requests() ([]*runtimeapi.ExecRequest, []*runtimeapi.AttachRequest, []*runtimeapi.PortForwardRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.execReqs), slices.Clone(f.attachReqs), slices.Clone(f.pfReqs)
}

func (f *fakeRuntime) setState(id string, state runtimeapi.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[id].State = state
}

// addPod makes the runtime run pod (one ready sandbox "sb-<name>" and a
// running container "<name>-<container>" per container of its spec).
func (f *fakeRuntime) addPod(pod *v1.Pod, created int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	labels := map[string]string{podUIDLabel: string(pod.UID), podNameLabel: pod.Name, podNamespaceLabel: pod.Namespace}
	f.sandboxes = append(f.sandboxes, &runtimeapi.PodSandbox{
		Id:        "sb-" + pod.Name,
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)},
		State:     runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: created,
		Labels:    labels,
	})
	for _, c := range pod.Spec.Containers {
		cl := map[string]string{containerNameLabel: c.Name}
		for k, v := range labels {
			cl[k] = v
		}
		f.containers = append(f.containers, &runtimeapi.Container{
			Id:        pod.Name + "-" + c.Name,
			Metadata:  &runtimeapi.ContainerMetadata{Name: c.Name},
			Image:     &runtimeapi.ImageSpec{Image: c.Image},
			State:     runtimeapi.ContainerState_CONTAINER_RUNNING,
			CreatedAt: created,
			Labels:    cl,
		})
	}
}

func testPod(ns, name string, containers ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c, Image: "img-" + c})
	}
	return p
}

// baseOptions are Options for handler tests: AlwaysAllow, anonymous on, no
// webhook, no listeners.
func baseOptions(pods ...*v1.Pod) Options {
	return Options{
		NodeName:       testNode,
		Port:           -1,
		Authentication: AuthnOptions{Anonymous: true, DisableWebhook: true},
		Authorization:  AuthzOptions{Mode: AuthorizationModeAlwaysAllow},
		Pods:           func() []*v1.Pod { return pods },
	}
}

func mustNew(t *testing.T, o Options) *Server {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// do serves one request on h and returns the status and body.
func do(t *testing.T, h http.Handler, method, target string, body io.Reader) (int, string, http.Header) {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String(), rec.Header()
}

func contains(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("%s = %q, want it to contain %q", what, got, want)
	}
}
