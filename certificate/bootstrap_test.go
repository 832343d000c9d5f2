package certificate

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
)

// testSigner approves and signs every request at creation, as the
// controller manager's csrapproving and csrsigning controllers do, with
// certificates valid for lifetime (negative: already expired).
type testSigner struct {
	t        *testing.T
	ca       *x509.Certificate
	caKey    crypto.Signer
	caPEM    []byte
	lifetime time.Duration
	requests atomic.Int32
	last     atomic.Pointer[certificatesv1.CertificateSigningRequest]
}

func newTestSigner(t *testing.T) *testSigner {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "test-ca"}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &testSigner{t: t, ca: ca, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), lifetime: time.Hour}
}

func (s *testSigner) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		req := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		s.requests.Add(1)
		s.last.Store(req.DeepCopy())
		block, _ := pem.Decode(req.Spec.Request)
		cr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			s.t.Errorf("request %s: %v", req.Name, err)
			return false, nil, nil
		}
		now := time.Now()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(now.UnixNano()), Subject: cr.Subject,
			NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(s.lifetime),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, cr.PublicKey, s.caKey)
		if err != nil {
			s.t.Errorf("sign %s: %v", req.Name, err)
			return false, nil, nil
		}
		req.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "AutoApproved"}}
		req.Status.Certificate = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		return false, nil, nil
	})
	return c
}

// writeBootstrapKubeconfig writes a bootstrap kubeconfig with a bootstrap
// token, as kubeadm's bootstrap-kubelet.conf.
func writeBootstrapKubeconfig(t *testing.T, dir string, caPEM []byte) string {
	t.Helper()
	path := filepath.Join(dir, "bootstrap-kubelet.conf")
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"kubernetes": {Server: "https://10.0.0.10:6443", CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"tls-bootstrap-token-user": {Token: "abcdef.0123456789abcdef"}},
		Contexts:       map[string]*clientcmdapi.Context{"tls-bootstrap-token-user@kubernetes": {Cluster: "kubernetes", AuthInfo: "tls-bootstrap-token-user"}},
		CurrentContext: "tls-bootstrap-token-user@kubernetes",
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func testOptions(t *testing.T, s *testSigner) Options {
	dir := t.TempDir()
	return Options{
		KubeconfigPath:          filepath.Join(dir, "kubelet.conf"),
		BootstrapKubeconfigPath: writeBootstrapKubeconfig(t, dir, s.caPEM),
		CertDir:                 filepath.Join(dir, "pki"),
		NodeName:                "node-a",
		NewClient:               func(*rest.Config) (kubernetes.Interface, error) { return s.client(), nil },
	}
}

// TestBootstrapRequestsAndWritesTheKubeletsFiles: a node without a
// kubeconfig requests its client certificate from the kubelet's signer as
// system:node:<name>, stores it under the kubelet's file names with mode
// 0600, and writes a kubeconfig that uses it; a second start skips the
// bootstrap.
func TestBootstrapRequestsAndWritesTheKubeletsFiles(t *testing.T) {
	s := newTestSigner(t)
	opts := testOptions(t, s)
	if err := Bootstrap(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	req := s.last.Load()
	if req == nil || s.requests.Load() != 1 {
		t.Fatalf("%d requests, want 1", s.requests.Load())
	}
	if req.Spec.SignerName != "kubernetes.io/kube-apiserver-client-kubelet" {
		t.Errorf("signer %q", req.Spec.SignerName)
	}
	block, _ := pem.Decode(req.Spec.Request)
	cr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Subject.CommonName != "system:node:node-a" || len(cr.Subject.Organization) != 1 || cr.Subject.Organization[0] != "system:nodes" {
		t.Errorf("subject %v", cr.Subject)
	}
	current := filepath.Join(opts.CertDir, "kubelet-client-current.pem")
	target, err := os.Readlink(current)
	if err != nil {
		t.Fatalf("kubelet-client-current.pem: %v", err)
	}
	if m, _ := filepath.Match("kubelet-client-*.pem", filepath.Base(target)); !m {
		t.Errorf("kubelet-client-current.pem points at %s", target)
	}
	fi, err := os.Stat(current)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("pair mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(opts.CertDir, "kubelet-client.key.tmp")); !os.IsNotExist(err) {
		t.Errorf("the request's key is left behind: %v", err)
	}
	kc, err := clientcmd.LoadFromFile(opts.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	auth, cluster := kc.AuthInfos[ctx.AuthInfo], kc.Clusters[ctx.Cluster]
	if auth.ClientCertificate != current || auth.ClientKey != current {
		t.Errorf("kubeconfig client certificate %s, key %s; want %s", auth.ClientCertificate, auth.ClientKey, current)
	}
	if cluster.Server != "https://10.0.0.10:6443" || string(cluster.CertificateAuthorityData) != string(s.caPEM) {
		t.Errorf("kubeconfig cluster %s, CA %d bytes; want the bootstrap kubeconfig's", cluster.Server, len(cluster.CertificateAuthorityData))
	}

	if err := Bootstrap(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if n := s.requests.Load(); n != 1 {
		t.Errorf("a node with a valid client certificate requested another (%d requests)", n)
	}
}

// TestBootstrapReplacesAnExpiredCertificate: a kubeconfig whose client
// certificate expired is bootstrapped again; a lost kubeconfig with a
// valid pair in the certificate directory is written again without a
// request.
func TestBootstrapReplacesAnExpiredCertificate(t *testing.T) {
	s := newTestSigner(t)
	s.lifetime = -time.Minute
	opts := testOptions(t, s)
	if err := Bootstrap(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	s.lifetime = time.Hour
	if err := Bootstrap(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2 (the first certificate was expired)", n)
	}
	if !valid(context.Background(), opts.KubeconfigPath) {
		t.Error("the kubeconfig's certificate is not valid after the second bootstrap")
	}
	if err := os.Remove(opts.KubeconfigPath); err != nil {
		t.Fatal(err)
	}
	if err := Bootstrap(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Errorf("%d requests after the kubeconfig was lost, want still 2 (the valid pair is reused)", n)
	}
	if !valid(context.Background(), opts.KubeconfigPath) {
		t.Error("the kubeconfig was not written again")
	}
}
