package runtime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

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
