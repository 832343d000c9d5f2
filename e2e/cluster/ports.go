package cluster

import (
	"fmt"
	"net"
	"strconv"
)

// FreePorts returns n distinct TCP ports that are free on ip right now, for
// a node process whose ports the caller sets (NewCommandAgent); see
// freePorts.
func FreePorts(ip string, n int) ([]int, error) { return freePorts(ip, n) }

// freePorts asks the kernel for n distinct TCP ports that are free on ip
// right now. Each listener stays open until all are chosen: closed at once,
// the kernel may hand the same port out again for the next one (CI saw an
// agent's healthz and API ports equal). Another process may take a port
// before the caller binds it; on a test machine this is rare enough not to
// matter.
func freePorts(ip string, n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", ip, err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// freePort is freePorts for one port.
func freePort(ip string) (int, error) {
	ports, err := freePorts(ip, 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
