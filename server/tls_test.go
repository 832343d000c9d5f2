package server

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// testCA is a CA that issues client and serving certificates for tests.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs pub with tmpl's subject and usages.
func (ca *testCA) issue(t *testing.T, tmpl *x509.Certificate, pub crypto.PublicKey) []byte {
	t.Helper()
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Hour)
		tmpl.NotAfter = time.Now().Add(time.Hour)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// clientCert returns a TLS client certificate for cn in orgs.
func (ca *testCA) clientCert(t *testing.T, cn string, orgs ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	certPEM := ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public())
	der, _ := x509.MarshalECPrivateKey(key)
	c, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runServer runs s on a loopback listener until the test ends and returns
// its address.
func runServer(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.Listener = ln
	s := mustNew(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	addr, err := s.Addr(ctx)
	if err != nil || addr == nil {
		t.Fatalf("server did not start: %v", err)
	}
	return s, addr.String()
}

func nodeAddresses() []v1.NodeAddress {
	return []v1.NodeAddress{
		{Type: v1.NodeHostName, Address: "node-a.example"},
		{Type: v1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: v1.NodeInternalDNS, Address: "node-a.internal"},
		{Type: v1.NodeExternalIP, Address: "192.0.2.10"},
	}
}

// handshake connects to addr and returns the server's leaf certificate and
// the negotiated protocol.
func handshake(t *testing.T, addr string, cfg *tls.Config) (*x509.Certificate, string) {
	t.Helper()
	if cfg == nil {
		cfg = &tls.Config{InsecureSkipVerify: true}
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer conn.Close()
	st := conn.ConnectionState()
	return st.PeerCertificates[0], st.NegotiatedProtocol
}

func TestSelfSignedCertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := baseOptions()
	o.TLS.CertDirectory = dir
	o.NodeAddresses = nodeAddresses
	_, addr := runServer(t, o)

	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("cert directory: %v, mode %v, want 0700", err, fi.Mode().Perm())
	}
	for _, name := range []string{SelfSignedCertName, SelfSignedKeyName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v, want 0600", name, err, fi.Mode().Perm())
		}
	}
	leaf, proto := handshake(t, addr, nil)
	if proto != "h2" {
		t.Errorf("negotiated %q, want h2", proto)
	}
	if !slices.Contains(leaf.DNSNames, "node-a.example") || !slices.Contains(leaf.DNSNames, "node-a.internal") {
		t.Errorf("DNS names %v", leaf.DNSNames)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Contains(ips, "127.0.0.1") || !slices.Contains(ips, "192.0.2.10") {
		t.Errorf("IPs %v", ips)
	}
	// The certificate chains to the CA written with it.
	data, _ := os.ReadFile(filepath.Join(dir, SelfSignedCertName))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "node-a.example"}); err != nil {
		t.Errorf("self-signed certificate does not verify: %v", err)
	}
}

func TestExistingSelfSignedPairIsKept(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "existing")
	writePair(t, ca, filepath.Join(dir, SelfSignedCertName), filepath.Join(dir, SelfSignedKeyName), "kept")
	o := baseOptions()
	o.TLS.CertDirectory = dir
	_, addr := runServer(t, o)
	if leaf, _ := handshake(t, addr, nil); leaf.Subject.CommonName != "kept" {
		t.Errorf("served %q, want the existing pair", leaf.Subject.CommonName)
	}
}

func writePair(t *testing.T, ca *testCA, certFile, keyFile, cn string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	certPEM := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, key.Public())
	der, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCertFilesReloaded(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, ca, certFile, keyFile, "first")
	clk := clocktesting.NewFakeClock(time.Now())
	o := baseOptions()
	o.TLS = TLSOptions{CertFile: certFile, KeyFile: keyFile, MinVersion: "VersionTLS13"}
	o.Clock = clk
	_, addr := runServer(t, o)
	if leaf, _ := handshake(t, addr, nil); leaf.Subject.CommonName != "first" {
		t.Fatalf("served %q", leaf.Subject.CommonName)
	}
	writePair(t, ca, certFile, keyFile, "second")
	// Make sure the files look changed even on coarse mtime filesystems.
	future := time.Now().Add(time.Minute)
	_ = os.Chtimes(certFile, future, future)
	if leaf, _ := handshake(t, addr, nil); leaf.Subject.CommonName != "first" {
		t.Errorf("reloaded before the check interval: %q", leaf.Subject.CommonName)
	}
	clk.Step(defaultCertReloadCheckInterval)
	if leaf, _ := handshake(t, addr, nil); leaf.Subject.CommonName != "second" {
		t.Errorf("after the check interval served %q, want second", leaf.Subject.CommonName)
	}
	// TLS 1.2 is refused with tlsMinVersion VersionTLS13.
	if _, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("TLS 1.2 handshake succeeded with tlsMinVersion VersionTLS13")
	}
}

