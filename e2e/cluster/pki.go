package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CertPair is a certificate and its private key, PEM files on disk.
type CertPair struct {
	Cert string
	Key  string
}

// PKI is the cluster's certificates, generated fresh for every control plane
// into Dir. All keys are ECDSA P-256; certificates are valid for 30 days.
type PKI struct {
	Dir string
	// CA signs every serving and client certificate; the apiserver trusts
	// client certificates it issued (--client-ca-file).
	CA CertPair
	// FrontProxyCA signs the apiserver's aggregation-layer client certificate.
	FrontProxyCA CertPair
	// ServiceAccount is the key pair that signs and verifies service account
	// tokens (Cert holds the public key, not a certificate).
	ServiceAccount CertPair

	ca         *authority
	frontProxy *authority
}

type authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

const certValidity = 30 * 24 * time.Hour

// NewPKI creates a CA, a front-proxy CA and the service-account key in dir.
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	p := &PKI{Dir: dir}
	var err error
	if p.ca, p.CA, err = newAuthority(dir, "ca", "nodekit-e2e-ca"); err != nil {
		return nil, err
	}
	if p.frontProxy, p.FrontProxyCA, err = newAuthority(dir, "front-proxy-ca", "nodekit-e2e-front-proxy-ca"); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service account key: %w", err)
	}
	p.ServiceAccount = CertPair{Cert: filepath.Join(dir, "sa.pub"), Key: filepath.Join(dir, "sa.key")}
	if err := writeKey(p.ServiceAccount.Key, key); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("encode service account public key: %w", err)
	}
	if err := os.WriteFile(p.ServiceAccount.Cert, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, fmt.Errorf("write service account public key: %w", err)
	}
	return p, nil
}

// CAData returns the cluster CA certificate, PEM-encoded.
func (p *PKI) CAData() []byte { return p.ca.certPEM }

// ClientCert issues a client certificate for user (the CN) in groups (the O
// fields), signed by the cluster CA, written as Dir/<name>.crt and .key.
func (p *PKI) ClientCert(name, user string, groups ...string) (CertPair, error) {
	return p.issue(p.ca, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// FrontProxyClientCert issues the apiserver's aggregation client certificate.
func (p *PKI) FrontProxyClientCert(name, user string) (CertPair, error) {
	return p.issue(p.frontProxy, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// ServingCert issues a serving certificate for the given IPs and DNS names.
func (p *PKI) ServingCert(name, cn string, ips []net.IP, dnsNames []string) (CertPair, error) {
	return p.issue(p.ca, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
		DNSNames:    dnsNames,
	})
}

// WriteKubeconfig writes a kubeconfig for server that trusts the cluster CA
// and authenticates with creds; the certificate and key are embedded so the
// file stands alone.
func (p *PKI) WriteKubeconfig(path, server string, creds CertPair) error {
	certPEM, err := os.ReadFile(creds.Cert)
	if err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	keyPEM, err := os.ReadFile(creds.Key)
	if err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodekit-e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.ca.certPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["nodekit-e2e"] = &clientcmdapi.Context{Cluster: "nodekit-e2e", AuthInfo: "user"}
	cfg.CurrentContext = "nodekit-e2e"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func (p *PKI) issue(ca *authority, name string, tmpl *x509.Certificate) (CertPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CertPair{}, fmt.Errorf("issue certificate %s: %w", name, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return CertPair{}, fmt.Errorf("issue certificate %s: %w", name, err)
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(certValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return CertPair{}, fmt.Errorf("issue certificate %s: %w", name, err)
	}
	pair := CertPair{Cert: filepath.Join(p.Dir, name+".crt"), Key: filepath.Join(p.Dir, name+".key")}
	if err := os.WriteFile(pair.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return CertPair{}, fmt.Errorf("issue certificate %s: %w", name, err)
	}
	if err := writeKey(pair.Key, key); err != nil {
		return CertPair{}, err
	}
	return pair, nil
}

func newAuthority(dir, name, cn string) (*authority, CertPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, CertPair{}, fmt.Errorf("create %s: %w", name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, CertPair{}, fmt.Errorf("create %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, CertPair{}, fmt.Errorf("create %s: %w", name, err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	pair := CertPair{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	if err := os.WriteFile(pair.Cert, certPEM, 0o644); err != nil {
		return nil, CertPair{}, fmt.Errorf("create %s: %w", name, err)
	}
	if err := writeKey(pair.Key, key); err != nil {
		return nil, CertPair{}, err
	}
	return &authority{cert: cert, certPEM: certPEM, key: key}, pair, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key %s: %w", path, err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	return nil
}
