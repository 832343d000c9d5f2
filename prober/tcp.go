package prober

import (
	"context"
	"net"
	"strconv"

	"k8s.io/klog/v2"
)

type tcpHandler struct{}

// NewTCPHandler returns the default tcpSocket handler, the kubelet's: a TCP
// connection to host:port (host the pod IP unless set, port by number or by
// the name of one of the container's ports) opened within the probe's
// timeout and closed at once is Success; failing to open one is Failure
// with the dial error as output.
func NewTCPHandler() Handler { return tcpHandler{} }

// Kind returns KindTCPSocket.
func (tcpHandler) Kind() Kind { return KindTCPSocket }

// Probe runs t's tcpSocket probe.
func (tcpHandler) Probe(ctx context.Context, t *Target) (Result, string, error) {
	port, err := resolvePort(t.Probe.TCPSocket.Port, t.Container)
	if err != nil {
		return Unknown, "", err
	}
	host := t.Probe.TCPSocket.Host
	if host == "" {
		host = t.PodIP
	}
	d := probeDialer()
	d.Timeout = t.Timeout
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return Failure, err.Error(), nil
	}
	if err := conn.Close(); err != nil {
		klog.FromContext(ctx).Error(err, "Unexpected error closing TCP probe socket")
	}
	return Success, "", nil
}
