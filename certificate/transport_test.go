package certificate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"
)

// peerServer is a TLS server that requires a client certificate issued by
// a CA and records the serial of the one each request came with, and how
// many connections were made.
type peerServer struct {
	*httptest.Server
	mu      sync.Mutex
	serials []string
	conns   atomic.Int32
}

func newPeerServer(t *testing.T, ca *x509.Certificate) *peerServer {
	s := &peerServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.serials = append(s.serials, r.TLS.PeerCertificates[0].SerialNumber.String())
		s.mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	s.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	s.EnableHTTP2 = true
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *peerServer) lastSerial() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.serials) == 0 {
		return ""
	}
	return s.serials[len(s.serials)-1]
}

// TestRotatingTransportSwitchesToTheRenewedCertificate: clients built on
// UpdateTransport's configuration present the certificate manager's pair;
// once client-go's manager renews a short-lived certificate, the check
// closes the connections and the very next request reaches the server
// with the new certificate, the clients unchanged.
func TestRotatingTransportSwitchesToTheRenewedCertificate(t *testing.T) {
	s := newTestSigner(t)
	// Issued two hours ago, expiring in a minute: the manager renews it as
	// soon as it starts.
	s.lifetime = time.Minute
	opts := testOptions(t, s)
	if err := Bootstrap(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	defer cancel()
	m, err := NewClientRotation(ctx, RotationOptions{
		KubeconfigPath: opts.KubeconfigPath, CertDir: opts.CertDir, NodeName: opts.NodeName, NewClient: opts.NewClient,
	})
	if err != nil {
		t.Fatal(err)
	}
	first := m.Current()
	if first == nil {
		t.Fatal("the manager has no certificate after the bootstrap")
	}
	srv := newPeerServer(t, s.ca)

	tracker := connrotation.NewConnectionTracker()
	dialer := connrotation.NewDialerWithTracker((&net.Dialer{Timeout: 5 * time.Second}).DialContext, tracker)
	cfg := &rest.Config{
		Host:            srv.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})},
		// Dropped: the transport presents the manager's pair.
		BearerToken: "not-sent",
	}
	cfg, rt, err := UpdateTransport(cfg, TransportOptions{Manager: m, Dial: dialer.DialContext, CloseAll: tracker.CloseAll})
	if err != nil {
		t.Fatal(err)
	}
	rt.period = 10 * time.Millisecond
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func() string {
		t.Helper()
		if _, err := client.CoreV1().RESTClient().Get().AbsPath("/healthz").DoRaw(ctx); err != nil {
			t.Fatal(err)
		}
		return srv.lastSerial()
	}
	for range 3 {
		if got, want := get(), first.Leaf.SerialNumber.String(); got != want {
			t.Fatalf("the server saw serial %s, want the bootstrap certificate's %s", got, want)
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections for three requests, want 1 (kept alive)", n)
	}

	s.lifetime = time.Hour
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	m.Start()
	defer m.Stop()
	var renewed *tls.Certificate
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c := m.Current()
		if c == first || rt.current() != c {
			return false, nil // not renewed, or not yet seen by the check
		}
		renewed = c
		return true, nil
	})
	if err != nil {
		t.Fatalf("the certificate was not renewed and picked up by the transport: %v", err)
	}
	if got, want := get(), renewed.Leaf.SerialNumber.String(); got != want {
		t.Errorf("the first request after the renewal came with serial %s, want the renewed %s", got, want)
	}
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the old one closed, one new)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// fakeManager is a clientcert.Manager whose certificate and server health
// a test sets.
type fakeManager struct {
	cert    atomic.Pointer[tls.Certificate]
	healthy atomic.Bool
}

func (f *fakeManager) Start()                    {}
func (f *fakeManager) Stop()                     {}
func (f *fakeManager) Current() *tls.Certificate { return f.cert.Load() }
func (f *fakeManager) ServerHealthy() bool       { return f.healthy.Load() }

// TestRotatingTransportGivesUpOnAnExpiredCertificate: an expired
// certificate stops Run with an error once the server answers (the
// kubelet exits), not while it does not; no certificate at all for five
// minutes likewise.
func TestRotatingTransportGivesUpOnAnExpiredCertificate(t *testing.T) {
	now := time.Now()
	expired := &tls.Certificate{Leaf: &x509.Certificate{NotAfter: now.Add(-time.Second), SerialNumber: big.NewInt(1)}}
	for _, tc := range []struct {
		name    string
		cert    *tls.Certificate
		elapsed time.Duration
		healthy bool
		wantErr string
	}{
		{name: "expired, server down", cert: expired},
		{name: "expired, server up", cert: expired, healthy: true, wantErr: "expired"},
		{name: "none for a minute, server up", elapsed: time.Minute, healthy: true},
		{name: "none for six minutes, server down", elapsed: 6 * time.Minute},
		{name: "none for six minutes, server up", elapsed: 6 * time.Minute, healthy: true, wantErr: "no valid client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeManager{}
			f.cert.Store(tc.cert)
			f.healthy.Store(tc.healthy)
			closed := 0
			_, rt, err := UpdateTransport(&rest.Config{Host: "https://127.0.0.1:1"}, TransportOptions{
				Manager: f, Dial: (&net.Dialer{}).DialContext, CloseAll: func() { closed++ },
			})
			if err != nil {
				t.Fatal(err)
			}
			rt.now = func() time.Time { return now.Add(tc.elapsed) }
			err = rt.check(klog.Background())
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("check: %v, want an error containing %q", err, tc.wantErr)
			}
			if closed != 0 {
				t.Errorf("connections closed %d times with the certificate unchanged", closed)
			}
		})
	}

	// Run stops with the error.
	f := &fakeManager{}
	f.cert.Store(expired)
	f.healthy.Store(true)
	_, rt, err := UpdateTransport(&rest.Config{Host: "https://127.0.0.1:1"}, TransportOptions{
		Manager: f, Dial: (&net.Dialer{}).DialContext, CloseAll: func() {},
	})
	if err != nil {
		t.Fatal(err)
	}
	rt.period = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Run(ctx); err == nil || !strings.Contains(err.Error(), "expired") || ctx.Err() != nil {
		t.Errorf("Run with an expired certificate and a healthy server: %v (context: %v), want it to stop with the expiry", err, ctx.Err())
	}
}
