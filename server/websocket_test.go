package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/cri-streaming/pkg/streaming"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	"github.com/nodekit/nodekit/features"
)

// criStreams is the container side of the CRI streaming server in these
// tests: exec echoes its command and stdin (and fails with exit code 3
// for "fail"), a TTY exec reports the first terminal size, attach echoes
// stdin, and port-forward answers "port <n>: " and echoes.
type criStreams struct{}

func (criStreams) Exec(_ context.Context, id string, cmd []string, in io.Reader, out, stderr io.WriteCloser, tty bool, resize <-chan remotecommandserver.TerminalSize) error {
	if tty {
		size := <-resize
		_, _ = fmt.Fprintf(out, "%s tty %dx%d", id, size.Width, size.Height)
		return nil
	}
	var data []byte
	if in != nil {
		data, _ = io.ReadAll(in)
	}
	_, _ = fmt.Fprintf(out, "%s ran %s: %s", id, strings.Join(cmd, " "), data)
	if stderr != nil {
		_, _ = fmt.Fprint(stderr, "to stderr")
	}
	if cmd[0] == "fail" {
		return utilexec.CodeExitError{Err: errors.New("exit status 3"), Code: 3}
	}
	return nil
}

func (criStreams) Attach(_ context.Context, id string, in io.Reader, out, _ io.WriteCloser, _ bool, _ <-chan remotecommandserver.TerminalSize) error {
	data, _ := io.ReadAll(in)
	_, _ = fmt.Fprintf(out, "attached to %s: %s", id, data)
	return nil
}

func (criStreams) PortForward(_ context.Context, sandbox string, port int32, stream io.ReadWriteCloser) error {
	defer func() { _ = stream.Close() }()
	_, _ = fmt.Fprintf(stream, "%s port %d: ", sandbox, port)
	_, err := io.Copy(stream, stream)
	return err
}

type wsHarness struct {
	srv *httptest.Server
	reg *prometheus.Registry
}

// newWSHarness serves the node API with a runtime whose streaming server
// is k8s.io/cri-streaming's (what CRI runtimes embed), speaking SPDY.
func newWSHarness(t *testing.T) *wsHarness {
	t.Helper()
	return newWSHarnessWith(t, nil)
}

// newWSHarnessWith is newWSHarness with the server's feature gates.
func newWSHarnessWith(t *testing.T, gates *features.Gates) *wsHarness {
	t.Helper()
	criSrv := httptest.NewUnstartedServer(nil)
	base, _ := url.Parse("http://" + criSrv.Listener.Addr().String())
	cfg := streaming.DefaultConfig
	cfg.BaseURL = base
	cri, err := streaming.NewServer(cfg, criStreams{})
	if err != nil {
		t.Fatal(err)
	}
	criSrv.Config.Handler = cri
	criSrv.Start()
	t.Cleanup(criSrv.Close)

	rt := &fakeRuntime{cri: cri}
	pod := testPod("default", "web", "app")
	rt.addPod(pod, 1)
	h := &wsHarness{reg: prometheus.NewRegistry()}
	o := baseOptions(pod)
	o.Runtime = rt
	o.Registerer = h.reg
	o.Features = gates
	h.srv = httptest.NewServer(mustNew(t, o).Handler())
	t.Cleanup(h.srv.Close)
	return h
}

