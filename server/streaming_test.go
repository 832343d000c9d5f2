package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// streamingBackend stands in for the runtime's streaming server: it
// accepts an upgrade on any path, answers 101 and echoes what it reads,
// prefixed once with the path it was asked for.
type streamingBackend struct {
	mu    sync.Mutex
	paths []string
	hdrs  []http.Header
}

func (b *streamingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.paths = append(b.paths, r.URL.RequestURI())
	b.hdrs = append(b.hdrs, r.Header.Clone())
	b.mu.Unlock()
	if !strings.EqualFold(r.Header.Get("Connection"), "upgrade") {
		http.Error(w, "upgrade required", http.StatusBadRequest)
		return
	}
	conn, rw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
	fmt.Fprintf(rw, "path=%s\n", r.URL.Path)
	_ = rw.Flush()
	buf := make([]byte, 1024)
	for {
		n, err := rw.Read(buf)
		if n > 0 {
			_, _ = rw.Write(buf[:n])
			_ = rw.Flush()
		}
		if err != nil {
			return
		}
	}
}

type streamHarness struct {
	rt      *fakeRuntime
	backend *streamingBackend
	srv     *httptest.Server
}

func newStreamHarness(t *testing.T) *streamHarness {
	t.Helper()
	h := &streamHarness{rt: &fakeRuntime{}, backend: &streamingBackend{}}
	backend := httptest.NewServer(h.backend)
	t.Cleanup(backend.Close)
	h.rt.streamURL = backend.URL
	pod := testPod("default", "web", "app", "side")
	pod.Spec.Containers[0].TTY = true
	h.rt.addPod(pod, 100)
	o := baseOptions(pod, testPod("default", "stopped", "app"))
	o.Runtime = h.rt
	h.srv = httptest.NewServer(mustNew(t, o).Handler())
	t.Cleanup(h.srv.Close)
	return h
}

// upgrade sends an upgrade request for target and returns the connection
// after a 101, or the status line and body otherwise.
func (h *streamHarness) upgrade(t *testing.T, method, target string, hdr http.Header) (net.Conn, *bufio.Reader, int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, "http://"+h.srv.Listener.Addr().String()+target, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "SPDY/3.1")
	for k, v := range hdr {
		req.Header[k] = v
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		return nil, nil, resp.StatusCode, string(b)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, br, resp.StatusCode, ""
}

func echo(t *testing.T, conn net.Conn, br *bufio.Reader, wantPath string) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || line != "path="+wantPath+"\n" {
		t.Fatalf("backend path line %q (%v), want %q", line, err, wantPath)
	}
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo %q %v", line, err)
	}
}

func TestExecProxied(t *testing.T) {
	h := newStreamHarness(t)
	conn, br, code, body := h.upgrade(t, "POST", "/exec/default/web/side?command=sh&command=-c&command=id&input=1&output=1&error=1", nil)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("exec: %d %q", code, body)
	}
	echo(t, conn, br, "/exec/web-side")
	execs, _, _ := h.rt.requests()
	req := execs[0]
	if req.ContainerId != "web-side" || !slices.Equal(req.Cmd, []string{"sh", "-c", "id"}) || !req.Stdin || !req.Stdout || !req.Stderr || req.Tty {
		t.Errorf("CRI exec request %+v", req)
	}
	// tty=1 drops stderr, as the kubelet.
	conn, br, code, _ = h.upgrade(t, "GET", "/exec/default/web/uid-web/app?command=sh&output=1&error=1&tty=1", nil)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("exec with uid: %d", code)
	}
	echo(t, conn, br, "/exec/web-app")
	execs, _, _ = h.rt.requests()
	if req := execs[1]; !req.Tty || req.Stderr || !req.Stdout {
		t.Errorf("tty exec request %+v", req)
	}
}

