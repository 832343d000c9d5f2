package fakecri_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	clocktesting "k8s.io/utils/clock/testing"
	utilexec "k8s.io/utils/exec"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

// criPair is one fake runtime reached through cri-client over its socket
// and another, in the same state, reached in process.
type criPair struct {
	remote, local       *fakecri.Server
	remoteRT, localRT   cri.RuntimeService
	remoteImg, localImg cri.ImageManagerService
}

func newCRIPair(t *testing.T) *criPair {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	p := &criPair{}
	for _, s := range []**fakecri.Server{&p.remote, &p.local} {
		*s = fakecri.New(fakecri.Options{Clock: clk})
		(*s).AddImage(mustImage(t, "busybox", 1000))
	}
	endpoint, stop, err := p.remote.Start(socketPath(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if p.remoteRT, err = criclient.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).
		WithConnectionTimeout(30 * time.Second).WithTracerProvider(nil).Build(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if p.remoteImg, err = criclient.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).
		WithConnectionTimeout(30 * time.Second).WithTracerProvider(nil).Build(ctx(t)); err != nil {
		t.Fatal(err)
	}
	p.localRT, p.localImg = p.local.InProcess()
	t.Cleanup(func() {
		for _, c := range []interface{ Close(context.Context) error }{p.remoteRT, p.remoteImg, p.localRT, p.localImg} {
			if err := c.Close(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
	return p
}

// canon renders a result for comparison: proto messages (alone or in
// slices) in JSON (map keys sorted), anything else with %#v.
func canon(t *testing.T, v any) string {
	t.Helper()
	if m, ok := v.(proto.Message); ok {
		if reflect.ValueOf(m).IsNil() {
			return "<nil message>"
		}
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%T %s", m, b)
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.Type().Elem().Implements(reflect.TypeFor[proto.Message]()) {
		var buf bytes.Buffer
		for i := range rv.Len() {
			buf.WriteString(canon(t, rv.Index(i).Interface()) + ";")
		}
		return buf.String()
	}
	return fmt.Sprintf("%#v", v)
}

// canonErr renders an error for comparison: its message, its gRPC code
// and the cri-client conventions callers test for.
func canonErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	var exit utilexec.CodeExitError
	return fmt.Sprintf("%q code=%v exit=%v(%d) timedOut=%v", err.Error(), status.Code(err),
		errors.As(err, &exit), exit.Code, errors.Is(err, criclient.ErrCommandTimedOut))
}

// TestInProcessMatchesTheSocket runs the same calls on a fake runtime
// through cri-client over its socket and on a twin in process: every
// result and every error (message, code, exit code) must be the same.
func TestInProcessMatchesTheSocket(t *testing.T) {
	p := newCRIPair(t)
	cfg := sandboxConfig("twin", map[string]string{fakecri.BehaviorAnnotation: "memory 64Mi; cpu 500m"})
	containerConfig := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Labels:   map[string]string{"app": "twin"},
	}
	for _, s := range []*fakecri.Server{p.remote, p.local} {
		s.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
			if r.Cmd[0] == "fail" {
				return fakecri.ExecResult{ExitCode: 3, Stdout: []byte("out"), Stderr: []byte("bad")}
			}
			return fakecri.ExecResult{Stdout: []byte("ok")}
		})
	}
	// Sandbox and container IDs are random: each side's, by index (0 the
	// socket's, 1 in process), are used in its calls and read as
	// placeholders in its results.
	var sandboxIDs, containerIDs [2]string
	type op struct {
		name string
		call func(r cri.RuntimeService, i cri.ImageManagerService, sandboxID, containerID string) (any, error)
		// keep records a side's result for later calls.
		keep func(side int, v any)
	}
	ops := []op{
		{name: "Version", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.Version(ctx(t), "0.1.0")
		}},
		{name: "Status", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.Status(ctx(t), true)
		}},
		{name: "RuntimeConfig", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.RuntimeConfig(ctx(t))
		}},
		{name: "ListImages", call: func(_ cri.RuntimeService, i cri.ImageManagerService, _, _ string) (any, error) {
			return i.ListImages(ctx(t), nil)
		}},
		{name: "ImageStatus", call: func(_ cri.RuntimeService, i cri.ImageManagerService, _, _ string) (any, error) {
			return i.ImageStatus(ctx(t), &runtimeapi.ImageSpec{Image: "busybox"}, false)
		}},
		{name: "ImageStatus missing", call: func(_ cri.RuntimeService, i cri.ImageManagerService, _, _ string) (any, error) {
			return i.ImageStatus(ctx(t), &runtimeapi.ImageSpec{Image: "nginx"}, false)
		}},
		{name: "PullImage not found", call: func(_ cri.RuntimeService, i cri.ImageManagerService, _, _ string) (any, error) {
			return i.PullImage(ctx(t), &runtimeapi.ImageSpec{Image: "nginx"}, nil, cfg)
		}},
		{name: "ImageFsInfo", call: func(_ cri.RuntimeService, i cri.ImageManagerService, _, _ string) (any, error) {
			return i.ImageFsInfo(ctx(t))
		}},
		{name: "RunPodSandbox", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.RunPodSandbox(ctx(t), cfg, "")
		},
			keep: func(side int, v any) { sandboxIDs[side] = v.(string) }},
		{name: "RunPodSandbox unknown handler", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.RunPodSandbox(ctx(t), sandboxConfig("other", nil), "kata")
		}},
		{name: "PodSandboxStatus", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.PodSandboxStatus(ctx(t), sb, false)
		}},
		{name: "ListPodSandbox", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.ListPodSandbox(ctx(t), nil)
		}},
		{name: "CreateContainer", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.CreateContainer(ctx(t), sb, containerConfig, cfg)
		}, keep: func(side int, v any) { containerIDs[side] = v.(string) }},
		{name: "StartContainer", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return nil, r.StartContainer(ctx(t), ctr)
		}},
		{name: "ContainerStatus", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.ContainerStatus(ctx(t), ctr, true)
		}},
		{name: "ListContainers", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.ListContainers(ctx(t), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"app": "twin"}})
		}},
		{name: "ExecSync", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			out, errOut, err := r.ExecSync(ctx(t), ctr, []string{"ready"}, 0)
			return [][]byte{out, errOut}, err
		}},
		{name: "ExecSync exit code", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			out, errOut, err := r.ExecSync(ctx(t), ctr, []string{"fail"}, time.Second)
			return [][]byte{out, errOut}, err
		}},
		{name: "ExecSync empty command", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			out, errOut, err := r.ExecSync(ctx(t), ctr, nil, 0)
			return [][]byte{out, errOut}, err
		}},
		{name: "UpdateContainerResources", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return nil, r.UpdateContainerResources(ctx(t), ctr, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}})
		}},
		{name: "ContainerStats", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.ContainerStats(ctx(t), ctr)
		}},
		{name: "ListContainerStats", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.ListContainerStats(ctx(t), nil)
		}},
		{name: "PodSandboxStats", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.PodSandboxStats(ctx(t), sb)
		}},
		{name: "ListPodSandboxStats", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.ListPodSandboxStats(ctx(t), nil)
		}},
		{name: "Exec unimplemented", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.Exec(ctx(t), &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"sh"}})
		}},
		{name: "StopContainer", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return nil, r.StopContainer(ctx(t), ctr, 0)
		}},
		{name: "RemoveContainer", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return nil, r.RemoveContainer(ctx(t), ctr)
		}},
		{name: "ContainerStatus not found", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return r.ContainerStatus(ctx(t), ctr, false)
		}},
		{name: "StopPodSandbox", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return nil, r.StopPodSandbox(ctx(t), sb)
		}},
		{name: "RemovePodSandbox", call: func(r cri.RuntimeService, _ cri.ImageManagerService, sb, ctr string) (any, error) {
			return nil, r.RemovePodSandbox(ctx(t), sb)
		}},
	}
	ids := func(side int, s string) string {
		if sandboxIDs[side] != "" {
			s = strings.ReplaceAll(s, sandboxIDs[side], "<sandbox>")
		}
		if containerIDs[side] != "" {
			s = strings.ReplaceAll(s, containerIDs[side], "<container>")
		}
		return s
	}
	for _, o := range ops {
		var results, errs [2]string
		for side, svc := range []struct {
			rt  cri.RuntimeService
			img cri.ImageManagerService
		}{{p.remoteRT, p.remoteImg}, {p.localRT, p.localImg}} {
			v, err := o.call(svc.rt, svc.img, sandboxIDs[side], containerIDs[side])
			if o.keep != nil {
				if err != nil {
					t.Fatalf("%s (side %d): %v", o.name, side, err)
				}
				o.keep(side, v)
			}
			results[side], errs[side] = ids(side, canon(t, v)), ids(side, canonErr(err))
		}
		if errs[1] != errs[0] {
			t.Errorf("%s: error in process %s, over the socket %s", o.name, errs[1], errs[0])
		}
		if results[1] != results[0] {
			t.Errorf("%s: in process answered %s, over the socket %s", o.name, results[1], results[0])
		}
	}
	for _, method := range []string{"Version", "RunPodSandbox", "ExecSync", "PullImage"} {
		// cri-client's connection check adds a Version call.
		want := p.remote.Calls(method)
		if method == "Version" {
			want--
		}
		if got := p.local.Calls(method); got != want {
			t.Errorf("Calls(%s): %d in process, %d over the socket", method, got, want)
		}
	}
}

