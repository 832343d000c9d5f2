package agent

import (
	"context"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/fx/fxtest"
	v1 "k8s.io/api/core/v1"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// connServer is an HTTP/2 TLS server answering every request with an
// empty NodeList, counting the connections it accepted and remembering
// whether any request asked for gzip.
type connServer struct {
	*httptest.Server
	mu        sync.Mutex
	conns     int
	gzipAsked bool
}

func newConnServer(t *testing.T) *connServer {
	s := &connServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if r.Header.Get("Accept-Encoding") != "" {
			s.gzipAsked = true
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","metadata":{},"items":[]}`))
	}))
	s.EnableHTTP2 = true
	s.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *connServer) counts() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, s.gzipAsked
}

// clientsOn returns node-a's clients of srv.
func clientsOn(t *testing.T, srv *connServer) *Clients {
	t.Helper()
	cfg, err := ParseFlags(klog.Background(), []string{"--hostname-override=node-a"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClientsFromRESTConfig(cfg, &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// lists are a list request of each of c's clients, by client.
func lists(c *Clients) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"main": func(ctx context.Context) error {
			_, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		},
		"heartbeat": func(ctx context.Context) error {
			_, err := c.Heartbeat.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		},
		"events": func(ctx context.Context) error {
			_, err := c.Events.Events("").List(ctx, metav1.ListOptions{})
			return err
		},
	}
}

func TestClientsShareOneConnectionWithoutGzip(t *testing.T) {
	srv := newConnServer(t)
	c := clientsOn(t, srv)
	list := func() {
		t.Helper()
		for name, list := range lists(c) {
			if err := list(context.Background()); err != nil {
				t.Fatalf("%s client: %v", name, err)
			}
		}
	}
	list()
	conns, gzip := srv.counts()
	if conns != 1 {
		t.Errorf("the three clients opened %d connections, want 1 shared", conns)
	}
	if gzip {
		t.Error("a request asked for a compressed response")
	}
	c.CloseConnections()
	list()
	if conns, _ := srv.counts(); conns != 2 {
		t.Errorf("after CloseConnections the clientsets opened %d connections in all, want 2 (one more, shared)", conns)
	}
}

// TestStandaloneEventsNameTheNode: a standalone agent logs its events with
// its own logger, so each line names the node as every other line does.
func TestStandaloneEventsNameTheNode(t *testing.T) {
	lines := make(chan string, 10)
	logger := funcr.New(func(prefix, args string) { lines <- args }, funcr.Options{}).WithValues("node", "node-s")
	cfg := &Config{NodeName: "node-s"}
	lc := fxtest.NewLifecycle(t)
	rec := provideLocalRecorder(lc, cfg, logger)
	lc.RequireStart()
	defer lc.RequireStop()
	<-lines // "No API server: events are only logged"
	rec.Event(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}, v1.EventTypeNormal, "Started", "Started container app")
	select {
	case l := <-lines:
		if !strings.Contains(l, `"node"="node-s"`) || !strings.Contains(l, `"reason"="Started"`) {
			t.Errorf("event line %s, want the node and the event", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the event was not logged")
	}
}

// TestHeartbeatClientHasItsOwnTimeout: the heartbeat's Node and Lease
// clients time out within the status update period and are not rate
// limited; its other groups are the main client's.
func TestHeartbeatClientHasItsOwnTimeout(t *testing.T) {
	cfg, err := ParseFlags(klog.Background(), []string{"--hostname-override=node-a", "--node-status-update-frequency=7s"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClientsFromRESTConfig(cfg, &rest.Config{Host: "https://127.0.0.1:6443"})
	if err != nil {
		t.Fatal(err)
	}
	for name, rc := range map[string]rest.Interface{
		"CoreV1":         c.Heartbeat.CoreV1().RESTClient(),
		"CoordinationV1": c.Heartbeat.CoordinationV1().RESTClient(),
	} {
		r := rc.(*rest.RESTClient)
		if r.Client.Timeout != 7*time.Second || r.GetRateLimiter() != nil {
			t.Errorf("heartbeat %s: timeout %s, rate limiter %v; want 7s and none", name, r.Client.Timeout, r.GetRateLimiter())
		}
	}
	if main := c.Client.CoreV1().RESTClient().(*rest.RESTClient); main.Client.Timeout != 0 || main.GetRateLimiter() == nil {
		t.Errorf("main client: timeout %s, rate limiter %v; want none and the kube-api-qps limit", main.Client.Timeout, main.GetRateLimiter())
	}
	if c.Heartbeat.StorageV1() != c.Client.StorageV1() {
		t.Error("the heartbeat's storage/v1 is not the main client's")
	}
}

// BenchmarkNewClients reports the heap one agent's clients hold.
//
//	go test -run '^$' -bench NewClients -benchtime=200x ./agent
func BenchmarkNewClients(b *testing.B) {
	cfg, err := ParseFlags(klog.Background(), []string{"--hostname-override=node-a"})
	if err != nil {
		b.Fatal(err)
	}
	restCfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	var held []*Clients
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for b.Loop() {
		c, err := NewClientsFromRESTConfig(cfg, restCfg)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, c)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1024/float64(len(held)), "heap-KiB/agent")
	runtime.KeepAlive(held)
}