func TestTLSOptionErrors(t *testing.T) {
	for _, tc := range []TLSOptions{
		{MinVersion: "VersionTLS99"},
		{CipherSuites: []string{"NOT_A_CIPHER"}},
		{CertFile: "/nonexistent.crt", KeyFile: "/nonexistent.key"},
	} {
		o := baseOptions()
		o.Port = 0
		o.TLS = tc
		o.Listener, _ = net.Listen("tcp", "127.0.0.1:0")
		s := mustNew(t, o)
		if err := s.Run(context.Background()); err == nil {
			t.Errorf("Run with %+v succeeded", tc)
		}
	}
}

func TestX509ClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "client-ca")
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	o := baseOptions()
	o.TLS.CertDirectory = dir
	o.Authentication = AuthnOptions{ClientCAFile: caFile, DisableWebhook: true}
	o.Routes = []Route{{Path: "/whoami", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := UserFrom(r.Context())
		_, _ = io.WriteString(w, u.Name+" "+fmtGroups(u.Groups))
	})}}
	_, addr := runServer(t, o)

	get := func(certs ...tls.Certificate) (int, string) {
		c := &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, Certificates: certs},
			ForceAttemptHTTP2: true,
		}}
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + addr + "/whoami")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 {
			t.Errorf("protocol %s, want HTTP/2", resp.Proto)
		}
		return resp.StatusCode, string(b)
	}
	// DER sorts a name's organizations (shorter first).
	if code, body := get(ca.clientCert(t, "carol", "admins", "ops")); code != 200 || body != "carol ops,admins,system:authenticated" {
		t.Errorf("client cert: %d %q", code, body)
	}
	other := newTestCA(t, "other")
	if code, body := get(other.clientCert(t, "mallory")); code != http.StatusUnauthorized || body != "Unauthorized" {
		t.Errorf("foreign client cert: %d %q, want 401", code, body)
	}
	if code, _ := get(); code != http.StatusUnauthorized {
		t.Errorf("no client cert, anonymous off: %d, want 401", code)
	}
}

