package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	criclient "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
	"k8s.io/utils/ptr"
)

// hostPort splits a listener's address.
func hostPort(t *testing.T, addr net.Addr) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return h, port
}

// httpTarget is an httpGet probe of srv's host (as the pod IP) and port.
func httpTarget(t *testing.T, srv *httptest.Server, path string) *Target {
	t.Helper()
	host, port := hostPort(t, srv.Listener.Addr())
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}}}
	if srv.TLS != nil {
		p.HTTPGet.Scheme = v1.URISchemeHTTPS
	}
	return &Target{ProbeType: Readiness, Container: &v1.Container{Name: "app"}, Probe: p, PodIP: host, Timeout: 5 * time.Second}
}

func TestHTTPRequest(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	h := NewHTTPHandler()

	tg := httpTarget(t, srv, "/healthz?deep=1")
	res, out, err := h.Probe(context.Background(), tg)
	if res != Success || out != "ok" || err != nil {
		t.Fatalf("probe = %s, %q, %v", res, out, err)
	}
	if got.URL.Path != "/healthz" || got.URL.RawQuery != "deep=1" || got.Method != http.MethodGet {
		t.Errorf("request %s %s", got.Method, got.URL)
	}
	if ua := got.Header.Get("User-Agent"); ua != "kube-probe/1.37" {
		t.Errorf("User-Agent %q", ua)
	}
	if a := got.Header.Values("Accept"); !slices.Equal(a, []string{"*/*"}) {
		t.Errorf("Accept %q", a)
	}
	if e := got.Header.Get("Accept-Encoding"); e != "" {
		t.Errorf("Accept-Encoding %q: compression must be off", e)
	}
	if !got.Close {
		t.Error("keep-alive requested; probes close their connection")
	}

	// The probe's headers: Host sets the request's host, an explicit
	// User-Agent wins, an empty Accept removes it.
	tg.Probe.HTTPGet.HTTPHeaders = []v1.HTTPHeader{
		{Name: "Host", Value: "example.com"},
		{Name: "User-Agent", Value: "mine/1"},
		{Name: "Accept", Value: ""},
		{Name: "X-Check", Value: "a"},
		{Name: "X-Check", Value: "b"},
	}
	if res, _, err := h.Probe(context.Background(), tg); res != Success || err != nil {
		t.Fatalf("probe = %s, %v", res, err)
	}
	if got.Host != "example.com" {
		t.Errorf("Host %q", got.Host)
	}
	if ua := got.Header.Get("User-Agent"); ua != "mine/1" {
		t.Errorf("User-Agent %q", ua)
	}
	if _, ok := got.Header["Accept"]; ok {
		t.Errorf("Accept %q, want none", got.Header["Accept"])
	}
	if v := got.Header.Values("X-Check"); !slices.Equal(v, []string{"a", "b"}) {
		t.Errorf("X-Check %q", v)
	}

	// An explicit host wins over the pod IP.
	tg.Probe.HTTPGet.HTTPHeaders = nil
	tg.Probe.HTTPGet.Host, tg.PodIP = tg.PodIP, "192.0.2.1"
	if res, _, err := h.Probe(context.Background(), tg); res != Success || err != nil {
		t.Fatalf("probe with host = %s, %v", res, err)
	}
}

func TestHTTPStatusCodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.WriteHeader(code)
		fmt.Fprint(w, "secret body")
	}))
	defer srv.Close()
	h := NewHTTPHandler()
	for code, want := range map[int]Result{200: Success, 204: Success, 304: Warning, 399: Warning, 400: Failure, 404: Failure, 500: Failure, 503: Failure} {
		res, out, err := h.Probe(context.Background(), httpTarget(t, srv, "/"+strconv.Itoa(code)))
		if res != want || err != nil {
			t.Errorf("%d: %s, %v; want %s", code, res, err, want)
		}
		if want == Failure {
			if wantOut := fmt.Sprintf("HTTP probe failed with statuscode: %d", code); out != wantOut {
				t.Errorf("%d: output %q, want %q (no body)", code, out, wantOut)
			}
		}
	}
}

