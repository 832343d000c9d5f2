package certificate

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

// TestClientRotationRenewsTheKubeconfigsPair: a client certificate past
// its rotation point is renewed through the kubelet's signer and the
// kubelet-client-current.pem the kubeconfig names points at the new pair.
func TestClientRotationRenewsTheKubeconfigsPair(t *testing.T) {
	s := newTestSigner(t)
	// Issued two hours ago, expiring in a minute: far past 90 % of its
	// lifetime.
	s.lifetime = time.Minute
	opts := testOptions(t, s)
	if err := Bootstrap(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(opts.CertDir, "kubelet-client-current.pem")
	notAfter := func() time.Time {
		data, err := os.ReadFile(current)
		if err != nil {
			return time.Time{}
		}
		certs, err := certutil.ParseCertsPEM(data)
		if err != nil || len(certs) == 0 {
			return time.Time{}
		}
		return certs[0].NotAfter
	}
	first := notAfter()
	if first.IsZero() {
		t.Fatal("no certificate in kubelet-client-current.pem")
	}
	s.lifetime = time.Hour
	reg := prometheus.NewPedanticRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := NewClientRotation(ctx, RotationOptions{
		KubeconfigPath: opts.KubeconfigPath, CertDir: opts.CertDir, NodeName: opts.NodeName,
		NewClient: opts.NewClient, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	defer m.Stop()
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c := m.Current()
		return notAfter().After(first.Add(30*time.Minute)) && c != nil && c.Leaf.NotAfter.After(first.Add(30*time.Minute)), nil
	})
	if err != nil {
		t.Fatalf("kubelet-client-current.pem or the manager still hold the certificate expiring at %v: %v", first, err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2 (bootstrap, renewal)", n)
	}
	if !valid(context.Background(), opts.KubeconfigPath) {
		t.Error("the kubeconfig does not hold a valid certificate after the renewal")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, f := range families {
		found[f.GetName()] = true
		if f.GetName() == "kubelet_certificate_manager_client_ttl_seconds" {
			if v := f.GetMetric()[0].GetGauge().GetValue(); v < 30*60 || v > 60*60 {
				t.Errorf("kubelet_certificate_manager_client_ttl_seconds %v, want the renewed certificate's (under an hour)", v)
			}
		}
	}
	for _, name := range []string{"kubelet_certificate_manager_client_expiration_renew_errors", "kubelet_certificate_manager_client_ttl_seconds"} {
		if !found[name] {
			t.Errorf("%s is not registered", name)
		}
	}
}

// TestClientRotationSeedsFromAnEmbeddedPair: a kubeconfig with its pair
// embedded (kubeadm init's first kubelet.conf) and no pair in the
// certificate directory: the embedded pair is renewed into
// kubelet-client-current.pem.
func TestClientRotationSeedsFromAnEmbeddedPair(t *testing.T) {
	s := newTestSigner(t)
	s.lifetime = time.Minute
	opts := testOptions(t, s)
	if err := Bootstrap(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	pair, err := os.ReadFile(filepath.Join(opts.CertDir, "kubelet-client-current.pem"))
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(opts.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	auth := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	auth.ClientCertificate, auth.ClientKey = "", ""
	auth.ClientCertificateData, auth.ClientKeyData = pair, pair
	if err := clientcmd.WriteToFile(*kc, opts.KubeconfigPath); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(opts.CertDir); err != nil {
		t.Fatal(err)
	}
	s.lifetime = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := NewClientRotation(ctx, RotationOptions{KubeconfigPath: opts.KubeconfigPath, CertDir: opts.CertDir, NodeName: opts.NodeName, NewClient: opts.NewClient})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	defer m.Stop()
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(filepath.Join(opts.CertDir, "kubelet-client-current.pem"))
		if err != nil {
			return false, nil
		}
		certs, err := certutil.ParseCertsPEM(data)
		return err == nil && len(certs) > 0 && time.Until(certs[0].NotAfter) > 30*time.Minute, nil
	})
	if err != nil {
		t.Fatalf("the embedded pair was not renewed into the certificate directory: %v", err)
	}
}
