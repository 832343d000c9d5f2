package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/portforward"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apimachinery/pkg/util/remotecommand"
	clientportforward "k8s.io/client-go/tools/portforward"
	clientremotecommand "k8s.io/client-go/tools/remotecommand"
	clientspdy "k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// The node API speaks WebSockets for exec, attach and port-forward itself,
// as the kubelet with ExtendWebSocketsToKubelet (on by default since 1.36):
// a node that declares the feature in status.declaredFeatures gets the
// clients' WebSocket requests proxied unchanged by the API server, which
// otherwise translates them to SPDY. A CRI runtime's streaming server
// speaks SPDY (and the pre-v5 channel.k8s.io WebSockets, which pass
// through), so the server translates:
//
//   - exec and attach over v5.channel.k8s.io: the WebSocket channels
//     (stdin, stdout, stderr, error, resize; stdin closed by the v5 CLOSE
//     signal) are bridged to a SPDY remotecommand session with the
//     runtime, whose end is reported on the error channel as a
//     metav1.Status (Success, NonZeroExitCode with the exit code, or the
//     error);
//   - port-forward over SPDY/3.1+portforward.k8s.io: the client's SPDY
//     frames travel in WebSocket binary messages; they are tunneled as
//     they are to a SPDY upgrade of the runtime's port-forward URL.
//
// Each such request counts in kubelet_websocket_streaming_requests_total.

const (
	// wsIdleTimeout is the read/write deadline of a translated WebSocket,
	// the kubelet's and the API server's.
	wsIdleTimeout = 4 * time.Hour
	// wsStatusDeadline bounds writing the final status.
	wsStatusDeadline = 10 * time.Second
	// spdyPingPeriod keeps the SPDY session to the runtime alive.
	spdyPingPeriod = 5 * time.Second
)

// translateRemoteCommand serves a v5.channel.k8s.io WebSocket exec or
// attach request as a SPDY session with the runtime's streaming server at
// target.
func translateRemoteCommand(w http.ResponseWriter, r *http.Request, target *url.URL, o streamOptions) {
	logger := klog.FromContext(r.Context())
	channels := []wsstream.ChannelType{
		remotecommand.StreamStdIn:  channelIf(o.stdin, wsstream.ReadChannel),
		remotecommand.StreamStdOut: channelIf(o.stdout, wsstream.WriteChannel),
		remotecommand.StreamStdErr: channelIf(o.stderr, wsstream.WriteChannel),
		remotecommand.StreamErr:    wsstream.WriteChannel,
		remotecommand.StreamResize: wsstream.ReadChannel,
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		remotecommand.StreamProtocolV5Name: {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(wsIdleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		logger.V(2).Info("WebSocket upgrade failed", "err", err)
		return
	}
	defer func() { _ = conn.Close() }()
	// An empty message on the lowest writable channel tells the client the
	// session is up.
	first := remotecommand.StreamErr
	switch {
	case o.stdout:
		first = remotecommand.StreamStdOut
	case o.stderr:
		first = remotecommand.StreamStdErr
	}
	if _, err := streams[first].Write(nil); err != nil {
		logger.V(2).Info("WebSocket write failed", "err", err)
		return
	}
	writeStatus := func(st metav1.Status) {
		b, err := json.Marshal(st)
		if err != nil {
			return
		}
		conn.SetWriteDeadline(wsStatusDeadline)
		_, _ = streams[remotecommand.StreamErr].Write(b)
	}
	err = streamSPDY(r.Context(), target, streams, o)
	var statusErr *apierrors.StatusError
	var exitErr exec.CodeExitError
	switch {
	case err == nil:
		writeStatus(metav1.Status{Status: metav1.StatusSuccess})
	case errors.As(err, &statusErr):
		writeStatus(statusErr.Status())
	case errors.As(err, &exitErr) && exitErr.Exited():
		writeStatus(metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", exitErr),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type: remotecommand.ExitCodeCauseType, Message: fmt.Sprint(exitErr.ExitStatus()),
			}}},
		})
	default:
		writeStatus(apierrors.NewInternalError(err).Status())
	}
}

func channelIf(on bool, t wsstream.ChannelType) wsstream.ChannelType {
	if on {
		return t
	}
	return wsstream.IgnoreChannel
}

// streamSPDY runs a SPDY remotecommand session with target, wired to the
// WebSocket channels streams, until the command ends.
func streamSPDY(ctx context.Context, target *url.URL, streams []io.ReadWriteCloser, o streamOptions) error {
	rt, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{PingPeriod: spdyPingPeriod})
	if err != nil {
		return err
	}
	executor, err := clientremotecommand.NewSPDYExecutorRejectRedirects(rt, clientspdy.NewUpgraderForStreaming(rt), http.MethodPost, target)
	if err != nil {
		return err
	}
	opts := clientremotecommand.StreamOptions{Tty: o.tty}
	if o.stdin {
		opts.Stdin = streams[remotecommand.StreamStdIn]
	}
	if o.stdout {
		opts.Stdout = streams[remotecommand.StreamStdOut]
	}
	if o.stderr {
		opts.Stderr = streams[remotecommand.StreamStdErr]
	}
	if o.tty {
		sizes := make(chan clientremotecommand.TerminalSize)
		go decodeResizes(ctx, streams[remotecommand.StreamResize], sizes)
		opts.TerminalSizeQueue = sizeQueue(sizes)
	}
	return executor.StreamWithContext(ctx, opts)
}

