package cluster

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := conn.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a line on conn and reads the answer within timeout.
func roundTrip(conn net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := conn.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func TestAPIProxyStates(t *testing.T) {
	p, err := newAPIProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := strings.TrimPrefix(p.URL, "https://")
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial the proxy (%s): %v", p.State(), err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn, bufio.NewReader(conn)
	}

	conn, r := dial()
	if got, err := roundTrip(conn, r, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("forwarding: got %q, %v", got, err)
	}

	// Hanging: an open connection stalls, a new one is accepted but
	// answered nothing; both go on once the proxy forwards again.
	if err := p.Set(ProxyHang); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(conn, r, "two", 300*time.Millisecond); err == nil {
		t.Fatal("a hanging proxy answered on an open connection")
	}
	held, heldR := dial()
	if _, err := roundTrip(held, heldR, "three", 300*time.Millisecond); err == nil {
		t.Fatal("a hanging proxy answered on a new connection")
	}
	if err := p.Set(ProxyForward); err != nil {
		t.Fatal(err)
	}
	// The stalled lines arrive first.
	for _, c := range []struct {
		conn net.Conn
		r    *bufio.Reader
		want string
	}{{conn, r, "two"}, {held, heldR, "three"}} {
		_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
		if got, err := c.r.ReadString('\n'); err != nil || strings.TrimSpace(got) != c.want {
			t.Fatalf("after the hang: got %q, %v, want %q", got, err, c.want)
		}
	}

	// Refusing: open connections are cut, new ones refused.
	if err := p.Set(ProxyRefuse); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(conn, r, "four", 5*time.Second); err == nil {
		t.Fatal("a connection survived the proxy refusing")
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatal("a refusing proxy accepted a connection")
	}
	if err := p.Set(ProxyForward); err != nil {
		t.Fatal(err)
	}
	conn, r = dial()
	if got, err := roundTrip(conn, r, "five", 5*time.Second); err != nil || got != "five" {
		t.Fatalf("forwarding again: got %q, %v", got, err)
	}
}