// TestInProcessFaultsMatchTheSocket: SetError faults reach an in-process
// caller as they reach cri-client over the socket.
func TestInProcessFaultsMatchTheSocket(t *testing.T) {
	p := newCRIPair(t)
	for _, s := range []*fakecri.Server{p.remote, p.local} {
		if err := s.SetError("Status", status.Error(codes.Unavailable, "injected")); err != nil {
			t.Fatal(err)
		}
		if err := s.SetError("PullImage", errors.New("disk full")); err != nil {
			t.Fatal(err)
		}
		if err := s.SetError("ListContainers", fmt.Errorf("wrapped: %w", context.DeadlineExceeded)); err != nil {
			t.Fatal(err)
		}
		if err := s.SetUnimplemented("GetContainerEvents"); err != nil {
			t.Fatal(err)
		}
	}
	calls := map[string]func(cri.RuntimeService, cri.ImageManagerService) error{
		"Status": func(r cri.RuntimeService, _ cri.ImageManagerService) error {
			_, err := r.Status(ctx(t), false)
			return err
		},
		// cri-client reports a codes.Unknown pull failure by its message.
		"PullImage": func(_ cri.RuntimeService, i cri.ImageManagerService) error {
			_, err := i.PullImage(ctx(t), &runtimeapi.ImageSpec{Image: "busybox"}, nil, nil)
			return err
		},
		"ListContainers": func(r cri.RuntimeService, _ cri.ImageManagerService) error {
			_, err := r.ListContainers(ctx(t), nil)
			return err
		},
		"GetContainerEvents": func(r cri.RuntimeService, _ cri.ImageManagerService) error {
			return r.GetContainerEvents(ctx(t), make(chan *runtimeapi.ContainerEventResponse), nil)
		},
	}
	for name, call := range calls {
		remote, local := call(p.remoteRT, p.remoteImg), call(p.localRT, p.localImg)
		if remote == nil || canonErr(local) != canonErr(remote) {
			t.Errorf("%s: error in process %s, over the socket %s", name, canonErr(local), canonErr(remote))
		}
	}
}