func TestHTTPRedirects(t *testing.T) {
	var hits atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, port := hostPort(t, srv.Listener.Addr())
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "/final":
			fmt.Fprint(w, "done")
		case "/other":
			// "localhost" is another host name than "127.0.0.1".
			w.Header().Set("Location", fmt.Sprintf("http://localhost:%d/final", port))
			w.WriteHeader(http.StatusFound)
			fmt.Fprint(w, "moved")
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	}))
	defer srv.Close()
	h := NewHTTPHandler()

	res, out, err := h.Probe(context.Background(), httpTarget(t, srv, "/same"))
	if res != Success || out != "done" || err != nil {
		t.Errorf("same host: %s, %q, %v", res, out, err)
	}
	res, out, err = h.Probe(context.Background(), httpTarget(t, srv, "/other"))
	if res != Warning || out != "Probe terminated redirects, Response body: moved" || err != nil {
		t.Errorf("other host: %s, %q, %v", res, out, err)
	}
	hits.Store(0)
	res, out, err = h.Probe(context.Background(), httpTarget(t, srv, "/loop"))
	if res != Failure || !strings.Contains(out, "stopped after 10 redirects") || err != nil {
		t.Errorf("loop: %s, %q, %v", res, out, err)
	}
	if n := hits.Load(); n != 10 {
		t.Errorf("%d requests in a redirect loop, want 10", n)
	}
}

func TestHTTPTimeoutAndErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	h := NewHTTPHandler()
	tg := httpTarget(t, srv, "/")
	tg.Timeout = 100 * time.Millisecond
	res, out, err := h.Probe(context.Background(), tg)
	if res != Failure || !strings.Contains(out, "Client.Timeout exceeded while awaiting headers") || err != nil {
		t.Errorf("timeout: %s, %q, %v", res, out, err)
	}

	// Nothing listens: a failure, not an error.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port := hostPort(t, l.Addr())
	l.Close()
	tg.Probe.HTTPGet.Port = intstr.FromInt32(int32(port))
	res, out, err = h.Probe(context.Background(), tg)
	if res != Failure || !strings.Contains(out, "connection refused") || err != nil {
		t.Errorf("refused: %s, %q, %v", res, out, err)
	}
}

func TestHTTPNamedPortBodyCapAndTLS(t *testing.T) {
	body := strings.Repeat("a", 20<<10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	h := NewHTTPHandler()
	tg := httpTarget(t, srv, "/")
	_, port := hostPort(t, srv.Listener.Addr())
	tg.Container.Ports = []v1.ContainerPort{{Name: "metrics", ContainerPort: 1}, {Name: "https", ContainerPort: int32(port)}}
	tg.Probe.HTTPGet.Port = intstr.FromString("https")
	// A self-signed certificate: probes do not verify.
	res, out, err := h.Probe(context.Background(), tg)
	if res != Success || err != nil {
		t.Fatalf("probe = %s, %v", res, err)
	}
	if len(out) != 10<<10 {
		t.Errorf("read %d bytes of the body, want 10 KiB", len(out))
	}
	tg.Probe.HTTPGet.Port = intstr.FromString("nope")
	if res, _, err := h.Probe(context.Background(), tg); res != Unknown || err == nil || err.Error() != `port "nope" not found` {
		t.Errorf("unknown port name: %s, %v", res, err)
	}
	tg.Probe.HTTPGet.Port = intstr.FromInt32(70000)
	if res, _, err := h.Probe(context.Background(), tg); res != Unknown || err == nil {
		t.Errorf("port 70000: %s, %v", res, err)
	}
}

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	host, port := hostPort(t, l.Addr())
	h := NewTCPHandler()
	tg := &Target{Container: &v1.Container{Ports: []v1.ContainerPort{{Name: "db", ContainerPort: int32(port)}}},
		Probe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("db")}}},
		PodIP: host, Timeout: time.Second}
	if res, out, err := h.Probe(context.Background(), tg); res != Success || out != "" || err != nil {
		t.Errorf("listening: %s, %q, %v", res, out, err)
	}
	tg.Probe.TCPSocket.Host, tg.PodIP = host, "192.0.2.1"
	if res, _, err := h.Probe(context.Background(), tg); res != Success || err != nil {
		t.Errorf("explicit host: %s, %v", res, err)
	}
	tg.Probe.TCPSocket.Port = intstr.FromString("nope")
	if res, _, err := h.Probe(context.Background(), tg); res != Unknown || err == nil {
		t.Errorf("unknown port name: %s, %v", res, err)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, cport := hostPort(t, closed.Addr())
	closed.Close()
	tg.Probe.TCPSocket.Port = intstr.FromInt32(int32(cport))
	if res, out, err := h.Probe(context.Background(), tg); res != Failure || !strings.Contains(out, "connection refused") || err != nil {
		t.Errorf("refused: %s, %q, %v", res, out, err)
	}
}