// decodeResizes sends the JSON terminal sizes read from r to sizes until r
// ends or ctx is done, then closes sizes.
func decodeResizes(ctx context.Context, r io.Reader, sizes chan<- clientremotecommand.TerminalSize) {
	defer close(sizes)
	dec := json.NewDecoder(r)
	for {
		var size clientremotecommand.TerminalSize
		if err := dec.Decode(&size); err != nil {
			return
		}
		select {
		case sizes <- size:
		case <-ctx.Done():
			return
		}
	}
}

// sizeQueue is a TerminalSizeQueue on a channel; nil once it is closed.
type sizeQueue chan clientremotecommand.TerminalSize

func (q sizeQueue) Next() *clientremotecommand.TerminalSize {
	size, ok := <-q
	if !ok {
		return nil
	}
	return &size
}

// tunneledSPDYProtocols returns the SPDY protocols a tunneling WebSocket
// request offers (its SPDY/3.1+<protocol>.k8s.io subprotocols, prefix
// removed).
func tunneledSPDYProtocols(r *http.Request) []string {
	var out []string
	for _, p := range gwebsocket.Subprotocols(r) {
		if strings.HasPrefix(p, portforward.WebsocketsSPDYTunnelingPrefix) && strings.HasSuffix(p, portforward.KubernetesSuffix) {
			out = append(out, strings.TrimPrefix(p, portforward.WebsocketsSPDYTunnelingPrefix))
		}
	}
	return out
}

// tunnelPortForward serves a SPDY-over-WebSocket port-forward request: it
// upgrades the runtime's port-forward URL target to SPDY with the
// protocols the client offers, answers the WebSocket upgrade with the
// protocol the runtime chose, and copies the bytes both ways. A refused
// upgrade is relayed to the client as the runtime answered it.
func tunnelPortForward(w http.ResponseWriter, r *http.Request, target *url.URL) {
	logger := klog.FromContext(r.Context())
	protocols := tunneledSPDYProtocols(r)
	if len(protocols) == 0 {
		writeError(w, http.StatusBadRequest, "unable to upgrade: no tunneling spdy protocols provided")
		return
	}
	backend, err := proxy.DialURL(r.Context(), target, nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("dial the runtime's streaming server: %v", err))
		return
	}
	defer func() { _ = backend.Close() }()
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, target.String(), nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	req.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	req.Header.Set(httpstream.HeaderUpgrade, spdy.HeaderSpdy31)
	for _, p := range protocols {
		req.Header.Add(httpstream.HeaderProtocolVersion, p)
	}
	_ = backend.SetDeadline(time.Now().Add(wsStatusDeadline))
	if err := req.Write(backend); err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("upgrade the runtime's port-forward stream: %v", err))
		return
	}
	br := bufio.NewReader(backend)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("upgrade the runtime's port-forward stream: %v", err))
		return
	}
	_ = backend.SetDeadline(time.Time{})
	if resp.StatusCode != http.StatusSwitchingProtocols {
		logger.V(2).Info("Runtime refused the port-forward upgrade", "status", resp.Status)
		defer func() { _ = resp.Body.Close() }()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	if !headerHasToken(resp.Header, httpstream.HeaderConnection, httpstream.HeaderUpgrade) || !strings.EqualFold(resp.Header.Get(httpstream.HeaderUpgrade), spdy.HeaderSpdy31) {
		writeError(w, http.StatusInternalServerError, "unable to upgrade: missing upgrade headers in response")
		return
	}
	chosen := []string{}
	if p := strings.TrimSpace(resp.Header.Get(httpstream.HeaderProtocolVersion)); p != "" {
		chosen = []string{portforward.WebsocketsSPDYTunnelingPrefix + p}
	}
	upgrader := gwebsocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, Subprotocols: chosen}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		// The upgrader answered the client.
		logger.V(2).Info("WebSocket upgrade failed", "err", err)
		return
	}
	tunnel := clientportforward.NewTunnelingConnectionWithLogger(klog.LoggerWithName(logger, "server"), ws)
	defer func() { _ = tunnel.Close() }()
	pipe(tunnel, backend, br)
}

// pipe copies client → backend and backendR (backend's reader) → client
// until either side ends, then closes both.
func pipe(client net.Conn, backend net.Conn, backendR io.Reader) {
	var once sync.Once
	done := make(chan struct{})
	stop := func() {
		once.Do(func() {
			_ = client.Close()
			_ = backend.Close()
			close(done)
		})
	}
	go func() {
		_, _ = io.Copy(backend, client)
		stop()
	}()
	go func() {
		_, _ = io.Copy(client, backendR)
		stop()
	}()
	<-done
}
