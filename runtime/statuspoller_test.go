package runtime_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestStatusPollerPublishesHealthWithVersion: the runtime's first health
// answer is not visible before its version is: a node status computed in
// between would report a Ready runtime of version "Unknown://Unknown".
func TestStatusPollerPublishesHealthWithVersion(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	srv.SetVersion("containerd", "1.6.20")
	var armed atomic.Bool
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	srv.SetReplyRewriter(func(method string, _ any, reply proto.Message) (proto.Message, error) {
		if method == "Version" && armed.Load() {
			select {
			case asked <- struct{}{}:
			default:
			}
			<-release
		}
		return reply, nil
	})
	endpoint, _ := serve(t, srv, socketPath(t))
	client := newClient(t, runtime.Options{Endpoint: endpoint})
	ctx, cancel := context.WithCancel(context.Background())
	// Connect (the client validates the API with a Version call) before
	// holding Version back.
	if h := client.Health(ctx); h.RuntimeErr != nil {
		t.Fatal(h.RuntimeErr)
	}
	armed.Store(true)
	p := runtime.NewStatusPoller(client, runtime.StatusPollerOptions{})
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() {
		releaseOnce.Do(func() { close(release) })
		cancel()
		<-done
	})

	select {
	case <-asked:
	case <-time.After(20 * time.Second):
		t.Fatal("the poller did not ask for the version")
	}
	if runtimeErr, _ := p.Health(ctx); runtimeErr == nil {
		name, ver, err := p.Version(ctx)
		t.Fatalf("the runtime is reported healthy while its version is %q %q %v", name, ver, err)
	}
	releaseOnce.Do(func() { close(release) })
	poll(t, func() bool { runtimeErr, _ := p.Health(ctx); return runtimeErr == nil })
	if name, ver, err := p.Version(ctx); err != nil || name != "containerd" || ver != "1.6.20" {
		t.Errorf("Version = %q, %q, %v once healthy; want containerd 1.6.20", name, ver, err)
	}
}

// TestStatusPollerChanges: Changes fires when the runtime's health changes
// after its first answer (which is not a change): DownThreshold after the
// last answer of a runtime that stopped answering, and again when it
// answers.
func TestStatusPollerChanges(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	var down atomic.Bool
	srv.SetReplyRewriter(func(method string, _ any, reply proto.Message) (proto.Message, error) {
		if method == "Status" && down.Load() {
			return nil, status.Error(codes.Unavailable, "frozen")
		}
		return reply, nil
	})
	endpoint, _ := serve(t, srv, socketPath(t))
	client := newClient(t, runtime.Options{Endpoint: endpoint})
	clk := clocktesting.NewFakeClock(time.Now())
	p := runtime.NewStatusPoller(client, runtime.StatusPollerOptions{Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	healthy := func() bool { runtimeErr, _ := p.Health(ctx); return runtimeErr == nil }
	noChange := func(when string) {
		t.Helper()
		select {
		case <-p.Changes():
			t.Fatalf("Changes fired %s", when)
		case <-time.After(200 * time.Millisecond):
		}
	}

	poll(t, func() bool { clk.Step(0); return healthy() })
	noChange("at the runtime's first answer")

	// The runtime stops answering: nothing changes until DownThreshold
	// has passed since its last answer.
	down.Store(true)
	answeredAt := clk.Now()
	clk.Step(runtime.DefaultStatusPeriod)
	noChange("while the runtime has missed one status call")
	clk.SetTime(answeredAt.Add(runtime.DefaultDownThreshold))
	noChange("at DownThreshold exactly")
	clk.Step(time.Millisecond)
	select {
	case <-p.Changes():
	case <-time.After(20 * time.Second):
		t.Fatal("Changes did not fire once DownThreshold passed without an answer")
	}
	if runtimeErr, _ := p.Health(ctx); runtimeErr == nil || !strings.Contains(runtimeErr.Error(), "container runtime is down") {
		t.Fatalf("Health = %v once DownThreshold passed, want container runtime is down", runtimeErr)
	}

	// It answers again at the next status call.
	down.Store(false)
	poll(t, func() bool { clk.Step(runtime.DefaultStatusPeriod); return healthy() })
	select {
	case <-p.Changes():
	case <-time.After(20 * time.Second):
		t.Fatal("Changes did not fire when the runtime answered again")
	}
}

// TestStatusPollerWaitsForASlowRuntime: a Status answer that takes longer
// than the status period (a runtime slow under load) is waited for, up to
// the client's request timeout (runtimeRequestTimeout), as the kubelet's:
// the runtime is healthy, not down.
func TestStatusPollerWaitsForASlowRuntime(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	var slow atomic.Bool
	srv.SetReplyRewriter(func(method string, _ any, reply proto.Message) (proto.Message, error) {
		if method == "Status" && slow.Load() {
			time.Sleep(runtime.DefaultStatusPeriod + 500*time.Millisecond)
		}
		return reply, nil
	})
	endpoint, _ := serve(t, srv, socketPath(t))
	client := newClient(t, runtime.Options{Endpoint: endpoint})
	ctx, cancel := context.WithCancel(context.Background())
	if h := client.Health(ctx); h.RuntimeErr != nil {
		t.Fatal(h.RuntimeErr)
	}
	slow.Store(true)
	p := runtime.NewStatusPoller(client, runtime.StatusPollerOptions{})
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	var runtimeErr error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if runtimeErr, _ = p.Health(ctx); runtimeErr == nil || runtimeErr.Error() != "container runtime status check may not have completed yet" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if runtimeErr != nil {
		t.Fatalf("Health = %v after a Status answer that took longer than the status period, want healthy", runtimeErr)
	}
}

// TestStatusPollerBeforeTheFirstAnswer: before the runtime answered, the
// poller reports no images, handlers or features and no error (the node
// status setters have nothing to report, which is not a failure: it was an
// error line per setter at every start), while Health says the status
// check may not have completed, the Ready condition's message.
func TestStatusPollerBeforeTheFirstAnswer(t *testing.T) {
	srv := fakecri.New(fakecri.Options{})
	endpoint, _ := serve(t, srv, socketPath(t))
	p := runtime.NewStatusPoller(newClient(t, runtime.Options{Endpoint: endpoint}), runtime.StatusPollerOptions{})
	ctx := context.Background()
	if images, err := p.Images(ctx); images != nil || err != nil {
		t.Errorf("Images = %v, %v before the first listing, want none and no error", images, err)
	}
	if handlers, err := p.Handlers(ctx); handlers != nil || err != nil {
		t.Errorf("Handlers = %v, %v before the first answer, want none and no error", handlers, err)
	}
	if features, err := p.Features(ctx); features != nil || err != nil {
		t.Errorf("Features = %v, %v before the first answer, want none and no error", features, err)
	}
	if runtimeErr, _ := p.Health(ctx); runtimeErr == nil || !strings.Contains(runtimeErr.Error(), "may not have completed yet") {
		t.Errorf("Health = %v before the first answer, want the status check not completed", runtimeErr)
	}
}
