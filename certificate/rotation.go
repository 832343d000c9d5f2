package certificate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcert "k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"
)

// RotationOptions configures NewClientRotation.
type RotationOptions struct {
	// KubeconfigPath is the agent's kubeconfig, whose client certificate
	// files are the pair in CertDir (as Bootstrap writes it). Required.
	KubeconfigPath string
	// BootstrapKubeconfigPath, when set, is used to request a certificate
	// when the current one is gone or expired.
	BootstrapKubeconfigPath string
	// CertDir holds kubelet-client-current.pem. Required.
	CertDir string
	// NodeName is the node the certificate is for. Required.
	NodeName string
	// NewClient builds the client that sends the renewal from a
	// kubeconfig's configuration; nil uses kubernetes.NewForConfig.
	NewClient func(*rest.Config) (kubernetes.Interface, error)
	// Registerer receives
	// kubelet_certificate_manager_client_expiration_renew_errors and
	// kubelet_certificate_manager_client_ttl_seconds; nil registers
	// nothing.
	Registerer prometheus.Registerer
}

// NewClientRotation returns client-go's certificate manager set up as the
// kubelet's client certificate manager (rotateCertificates): it renews
// kubelet-client-current.pem in CertDir at 70–90 % of the certificate's
// lifetime through the kubernetes.io/kube-apiserver-client-kubelet signer,
// authenticated with the current certificate (the bootstrap credentials
// when there is none). Clients built on UpdateTransport present the
// manager's current certificate and move to a renewed one within 10
// seconds, without a restart. A kubeconfig with the pair embedded (or in
// other files) seeds the store, and is renewed into CertDir at once.
// Start it with Start, stop it with Stop; construction does no I/O but
// reading CertDir.
func NewClientRotation(ctx context.Context, o RotationOptions) (clientcert.Manager, error) {
	if o.KubeconfigPath == "" || o.CertDir == "" || o.NodeName == "" {
		return nil, errors.New("client certificate rotation: KubeconfigPath, CertDir and NodeName are required")
	}
	if err := os.MkdirAll(o.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("client certificate rotation: %w", err)
	}
	// The kubeconfig's own pair seeds the store, as the kubelet's: files
	// are the store's fallback, embedded data its bootstrap pair (kubeadm
	// init writes the control plane node's kubelet.conf so, then points
	// it at kubelet-client-current.pem once rotated).
	var certFile, keyFile string
	var certPEM, keyPEM []byte
	if kc, err := clientcmd.BuildConfigFromFlags("", o.KubeconfigPath); err == nil {
		certPEM, keyPEM = kc.CertData, kc.KeyData
		current := filepath.Join(o.CertDir, PairPrefix+"-current.pem")
		if kc.CertFile != current || kc.KeyFile != current {
			certFile, keyFile = kc.CertFile, kc.KeyFile
		}
	}
	store, err := clientcert.NewFileStoreWithLogger(klog.FromContext(ctx).V(3), PairPrefix, o.CertDir, o.CertDir, certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate rotation: certificate store in %s: %w", o.CertDir, err)
	}
	clientset := func(current *tls.Certificate) (kubernetes.Interface, error) {
		path := o.KubeconfigPath
		if current == nil {
			if o.BootstrapKubeconfigPath == "" {
				return nil, fmt.Errorf("client certificate rotation for node %s: no valid certificate and no bootstrap kubeconfig", o.NodeName)
			}
			path = o.BootstrapKubeconfigPath
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("client certificate rotation: load %s: %w", path, err)
		}
		if o.NewClient != nil {
			return o.NewClient(cfg)
		}
		return kubernetes.NewForConfig(cfg)
	}
	renewErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "kubelet", Subsystem: "certificate_manager", Name: "client_expiration_renew_errors",
		Help: "[ALPHA] Counter of certificate renewal errors.",
	})
	m, err := clientcert.NewManager(&clientcert.Config{
		ClientsetFn: clientset,
		Template: &x509.CertificateRequest{Subject: pkix.Name{
			CommonName: "system:node:" + o.NodeName, Organization: []string{"system:nodes"},
		}},
		SignerName:              certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:               clientcert.DefaultKubeletClientGetUsages,
		CertificateStore:        store,
		BootstrapCertificatePEM: certPEM,
		BootstrapKeyPEM:         keyPEM,
		CertificateRenewFailure: renewErrors,
		Name:                    "kubelet-client",
		Ctx:                     &ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("client certificate rotation for node %s: %w", o.NodeName, err)
	}
	if o.Registerer != nil {
		ttl := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "kubelet", Subsystem: "certificate_manager", Name: "client_ttl_seconds",
			Help: "[ALPHA] Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF.",
		}, func() float64 {
			if c := m.Current(); c != nil && c.Leaf != nil {
				return math.Trunc(time.Until(c.Leaf.NotAfter).Seconds())
			}
			return math.Inf(1)
		})
		for _, c := range []prometheus.Collector{renewErrors, ttl} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("client certificate rotation: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
