//go:build unix

package prober

import (
	"net"
	"syscall"
)

// probeDialer returns a dialer whose sockets linger at most 1 s after close
// (SO_LINGER), so probes leave no sockets in TIME-WAIT for the OS default of
// 60 s, as the kubelet's probe.ProbeDialer (kubernetes issue 89898). Unlike
// it, no TCP keep-alive is set up: a probe's connection lives for its
// timeout at most, far less than a keep-alive's idle time, so it would
// never send one; that saves three system calls per connection.
func probeDialer() *net.Dialer {
	return &net.Dialer{Control: lingerControl, KeepAlive: -1}
}

func lingerControl(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
	})
}