func TestAttachAndPortForwardProxied(t *testing.T) {
	h := newStreamHarness(t)
	conn, br, code, body := h.upgrade(t, "POST", "/attach/default/web/app?output=1&input=1", nil)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("attach: %d %q", code, body)
	}
	echo(t, conn, br, "/attach/web-app")
	_, attaches, _ := h.rt.requests()
	if req := attaches[0]; !req.Tty || !req.Stdin || !req.Stdout || req.Stderr {
		t.Errorf("attach request %+v: TTY from the container spec", req)
	}
	conn, br, code, body = h.upgrade(t, "POST", "/portForward/default/web", nil)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("portForward: %d %q", code, body)
	}
	echo(t, conn, br, "/portforward/sb-web")
	_, _, pfs := h.rt.requests()
	if req := pfs[0]; req.PodSandboxId != "sb-web" || len(req.Port) != 0 {
		t.Errorf("port-forward request %+v", req)
	}
	// A WebSocket port-forward names its ports in the query.
	ws := http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	conn, br, code, body = h.upgrade(t, "GET", "/portForward/default/web/uid-web?port=80,8080&port=9090", ws)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("websocket portForward: %d %q", code, body)
	}
	echo(t, conn, br, "/portforward/sb-web")
	_, _, pfs = h.rt.requests()
	if req := pfs[1]; !slices.Equal(req.Port, []int32{80, 8080, 9090}) {
		t.Errorf("websocket port-forward ports %v", req.Port)
	}
}

func TestStreamingErrors(t *testing.T) {
	h := newStreamHarness(t)
	ws := http.Header{"Upgrade": {"websocket"}}
	for _, tc := range []struct {
		method, target string
		hdr            http.Header
		code           int
		body           string
	}{
		{"POST", "/exec/default/web/app?command=ls", nil, 400, "you must specify at least 1 of stdin, stdout, stderr"},
		{"POST", "/exec/default/nope/app?output=1", nil, 404, "pod does not exist"},
		{"POST", "/exec/default/stopped/app?output=1", nil, 500, `container not found ("app")`},
		{"POST", "/exec/default/web/gone?output=1", nil, 500, `container not found ("gone")`},
		{"PUT", "/exec/default/web/app?output=1", nil, 405, "Method Not Allowed"},
		{"POST", "/attach/default/web/gone?output=1", nil, 500, "container gone not found in pod web_default"},
		{"POST", "/attach/default/web/wrong-uid/app?output=1", nil, 500, "pod web_default not found"},
		{"POST", "/portForward/default/nope", nil, 404, "pod does not exist"},
		{"POST", "/portForward/default/web/wrong-uid", nil, 404, "pod not found"},
		{"POST", "/portForward/default/stopped", nil, 500, `pod not found ("stopped_default")`},
		{"GET", "/portForward/default/web", ws, 400, `query parameter "port" is required`},
		{"GET", "/portForward/default/web?port=x", ws, 400, `unable to parse "x" as a port: strconv.ParseUint: parsing "x": invalid syntax`},
		{"GET", "/portForward/default/web?port=0", ws, 400, `port "0" must be > 0`},
	} {
		hdr := http.Header{}
		for k, v := range tc.hdr {
			hdr[k] = v
		}
		if tc.hdr != nil {
			hdr.Set("Connection", "Upgrade")
		}
		_, _, code, body := h.upgrade(t, tc.method, tc.target, hdr)
		if code != tc.code || body != tc.body {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.target, code, body, tc.code, tc.body)
		}
	}
	// CRI errors map to HTTP as the kubelet's streaming.WriteError.
	for _, tc := range []struct {
		err  error
		code int
	}{
		{grpcstatus.Error(codes.NotFound, "no such container"), 404},
		{grpcstatus.Error(codes.ResourceExhausted, "too many"), 429},
		{errors.New("broken"), 500},
	} {
		h.rt.streamErr = tc.err
		_, _, code, body := h.upgrade(t, "POST", "/exec/default/web/app?output=1", nil)
		if code != tc.code || body != tc.err.Error() {
			t.Errorf("CRI error %v: %d %q", tc.err, code, body)
		}
	}
	// Not an upgrade: the proxy requires one.
	h.rt.streamErr = nil
	resp, err := http.Post(h.srv.URL+"/exec/default/web/app?output=1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Errorf("exec without upgrade: %d", resp.StatusCode)
	}
}