// TestTCPTimeout dials a listener whose accept queue is full, so the
// connection is never established.
func TestTCPTimeout(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Fill the accept queue (nobody accepts).
	var fill []net.Conn
	defer func() {
		for _, c := range fill {
			c.Close()
		}
	}()
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		fill = append(fill, c)
	}
	tg := &Target{Container: &v1.Container{},
		Probe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}},
		PodIP: "127.0.0.1", Timeout: 200 * time.Millisecond}
	res, out, err := NewTCPHandler().Probe(context.Background(), tg)
	if res != Failure || !strings.Contains(out, "i/o timeout") || err != nil {
		t.Errorf("full accept queue: %s, %q, %v", res, out, err)
	}
}

func TestGRPC(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var agents []string
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		agents = append(agents, md.Get("user-agent")...)
		mu.Unlock()
		return handler(ctx, req)
	}))
	hs := health.NewServer()
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("cache", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	host, port := hostPort(t, l.Addr())
	probe := func(service *string, port int) (Result, string, error) {
		return NewGRPCHandler().Probe(context.Background(), &Target{Container: &v1.Container{},
			Probe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(port), Service: service}}},
			PodIP: host, Timeout: time.Second})
	}
	if res, out, err := probe(ptr.To("db"), port); res != Success || out != "service healthy" || err != nil {
		t.Errorf("serving: %s, %q, %v", res, out, err)
	}
	if res, out, err := probe(nil, port); res != Success || err != nil {
		t.Errorf("the server's overall health: %s, %q, %v", res, out, err)
	}
	if res, out, err := probe(ptr.To("cache"), port); res != Failure || out != `service unhealthy (responded with "NOT_SERVING")` || err != nil {
		t.Errorf("not serving: %s, %q, %v", res, out, err)
	}
	if res, out, err := probe(ptr.To("nope"), port); res != Failure || !strings.HasPrefix(out, "error: health rpc probe failed: ") || err != nil {
		t.Errorf("unknown service: %s, %q, %v", res, out, err)
	}
	mu.Lock()
	for _, a := range agents {
		if !strings.HasPrefix(a, "kube-probe/1.37 ") {
			t.Errorf("user agent %q", a)
		}
	}
	if len(agents) != 4 {
		t.Errorf("%d calls seen, want 4", len(agents))
	}
	mu.Unlock()

	// A gRPC server without the health service.
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := grpc.NewServer()
	go func() { _ = bare.Serve(l2) }()
	defer bare.Stop()
	_, port2 := hostPort(t, l2.Addr())
	if res, out, err := probe(nil, port2); res != Failure ||
		!strings.HasPrefix(out, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): ") || err != nil {
		t.Errorf("no health service: %s, %q, %v", res, out, err)
	}

	// Nobody listens: the connection attempt times out.
	l3, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port3 := hostPort(t, l3.Addr())
	l3.Close()
	if res, out, err := probe(nil, port3); res != Failure || !strings.HasPrefix(out, "timeout: failed to connect service ") || err != nil {
		t.Errorf("refused: %s, %q, %v", res, out, err)
	}
}

