//go:build !unix

package prober

import "net"

// probeDialer returns a plain dialer without keep-alives: the socket option
// the kubelet sets on Unix is not set here.
func probeDialer() *net.Dialer { return &net.Dialer{KeepAlive: -1} }
