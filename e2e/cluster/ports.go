package cluster

import (
	"fmt"
	"net"
	"strconv"
)

// FreePort returns a TCP port that is free on ip right now, for a node
// process whose ports the caller sets (NewCommandAgent); see freePort.
func FreePort(ip string) (int, error) { return freePort(ip) }

// freePort asks the kernel for a TCP port that is free on ip right now.
// Another process may take it before the caller binds it; on a test machine
// this is rare enough not to matter.
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