func (h *wsHarness) websocketRequests(subresource string) float64 {
	mfs, _ := h.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "kubelet_websocket_streaming_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == subresource {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// execV5 runs target over v5.channel.k8s.io only (no fallback), as
// kubectl does against a node that declares ExtendWebSocketsToKubelet.
func (h *wsHarness) execV5(t *testing.T, target string, opts remotecommand.StreamOptions) error {
	t.Helper()
	ex, err := remotecommand.NewWebSocketExecutorForProtocols(&rest.Config{Host: h.srv.URL}, "GET", h.srv.URL+target, "v5.channel.k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ex.StreamWithContext(ctx, opts)
}

func TestWebSocketExecTranslated(t *testing.T) {
	h := newWSHarness(t)
	var stdout, stderr bytes.Buffer
	err := h.execV5(t, "/exec/default/web/app?command=cat&command=-n&input=1&output=1&error=1", remotecommand.StreamOptions{
		Stdin: strings.NewReader("hello over websockets"), Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	// Stdin reached the command and was closed (v5's CLOSE signal), so it
	// read to the end.
	if got, want := stdout.String(), "web-app ran cat -n: hello over websockets"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if stderr.String() != "to stderr" {
		t.Errorf("stderr %q", stderr.String())
	}

	// A non-zero exit reaches the client as the exit code, through the
	// error channel's NonZeroExitCode status.
	stdout.Reset()
	err = h.execV5(t, "/exec/default/web/app?command=fail&output=1", remotecommand.StreamOptions{Stdout: &stdout})
	var exitErr exec.CodeExitError
	if !errors.As(err, &exitErr) || exitErr.Code != 3 {
		t.Errorf("failing exec: %v (%T), want exit code 3", err, err)
	}
	if stdout.String() != "web-app ran fail: " {
		t.Errorf("failing exec stdout %q", stdout.String())
	}

	// A TTY session carries the terminal size through the resize channel.
	stdout.Reset()
	err = h.execV5(t, "/exec/default/web/app?command=sh&output=1&tty=1", remotecommand.StreamOptions{
		Stdout: &stdout, Tty: true, TerminalSizeQueue: &oneSize{size: &remotecommand.TerminalSize{Width: 120, Height: 40}},
	})
	if err != nil || stdout.String() != "web-app tty 120x40" {
		t.Errorf("tty exec: %q %v", stdout.String(), err)
	}
	if got := h.websocketRequests("exec"); got != 3 {
		t.Errorf("kubelet_websocket_streaming_requests_total{subresource=exec} = %v, want 3", got)
	}
}

// TestWebSocketsGateOff: with ExtendWebSocketsToKubelet off, as the
// kubelet's, a v5.channel.k8s.io exec is not translated (the runtime's
// streaming server, which speaks no v5, refuses it) and nothing is
// counted; SPDY clients are served as before.
func TestWebSocketsGateOff(t *testing.T) {
	gates, err := features.New(klog.Background(), map[string]bool{"ExtendWebSocketsToKubelet": false})
	if err != nil {
		t.Fatal(err)
	}
	h := newWSHarnessWith(t, gates)
	var stdout bytes.Buffer
	err = h.execV5(t, "/exec/default/web/app?command=cat&input=1&output=1", remotecommand.StreamOptions{
		Stdin: strings.NewReader("x"), Stdout: &stdout,
	})
	if err == nil {
		t.Errorf("v5 WebSocket exec with the gate off succeeded (%q); the kubelet does not translate it", stdout.String())
	}
	if got := h.websocketRequests("exec"); got != 0 {
		t.Errorf("kubelet_websocket_streaming_requests_total{subresource=exec} = %v, want 0", got)
	}
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{Host: h.srv.URL}, "POST", mustURL(t, h.srv.URL+"/exec/default/web/app?command=cat&input=1&output=1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdout.Reset()
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("spdy"), Stdout: &stdout}); err != nil || stdout.String() != "web-app ran cat: spdy" {
		t.Errorf("SPDY exec with the gate off: %q %v", stdout.String(), err)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

type oneSize struct{ size *remotecommand.TerminalSize }

func (q *oneSize) Next() *remotecommand.TerminalSize {
	s := q.size
	q.size = nil
	if s == nil {
		select {} // the session ends first
	}
	return s
}

func TestWebSocketAttachTranslated(t *testing.T) {
	h := newWSHarness(t)
	var stdout bytes.Buffer
	err := h.execV5(t, "/attach/default/web/app?input=1&output=1", remotecommand.StreamOptions{
		Stdin: strings.NewReader("typed"), Stdout: &stdout,
	})
	if err != nil || stdout.String() != "attached to web-app: typed" {
		t.Errorf("attach: %q %v", stdout.String(), err)
	}
	if got := h.websocketRequests("attach"); got != 1 {
		t.Errorf("kubelet_websocket_streaming_requests_total{subresource=attach} = %v, want 1", got)
	}
}

// TestWebSocketExecErrors: a request the node refuses before any upgrade
// is answered with the status, as for SPDY.
func TestWebSocketExecErrors(t *testing.T) {
	h := newWSHarness(t)
	err := h.execV5(t, "/exec/default/missing/app?command=sh&output=1", remotecommand.StreamOptions{Stdout: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("exec in a missing pod: %v, want a 404", err)
	}
	if got := h.websocketRequests("exec"); got != 0 {
		t.Errorf("refused request counted: %v", got)
	}
}

func TestWebSocketPortForwardTunneled(t *testing.T) {
	h := newWSHarness(t)
	u, _ := url.Parse(h.srv.URL + "/portForward/default/web")
	dialer, err := portforward.NewSPDYOverWebsocketDialer(u, &rest.Config{Host: h.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	var out, errOut bytes.Buffer
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward not ready")
	}
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	want := "sb-web port 8080: ping"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
		t.Errorf("through the tunnel: %q %v, want %q", got, err, want)
	}
	if got := h.websocketRequests("portforward"); got != 1 {
		t.Errorf("kubelet_websocket_streaming_requests_total{subresource=portforward} = %v, want 1", got)
	}
}

// TestWebSocketPortForwardRefused: a tunneling request without a SPDY
// protocol is refused; the runtime's refusal of the upgrade reaches the
// client as the runtime answered it.
func TestWebSocketPortForwardRefused(t *testing.T) {
	h := newWSHarness(t)
	req, _ := http.NewRequest("GET", h.srv.URL+"/portForward/default/web", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-Websocket-Version", "13")
	req.Header.Set("Sec-Websocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	req.Header.Set("Sec-Websocket-Protocol", "SPDY/3.1+portforward.k8s.io")
	target, _ := url.Parse("http://" + h.srv.Listener.Addr().String() + "/unused")
	rec := httptest.NewRecorder()
	// The protocol list is checked before the runtime is dialed.
	req.Header.Set("Sec-Websocket-Protocol", "v4.channel.k8s.io")
	tunnelPortForward(rec, req, target)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "no tunneling spdy protocols") {
		t.Errorf("no SPDY protocol: %d %q", rec.Code, rec.Body.String())
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unknown token", http.StatusNotFound)
	}))
	defer backend.Close()
	target, _ = url.Parse(backend.URL + "/portforward/expired")
	req.Header.Set("Sec-Websocket-Protocol", "SPDY/3.1+portforward.k8s.io")
	rec = httptest.NewRecorder()
	tunnelPortForward(rec, req, target)
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "unknown token") {
		t.Errorf("refused upgrade: %d %q", rec.Code, rec.Body.String())
	}
}
