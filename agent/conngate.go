package agent

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// connGate has the requests of a transport with no connection to the
// apiserver wait while one of them makes it. An http.Transport that has
// no connection yet dials one for each request that arrives before the
// first is up, since it cannot know yet that the server speaks HTTP/2,
// and once it does it keeps one and closes the others: an agent starting
// its watches, Lease and registration at once paid about four TLS
// handshakes to the apiserver for one connection, on both sides (a
// fleet's thousand agents starting at once, a thousand kubelets after an
// apiserver restart). With the gate the first request dials, and the
// others go on once it has its response (or failed): by then its
// connection is in the transport's pool, where they find it. None waits
// longer than connGateMaxWait, so a slow first answer (a large list) does
// not hold back a Lease renewal. Released
// when the connection is up (httptrace's GotConn) they would race the
// transport putting it there, and dial again. A transport that keeps a
// connection lets every request through at once, as before; over
// HTTP/1.1 the others then dial their own, as before.
type connGate struct {
	rt http.RoundTripper

	mu sync.Mutex
	// conns counts the connections dialed and not yet closed.
	conns int
	// dialing is closed once the request that found no connection has
	// its response, or failed; nil when no such request is under way.
	dialing chan struct{}
}

// dial is d, counting the connections it makes until they are closed.
func (g *connGate) dial(d func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := d(ctx, network, address)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.conns++
		g.mu.Unlock()
		return &countedConn{Conn: c, gate: g}, nil
	}
}

// connGateMaxWait bounds how long a request waits for the one making the
// connection to be answered; after it the request goes to the transport
// as it would without the gate. A variable for tests only.
var connGateMaxWait = time.Second

// RoundTrip sends req on g.rt once the transport has a connection, or
// makes the connection with req when there is none and no other request
// is making it. A request that waited checks again: if the one it waited
// for failed and left no connection, one of the waiting ones makes the
// next attempt. No request waits more than connGateMaxWait for another.
func (g *connGate) RoundTrip(req *http.Request) (*http.Response, error) {
	var bound <-chan time.Time
	g.mu.Lock()
	for g.dialing != nil {
		wait := g.dialing
		g.mu.Unlock()
		if bound == nil {
			t := time.NewTimer(connGateMaxWait)
			defer t.Stop()
			bound = t.C
		}
		select {
		case <-wait:
		case <-bound:
			// The first request is slow to be answered (a large list, an
			// API server still starting): its connection is likely up, and
			// this request must not wait on its answer (a Lease renewal
			// behind a list).
			return g.rt.RoundTrip(req)
		case <-req.Context().Done():
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, context.Cause(req.Context())
		}
		g.mu.Lock()
	}
	if g.conns > 0 {
		g.mu.Unlock()
		return g.rt.RoundTrip(req)
	}
	done := make(chan struct{})
	g.dialing = done
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.dialing = nil
		g.mu.Unlock()
		close(done)
	}()
	return g.rt.RoundTrip(req)
}

// WrappedRoundTripper is the transport the gate sends on, for client-go's
// helpers that reach it (utilnet.CloseIdleConnectionsFor).
func (g *connGate) WrappedRoundTripper() http.RoundTripper { return g.rt }

// countedConn is a connection of the gate's transport; closing it, once,
// takes it off the gate's count.
type countedConn struct {
	net.Conn
	gate *connGate
	once sync.Once
}

// Close closes the connection and takes it off the gate's count (once,
// however often it is called).
func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.gate.mu.Lock()
		c.gate.conns--
		c.gate.mu.Unlock()
	})
	return c.Conn.Close()
}