func fmtGroups(g []string) string {
	out := ""
	for i, s := range g {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

// csrSigner approves every CSR and issues its certificate from ca, as a
// controller-manager with the kubelet-serving signer and an approver would.
type csrSigner struct {
	t    *testing.T
	ca   *testCA
	mu   sync.Mutex
	seen []*certificatesv1.CertificateSigningRequest
}

func (s *csrSigner) react(action k8stesting.Action) (bool, runtime.Object, error) {
	csr := action.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
	s.mu.Lock()
	defer s.mu.Unlock()
	if csr.Name == "" {
		csr.Name = csr.GenerateName + "test" + string(rune('a'+len(s.seen)))
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		s.t.Errorf("CSR: %v", err)
		return true, nil, err
	}
	csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue}}
	csr.Status.Certificate = s.ca.issue(s.t, &x509.Certificate{
		Subject:     req.Subject,
		DNSNames:    req.DNSNames,
		IPAddresses: req.IPAddresses,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, req.PublicKey)
	s.seen = append(s.seen, csr.DeepCopy())
	return false, nil, nil // let the tracker store it, named and signed
}

func TestBootstrapThroughCSR(t *testing.T) {
	// A certificate directory that does not exist yet.
	dir := filepath.Join(t.TempDir(), "pki")
	ca := newTestCA(t, "kubelet-serving-ca")
	signer := &csrSigner{t: t, ca: ca}
	client := fake.NewClientset()
	client.PrependReactor("create", "certificatesigningrequests", signer.react)
	reg := prometheus.NewRegistry()
	o := baseOptions()
	o.TLS = TLSOptions{Bootstrap: true, CertDirectory: dir}
	o.Client = client
	o.NodeAddresses = nodeAddresses
	o.Registerer = reg
	_, addr := runServer(t, o)

	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	var leaf *x509.Certificate
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "node-a.example"})
		if err == nil {
			leaf = conn.ConnectionState().PeerCertificates[0]
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no bootstrapped serving certificate: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if leaf.Subject.CommonName != "system:node:"+testNode || !slices.Equal(leaf.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %v", leaf.Subject)
	}
	signer.mu.Lock()
	csr := signer.seen[0]
	signer.mu.Unlock()
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		t.Errorf("signer %q", csr.Spec.SignerName)
	}
	wantUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	if !slices.Equal(csr.Spec.Usages, wantUsages) {
		t.Errorf("usages %v, want %v", csr.Spec.Usages, wantUsages)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, _ := x509.ParseCertificateRequest(block.Bytes)
	if !slices.Equal(req.DNSNames, []string{"node-a.example", "node-a.internal"}) || len(req.IPAddresses) != 2 {
		t.Errorf("CSR names %v IPs %v", req.DNSNames, req.IPAddresses)
	}
	if fi, err := os.Stat(filepath.Join(dir, "kubelet-server-current.pem")); err != nil {
		t.Errorf("bootstrapped pair not stored: %v", err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("bootstrapped pair has mode %04o, want 0600", fi.Mode().Perm())
	}
	if fi, err := os.Stat(dir); err != nil {
		t.Errorf("certificate directory: %v", err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("certificate directory has mode %04o, want 0700", fi.Mode().Perm())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
		if mf.GetName() == "kubelet_certificate_manager_server_ttl_seconds" {
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v <= 0 || v > 3600 {
				t.Errorf("ttl gauge = %v, want the issued certificate's remaining life", v)
			}
		}
	}
	for _, want := range []string{"kubelet_certificate_manager_server_ttl_seconds", "kubelet_server_expiration_renew_errors"} {
		if !slices.Contains(names, want) {
			t.Errorf("metric %s not registered (have %v)", want, names)
		}
	}
}

func TestServingTemplateNeedsAnIP(t *testing.T) {
	if tmpl := servingTemplate(testNode, func() []v1.NodeAddress {
		return []v1.NodeAddress{{Type: v1.NodeHostName, Address: "only-a-name"}}
	})(); tmpl != nil {
		t.Errorf("template without an IP: %+v", tmpl)
	}
	tmpl := servingTemplate(testNode, nodeAddresses)()
	if tmpl == nil || tmpl.Subject.CommonName != "system:node:node-a" || len(tmpl.IPAddresses) != 2 {
		t.Errorf("template %+v", tmpl)
	}
}

// A serving pair or client CA bundle that becomes unreadable keeps the last
// good one with an error on the node's logger (it names the node), not on
// klog's global one.
func TestReloadErrorsOnTheNodesLogger(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	writePair(t, ca, certFile, keyFile, "first")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	var lines []string
	logger := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}).WithValues("node", "node-a")
	clk := clocktesting.NewFakeClock(time.Now())
	kp := &keyPairFiles{certFile: certFile, keyFile: keyFile, clock: clk, interval: time.Second, logger: logger}
	cas := &caBundle{path: caFile, clock: clk, interval: time.Second}
	if _, err := kp.current(); err != nil {
		t.Fatal(err)
	}
	if _, err := cas.pool(logger); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{certFile, caFile} {
		if err := os.WriteFile(f, []byte("not PEM"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(time.Second)
	if c, err := kp.current(); err != nil || c == nil {
		t.Fatalf("after a broken pair: %v, %v; want the previous one", c, err)
	}
	if p, err := cas.pool(logger); err != nil || p == nil {
		t.Fatalf("after a broken bundle: %v, %v; want the previous one", p, err)
	}
	if len(lines) != 2 {
		t.Fatalf("logged %q, want the two reload errors", lines)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"node"="node-a"`) {
			t.Errorf("line %s does not name the node", l)
		}
	}
}