// fakeExec is an ExecRunner that answers from fields and records calls.
type fakeExec struct {
	stdout, stderr []byte
	err            error
	id             string
	cmd            []string
	timeout        time.Duration
}

func (f *fakeExec) ExecSync(_ context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	f.id, f.cmd, f.timeout = id, cmd, timeout
	return f.stdout, f.stderr, f.err
}

func TestExec(t *testing.T) {
	f := &fakeExec{stdout: []byte("out "), stderr: []byte("err")}
	h := NewExecHandler(f)
	tg := &Target{ContainerID: "abc", Timeout: 3 * time.Second,
		Container: &v1.Container{Env: []v1.EnvVar{{Name: "A", Value: "x"}, {Name: "S", ValueFrom: &v1.EnvVarSource{}}}},
		Probe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{
			Command: []string{"check", "$(A)", "$(S)", "$(NONE)", "$$(A)", "a$(A)b", "$(", "$x", "$"}}}}}
	if res, out, err := h.Probe(context.Background(), tg); res != Success || out != "out err" || err != nil {
		t.Errorf("exit 0: %s, %q, %v", res, out, err)
	}
	if want := []string{"check", "x", "", "$(NONE)", "$(A)", "axb", "$(", "$x", "$"}; !slices.Equal(f.cmd, want) {
		t.Errorf("command %q, want %q", f.cmd, want)
	}
	if f.id != "abc" || f.timeout != 3*time.Second {
		t.Errorf("ExecSync(%q, timeout %v)", f.id, f.timeout)
	}
	if tg.Probe.Exec.Command[1] != "$(A)" {
		t.Error("the probe's command was modified")
	}

	f.err = utilexec.CodeExitError{Err: errors.New("exited 1"), Code: 1}
	if res, out, err := h.Probe(context.Background(), tg); res != Failure || out != "out err" || err != nil {
		t.Errorf("exit 1: %s, %q, %v", res, out, err)
	}
	f.err = fmt.Errorf("%w: %q timed out after 3s", criclient.ErrCommandTimedOut, "check")
	if res, out, err := h.Probe(context.Background(), tg); res != Failure || out != f.err.Error() || err != nil {
		t.Errorf("timeout: %s, %q, %v", res, out, err)
	}
	f.err = errors.New("container not found")
	if res, out, err := h.Probe(context.Background(), tg); res != Unknown || out != "" || err == nil {
		t.Errorf("CRI error: %s, %q, %v", res, out, err)
	}
	f.err = nil
	f.stdout, f.stderr = []byte(strings.Repeat("o", 8<<10)), []byte(strings.Repeat("e", 8<<10))
	if _, out, _ := h.Probe(context.Background(), tg); len(out) != 10<<10 || !strings.HasSuffix(out, "e") {
		t.Errorf("output of %d bytes, want 10 KiB of stdout then stderr", len(out))
	}
	if res, _, err := NewExecHandler(nil).Probe(context.Background(), tg); res != Unknown || err == nil {
		t.Errorf("no runner: %s, %v", res, err)
	}
}

func TestKindOf(t *testing.T) {
	for want, p := range map[Kind]*v1.Probe{
		"":            nil,
		KindExec:      {ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{}}},
		KindHTTPGet:   {ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{}}},
		KindTCPSocket: {ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{}}},
		KindGRPC:      {ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{}}},
	} {
		if got := KindOf(p); got != want {
			t.Errorf("KindOf = %q, want %q", got, want)
		}
	}
	if KindOf(&v1.Probe{}) != "" {
		t.Error("a probe without an action has no kind")
	}
	if majorMinor("v1.37.2") != "1.37" || majorMinor("1.40") != "1.40" {
		t.Error("majorMinor")
	}
}
