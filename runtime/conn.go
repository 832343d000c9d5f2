package runtime

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// connectRetryInterval is how long a service waits after a failed handshake
// (the runtime accepted the connection but did not answer the version or
// image filesystem check) before it tries again. Calls in between fail with
// the handshake's error. cri-client does not close the gRPC connection of a
// failed handshake, so pacing the attempts bounds what a misbehaving runtime
// can make the agent leak. A runtime whose socket refuses connections is not
// paced: that check is a plain dial and leaks nothing.
const connectRetryInterval = time.Second

// closer is what both CRI service interfaces have in common.
type closer interface {
	Close(ctx context.Context) error
}

// lazyConn connects a cri-client service on first use and keeps it. While it
// is not connected every use tries again; once cri-client holds a gRPC
// connection, gRPC reconnects by itself when the runtime restarts. It is safe
// for concurrent use; at most one connection attempt runs at a time.
type lazyConn[S closer] struct {
	kind     string // "runtime service" or "image service", for messages
	endpoint string
	addr     string
	dial     func(ctx context.Context, addr string) (net.Conn, error)
	timeout  time.Duration
	build    func(ctx context.Context) (S, error)
	clock    clock.Clock
	metrics  *metrics

	attempt chan struct{} // one slot: held while connecting

	mu        sync.Mutex
	svc       S
	connected bool
	closed    bool
	lastErr   error     // the last failed handshake
	retryAt   time.Time // no handshake before this time
}

// newConn returns the connection to one CRI service (kind is "runtime" or
// "image") and the endpoint it names: connected from the start when inproc,
// an in-process service (Options.RuntimeService or ImageService), is set —
// no dial, no handshake, closed by close as a connection is — otherwise a
// lazy connection to endpoint, normalized, that build makes on first use.
func newConn[S closer](kind, endpoint string, inproc S, timeout time.Duration, clk clock.Clock, m *metrics,
	build func(ctx context.Context, endpoint string) (S, error)) (*lazyConn[S], string, error) {
	if any(inproc) != nil {
		return &lazyConn[S]{kind: kind + " service", endpoint: endpoint, clock: clk, metrics: m, svc: inproc, connected: true}, endpoint, nil
	}
	endpoint, addr, dial, err := parseEndpoint(kind, endpoint)
	if err != nil {
		return nil, "", err
	}
	return &lazyConn[S]{
		kind: kind + " service", endpoint: endpoint, addr: addr, dial: dial,
		timeout: timeout, clock: clk, metrics: m,
		attempt: make(chan struct{}, 1),
		build:   func(ctx context.Context) (S, error) { return build(ctx, endpoint) },
	}, endpoint, nil
}

// get returns the connected service, connecting first if needed. It blocks
// at most until ctx is done or the connection timeout elapses.
func (l *lazyConn[S]) get(ctx context.Context) (S, error) {
	if svc, ok, err := l.current(); ok || err != nil {
		return svc, err
	}
	var zero S
	select {
	case l.attempt <- struct{}{}:
	case <-ctx.Done():
		return zero, l.wrap(ctx.Err())
	}
	defer func() { <-l.attempt }()
	// Another caller may have connected (or failed) while this one waited.
	if svc, ok, err := l.current(); ok || err != nil {
		return svc, err
	}
	if err := l.probe(ctx); err != nil {
		return zero, l.wrap(err)
	}
	svc, err := l.build(ctx)
	if err != nil {
		err = l.wrap(err)
		l.mu.Lock()
		l.lastErr, l.retryAt = err, l.clock.Now().Add(connectRetryInterval)
		l.mu.Unlock()
		return zero, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = svc.Close(ctx)
		return zero, ErrClosed
	}
	l.svc, l.connected, l.lastErr = svc, true, nil
	l.mu.Unlock()
	klog.FromContext(ctx).Info("Connected to container runtime", "service", l.kind, "endpoint", l.endpoint)
	return svc, nil
}

// current returns the service if connected (ok), or the error a caller gets
// without trying to connect: ErrClosed, or the last handshake error while
// retries are paced.
func (l *lazyConn[S]) current() (svc S, ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return svc, false, ErrClosed
	case l.connected:
		return l.svc, true, nil
	case l.lastErr != nil && l.clock.Now().Before(l.retryAt):
		return svc, false, l.lastErr
	}
	return svc, false, nil
}

// probe checks that the runtime accepts connections on its socket before
// cri-client is asked to build a client (see connectRetryInterval).
func (l *lazyConn[S]) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	conn, err := l.dial(ctx, l.addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

func (l *lazyConn[S]) wrap(err error) error {
	return fmt.Errorf("connect to container %s at %s: %w", l.kind, l.endpoint, err)
}

// close closes the connection, if any; later uses fail with ErrClosed. It is
// idempotent.
func (l *lazyConn[S]) close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if !l.connected {
		return nil
	}
	l.connected = false
	if err := l.svc.Close(ctx); err != nil {
		return fmt.Errorf("close container %s connection to %s: %w", l.kind, l.endpoint, err)
	}
	return nil
}

// call runs f on the connected service of l, connecting first if needed, and
// records the CRI operation op in the metrics.
func call[S closer, T any](ctx context.Context, l *lazyConn[S], op string, f func(S) (T, error)) (T, error) {
	start := l.clock.Now()
	var out T
	svc, err := l.get(ctx)
	if err == nil {
		out, err = f(svc)
	}
	l.metrics.record(op, l.clock.Since(start), err)
	return out, err
}

// callErr is call for operations that return only an error.
func callErr[S closer](ctx context.Context, l *lazyConn[S], op string, f func(S) error) error {
	_, err := call(ctx, l, op, func(s S) (struct{}, error) { return struct{}{}, f(s) })
	return err
}