func TestRun(t *testing.T) {
	h := newStreamHarness(t)
	h.rt.execSync = func(id string, cmd []string) ([]byte, []byte, error) {
		if id == "web-app" && slices.Equal(cmd, []string{"echo", "hi"}) {
			return []byte("hi\n"), []byte("warn\n"), nil
		}
		return nil, nil, errors.New("exit status 1")
	}
	post := func(target string) (int, string) {
		resp, err := http.Post(h.srv.URL+target, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/run/default/web/app?cmd=" + url.QueryEscape("echo hi")); code != 200 || body != "hi\nwarn\n" {
		t.Errorf("run: %d %q", code, body)
	}
	if code, body := post("/run/default/web/app?cmd=false"); code != 500 || body != "exit status 1" {
		t.Errorf("failing run: %d %q", code, body)
	}
	if code, body := post("/run/default/web/nope?cmd=x"); code != 500 || body != `container not found ("nope")` {
		t.Errorf("run in missing container: %d %q", code, body)
	}
}

// TestSPDYThroughProxy runs a real SPDY session through the node API to a
// streaming server speaking SPDY, as kubectl exec does through the API
// server.
func TestSPDYThroughProxy(t *testing.T) {
	streams := make(chan httpstream.Stream, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
			streams <- s
			return nil
		})
		if conn == nil {
			return
		}
		defer conn.Close()
		s := <-streams
		_, _ = io.Copy(s, s)
		_ = s.Close()
		<-conn.CloseChan()
	}))
	defer backend.Close()
	rt := &fakeRuntime{streamURL: backend.URL}
	pod := testPod("default", "web", "app")
	rt.addPod(pod, 1)
	o := baseOptions(pod)
	o.Runtime = rt
	srv := httptest.NewServer(mustNew(t, o).Handler())
	defer srv.Close()

	tr, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/exec/default/web/app?command=cat&input=1&output=1", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tr.NewConnection(resp)
	if err != nil {
		t.Fatalf("SPDY upgrade through the node API: %v", err)
	}
	defer conn.Close()
	s, err := conn.CreateStream(http.Header{v1.StreamType: {v1.StreamTypeStdin}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("hello over spdy")); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // half-close: the backend's copy ends
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "hello over spdy" {
		t.Errorf("SPDY echo %q %v", got, err)
	}
	execs, _, _ := rt.requests()
	if execs[0].ContainerId != "web-app" || !slices.Equal(execs[0].Cmd, []string{"cat"}) {
		t.Errorf("exec request %+v", execs[0])
	}
}

func TestCheckpoint(t *testing.T) {
	h := newStreamHarness(t)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	o := baseOptions(testPod("default", "web", "app", "side"))
	o.Runtime = h.rt
	o.CheckpointDir = dir
	o.Clock = clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var got []*runtimeapi.CheckpointContainerRequest
	h.rt.checkpoint = func(req *runtimeapi.CheckpointContainerRequest) error {
		got = append(got, req)
		if req.ContainerId == "web-side" {
			return errors.New("criu failed")
		}
		return nil
	}
	hd := mustNew(t, o).Handler()
	code, body, _ := do(t, hd, "POST", "/checkpoint/default/web/app?timeout=5&timeout=9", nil)
	want := filepath.Join(dir, "checkpoint-web_default-app-2026-03-01T12:00:00Z.tar")
	if code != 200 || body != `{"items":["`+want+`"]}` {
		t.Errorf("checkpoint: %d %q", code, body)
	}
	if len(got) != 1 || got[0].ContainerId != "web-app" || got[0].Timeout != 9 || got[0].Location != want {
		t.Errorf("CRI checkpoint request %+v", got)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("checkpoint directory not created: %v", err)
	}
	for _, tc := range []struct {
		method, target string
		code           int
		body           string
	}{
		{"POST", "/checkpoint/default/nope/app", 404, "pod does not exist"},
		{"POST", "/checkpoint/default/web/nope", 404, "container nope does not exist"},
		{"POST", "/checkpoint/default/web/app?timeout=x", 404, "cannot parse value of timeout parameter"},
		{"POST", "/checkpoint/default/web/side", 500, "checkpointing of default/web/side failed (criu failed)"},
		{"GET", "/checkpoint/default/web/app", 405, "Method Not Allowed"},
	} {
		if code, body, _ := do(t, hd, tc.method, tc.target, nil); code != tc.code || body != tc.body {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.target, code, body, tc.code, tc.body)
		}
	}
}