// TestInProcessCopies: neither side of an in-process call keeps memory of
// the other's, as over a wire.
func TestInProcessCopies(t *testing.T) {
	s := fakecri.New(fakecri.Options{})
	rt, _ := s.InProcess()
	cfg := sandboxConfig("copy", nil)
	id, err := rt.RunPodSandbox(ctx(t), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metadata.Name = "changed by the caller"
	st, err := rt.PodSandboxStatus(ctx(t), id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Status.Metadata.Name; got != "copy" {
		t.Fatalf("sandbox name %q after the caller changed its request, want copy", got)
	}
	st.Status.Labels["io.kubernetes.pod.uid"] = "changed by the caller"
	again, err := rt.PodSandboxStatus(ctx(t), id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Status.Labels["io.kubernetes.pod.uid"]; got != "uid-copy" {
		t.Fatalf("sandbox label %q after the caller changed a reply, want uid-copy", got)
	}
}

// TestInProcessContextAndClose: a call whose context is done fails with
// the context's code, as gRPC reports it; after Close calls fail with
// codes.Canceled and open event streams end.
func TestInProcessContextAndClose(t *testing.T) {
	s := fakecri.New(fakecri.Options{})
	rt, img := s.InProcess()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rt.Version(canceled, "0.1.0")
	wantCode(t, err, codes.Canceled)
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	_, err = img.ListImages(expired, nil)
	wantCode(t, err, codes.DeadlineExceeded)
	if n := s.Calls("Version"); n != 0 {
		t.Errorf("a call with a done context reached the fake (%d Version calls)", n)
	}

	ended := make(chan error, 1)
	established := make(chan struct{})
	go func() {
		ended <- rt.GetContainerEvents(ctx(t), make(chan *runtimeapi.ContainerEventResponse), func(runtimeapi.RuntimeService_GetContainerEventsClient) {
			close(established)
		})
	}()
	<-established
	if n := s.EventStreams(); n != 1 {
		t.Fatalf("%d event streams open, want 1", n)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantCode(t, <-ended, codes.Canceled)
	if n := s.EventStreams(); n != 0 {
		t.Errorf("%d event streams open after Close, want 0", n)
	}
	_, err = rt.Status(ctx(t), false)
	wantCode(t, err, codes.Canceled)
	if _, err := img.ImageFsInfo(ctx(t)); err != nil {
		t.Errorf("the image service, not closed, failed: %v", err)
	}
	if err := img.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = img.ImageFsInfo(ctx(t))
	wantCode(t, err, codes.Canceled)
}

// TestInProcessEventsAndTimeouts: GetContainerEvents streams copies of the
// fake's events into the caller's channel after the connection callback,
// and an ExecSync that outlives its timeout fails as cri-client reports
// it.
func TestInProcessEventsAndTimeouts(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := fakecri.New(fakecri.Options{Clock: clk})
	s.AddImage(mustImage(t, "busybox", 1000))
	s.SetExecHandler(func(fakecri.ExecRequest) fakecri.ExecResult { return fakecri.ExecResult{Delay: time.Minute} })
	rt, _ := s.InProcess()
	t.Cleanup(func() { rt.Close(context.Background()) }) //nolint:errcheck // never fails
	events := make(chan *runtimeapi.ContainerEventResponse, 10)
	established := make(chan runtimeapi.RuntimeService_GetContainerEventsClient, 1)
	streamCtx, stop := context.WithCancel(ctx(t))
	ended := make(chan error, 1)
	go func() {
		ended <- rt.GetContainerEvents(streamCtx, events, func(c runtimeapi.RuntimeService_GetContainerEventsClient) { established <- c })
	}()
	if stream := <-established; stream.Context() != streamCtx {
		t.Error("the stream handed to the callback does not carry the call's context")
	}
	cfg := sandboxConfig("ev", nil)
	sb, err := rt.RunPodSandbox(ctx(t), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []runtimeapi.ContainerEventType
	for _, want := range []runtimeapi.ContainerEventType{runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT} {
		ev := <-events
		got = append(got, ev.ContainerEventType)
		if ev.ContainerEventType != want || ev.ContainerId != sb || ev.PodSandboxStatus.GetMetadata().GetName() != "ev" {
			t.Fatalf("events %v (last %v), want CREATED then STARTED for sandbox %s", got, ev, sb)
		}
	}
	id, err := rt.CreateContainer(ctx(t), sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	execDone := make(chan error, 1)
	go func() {
		_, _, err := rt.ExecSync(ctx(t), id, []string{"hang"}, 2*time.Second)
		execDone <- err
	}()
	for !clk.HasWaiters() {
		select {
		case err := <-execDone:
			t.Fatalf("ExecSync returned before its timeout: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	clk.Step(2 * time.Second)
	if err := <-execDone; !errors.Is(err, criclient.ErrCommandTimedOut) {
		t.Errorf("ExecSync past its timeout: %v, want cri-client's ErrCommandTimedOut", err)
	}
	stop()
	wantCode(t, <-ended, codes.Canceled)
	if s.DroppedEvents() != 0 {
		t.Errorf("%d events dropped", s.DroppedEvents())
	}
}

// TestEventStreamDropsBeyondItsBuffer: a stream that does not keep up holds
// at most EventBuffer events (and the one its reader took and is sending);
// later events are dropped and counted, and those kept arrive in order.
func TestEventStreamDropsBeyondItsBuffer(t *testing.T) {
	const buffer = 2
	s := fakecri.New(fakecri.Options{EventBuffer: buffer})
	rt, _ := s.InProcess()
	t.Cleanup(func() { rt.Close(context.Background()) })    //nolint:errcheck // never fails
	events := make(chan *runtimeapi.ContainerEventResponse) // not read until every event was sent
	established := make(chan struct{})
	streamCtx, stop := context.WithCancel(ctx(t))
	ended := make(chan error, 1)
	go func() {
		ended <- rt.GetContainerEvents(streamCtx, events, func(runtimeapi.RuntimeService_GetContainerEventsClient) { close(established) })
	}()
	<-established
	var sent []string // sandbox ID and event type, in order
	for _, name := range []string{"a", "b", "c"} {
		sb, err := rt.RunPodSandbox(ctx(t), sandboxConfig(name, nil), "")
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, sb+" CREATED", sb+" STARTED")
	}
	var got []string
	for len(got)+s.DroppedEvents() < len(sent) {
		select {
		case ev := <-events:
			got = append(got, ev.ContainerId+" "+strings.TrimSuffix(strings.TrimPrefix(ev.ContainerEventType.String(), "CONTAINER_"), "_EVENT"))
		case <-time.After(10 * time.Second):
			t.Fatalf("received %q and %d dropped of %d sent", got, s.DroppedEvents(), len(sent))
		}
	}
	if len(got) > buffer+1 || len(got)+s.DroppedEvents() != len(sent) {
		t.Errorf("received %d events, %d dropped, of %d sent: want at most %d received (the buffer and the one being sent), the rest dropped", len(got), s.DroppedEvents(), len(sent), buffer+1)
	}
	// What arrived is in the order sent.
	i := 0
	for _, ev := range got {
		for i < len(sent) && sent[i] != ev {
			i++
		}
		if i == len(sent) {
			t.Fatalf("received %q, not a subsequence of %q", got, sent)
		}
		i++
	}
	stop()
	wantCode(t, <-ended, codes.Canceled)
}
