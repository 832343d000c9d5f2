package cluster

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// Faults: what the reliability tests do to a node's processes and to its
// connection to the control plane.

// Kill SIGKILLs the agent and waits until it is gone, as a crash or the
// kernel's OOM killer ends it: none of its shutdown runs. Killing a stopped
// agent is a no-op.
func (a *Agent) Kill() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc != nil {
		a.proc.kill()
	}
}

// Signal sends sig to the running agent (SIGTERM, SIGPWR, …) and returns at
// once; WaitExit waits for it to end.
func (a *Agent) Signal(sig syscall.Signal) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil || a.proc.exited() {
		return fmt.Errorf("signal agent %s: not running", a.Name)
	}
	if err := a.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal agent %s: %w", a.Name, err)
	}
	return nil
}

// WaitExit waits up to timeout for the agent to exit and returns how it
// exited (nil for status 0). It does not signal the agent.
func (a *Agent) WaitExit(timeout time.Duration) error {
	a.mu.Lock()
	p := a.proc
	a.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		return fmt.Errorf("agent %s (pid %d) did not exit within %s", a.Name, p.pid(), timeout)
	}
	if p.waitErr != nil {
		return fmt.Errorf("agent %s (pid %d): %w", a.Name, p.pid(), p.waitErr)
	}
	return nil
}

// Pid returns the running agent's process id, 0 when it is not running.
func (a *Agent) Pid() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil || a.proc.exited() {
		return 0
	}
	return a.proc.pid()
}

// SetAPIServer points the agent's kubeconfig at server (an APIProxy's URL)
// instead of the apiserver. Call it before Start; the credentials stay the
// node's.
func (a *Agent) SetAPIServer(server string) error {
	cfg, err := clientcmd.LoadFromFile(a.Kubeconfig)
	if err != nil {
		return fmt.Errorf("agent %s: load kubeconfig: %w", a.Name, err)
	}
	for _, cluster := range cfg.Clusters {
		cluster.Server = server
	}
	if err := clientcmd.WriteToFile(*cfg, a.Kubeconfig); err != nil {
		return fmt.Errorf("agent %s: write kubeconfig: %w", a.Name, err)
	}
	return nil
}

// Freeze stops the containerd daemon with SIGSTOP: it keeps its socket and
// connections but answers nothing, as a hung runtime. Its shims and
// containers keep running. Thaw resumes it.
func (c *Containerd) Freeze() error { return c.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen daemon with SIGCONT.
func (c *Containerd) Thaw() error { return c.signal(syscall.SIGCONT) }

func (c *Containerd) signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.exited() {
		return fmt.Errorf("signal containerd at %s: not running", c.Endpoint)
	}
	if err := c.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal containerd at %s: %w", c.Endpoint, err)
	}
	return nil
}

// APIProxy is a TCP proxy between one node's agent and the apiserver
// (Agent.SetAPIServer points the agent at it). It cuts that node off the
// control plane without touching the apiserver every other test shares. TLS
// passes through untouched: the agent still authenticates to the apiserver
// with its own certificate, and the apiserver's certificate (valid for
// 127.0.0.1) still verifies. Its methods are safe for concurrent use.
type APIProxy struct {
	// URL is what the agent's kubeconfig points at: https://127.0.0.1:<port>.
	URL string

	addr, upstream string

	mu    sync.Mutex
	state ProxyState
	ln    net.Listener
	conns map[net.Conn]struct{}
	// open is closed while the proxy forwards; a new channel replaces it
	// when the proxy hangs, so that connections wait on it.
	open   chan struct{}
	closed bool
	wg     sync.WaitGroup
}

// ProxyState is what an APIProxy does with the node's traffic.
type ProxyState int

const (
	// ProxyForward passes every connection through.
	ProxyForward ProxyState = iota
	// ProxyRefuse is an apiserver that is down: nothing listens on the
	// port (connections are refused) and open connections are reset.
	ProxyRefuse
	// ProxyHang is an apiserver that hangs (or a network that drops
	// everything): connections are accepted, nothing is answered, open
	// connections stall; all resume when the proxy forwards again.
	ProxyHang
)

func (s ProxyState) String() string {
	switch s {
	case ProxyForward:
		return "forward"
	case ProxyRefuse:
		return "refuse"
	case ProxyHang:
		return "hang"
	}
	return "unknown"
}

// NewAPIProxy starts a proxy to the apiserver on a free port of 127.0.0.1,
// forwarding. Close it when done.
func (c *ControlPlane) NewAPIProxy() (*APIProxy, error) {
	return newAPIProxy(strings.TrimPrefix(c.Server, "https://"))
}

// newAPIProxy starts a proxy to upstream (host:port).
func newAPIProxy(upstream string) (*APIProxy, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return nil, fmt.Errorf("api proxy: %w", err)
	}
	p := &APIProxy{
		URL: "https://" + ln.Addr().String(), addr: ln.Addr().String(), upstream: upstream,
		ln: ln, conns: map[net.Conn]struct{}{}, open: make(chan struct{}),
	}
	close(p.open)
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// State returns what the proxy does now.
func (p *APIProxy) State() ProxyState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Set changes what the proxy does (see ProxyState).
func (p *APIProxy) Set(state ProxyState) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("api proxy: closed")
	}
	if state == p.state {
		return nil
	}
	// Leave the old state.
	switch p.state {
	case ProxyRefuse:
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return fmt.Errorf("api proxy: listen again on %s: %w", p.addr, err)
		}
		p.ln = ln
		p.wg.Add(1)
		go p.accept(ln)
	case ProxyHang:
		close(p.open)
	}
	// Enter the new one.
	switch state {
	case ProxyRefuse:
		p.ln.Close()
		p.ln = nil
		for conn := range p.conns {
			if tcp, ok := conn.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0) // reset, as a dead peer's kernel does
			}
			conn.Close()
		}
	case ProxyHang:
		p.open = make(chan struct{})
	}
	p.state = state
	return nil
}

// Close stops the proxy and closes every connection.
func (p *APIProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.ln != nil {
		p.ln.Close()
	}
	if p.state == ProxyHang {
		close(p.open)
	}
	for conn := range p.conns {
		conn.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *APIProxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		if !p.track(conn) {
			conn.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(conn)
	}
}

// track registers conn; false when the proxy no longer takes connections.
func (p *APIProxy) track(conn net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.state == ProxyRefuse {
		return false
	}
	p.conns[conn] = struct{}{}
	return true
}

func (p *APIProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
		c.Close()
	}
}

// gate blocks while the proxy hangs and reports whether to go on.
func (p *APIProxy) gate() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	<-open
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && p.state != ProxyRefuse
}

func (p *APIProxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.gate() {
		p.untrack(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server) {
		server.Close()
		p.untrack(client)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client) })
	wg.Go(func() { p.pipe(client, server) })
	wg.Wait()
	p.untrack(client, server)
}

// pipe copies src to dst, holding each chunk while the proxy hangs, until
// either side closes; then it closes both so the other direction ends too.
func (p *APIProxy) pipe(dst, src net.Conn) {
	defer func() {
		dst.Close()
		src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
