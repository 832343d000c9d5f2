package certificate

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"
	certutil "k8s.io/client-go/util/cert"
	clientcert "k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// File names in the certificate directory, the kubelet's.
const (
	// PairPrefix names the client pairs: <prefix>-<timestamp>.pem and the
	// <prefix>-current.pem symlink.
	PairPrefix = "kubelet-client"
	// tmpPrivateKeyFile holds the key of a request in flight, so a
	// restarted agent asks again with the same key.
	tmpPrivateKeyFile = "kubelet-client.key.tmp"
	// issueTimeout is how long Bootstrap waits for the certificate once
	// requested (the kubelet's hour).
	issueTimeout = time.Hour
)

// Options configures Bootstrap.
type Options struct {
	// KubeconfigPath is the kubeconfig the agent uses (--kubeconfig); it is
	// written when the node bootstraps. Required.
	KubeconfigPath string
	// BootstrapKubeconfigPath holds the credentials that may request a
	// client certificate (--bootstrap-kubeconfig). Required.
	BootstrapKubeconfigPath string
	// CertDir receives the key pair (--cert-dir, <root-dir>/pki). Required.
	CertDir string
	// NodeName is the node the certificate is for. Required.
	NodeName string
	// NewClient builds the client that sends the request from the
	// bootstrap kubeconfig's configuration; nil uses
	// kubernetes.NewForConfig. Tests give a fake.
	NewClient func(*rest.Config) (kubernetes.Interface, error)
}

// Bootstrap makes sure Options.KubeconfigPath holds a valid client
// certificate, requesting one with the bootstrap credentials when it does
// not (see the package documentation). It blocks until the certificate is
// issued, for at most an hour, or until ctx is done.
func Bootstrap(ctx context.Context, opts Options) error {
	if opts.KubeconfigPath == "" || opts.BootstrapKubeconfigPath == "" || opts.CertDir == "" || opts.NodeName == "" {
		return errors.New("client certificate bootstrap: KubeconfigPath, BootstrapKubeconfigPath, CertDir and NodeName are required")
	}
	logger := klog.FromContext(ctx)
	if valid(ctx, opts.KubeconfigPath) {
		logger.V(2).Info("Kubeconfig exists and is valid, skipping bootstrap", "path", opts.KubeconfigPath)
		return nil
	}
	logger.Info("Using the bootstrap kubeconfig to request a client certificate", "bootstrapKubeconfig", opts.BootstrapKubeconfigPath, "certDir", opts.CertDir)
	bootstrap, err := clientcmd.BuildConfigFromFlags("", opts.BootstrapKubeconfigPath)
	if err != nil {
		return fmt.Errorf("client certificate bootstrap: load bootstrap kubeconfig %s: %w", opts.BootstrapKubeconfigPath, err)
	}
	newClient := opts.NewClient
	if newClient == nil {
		newClient = func(c *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
	}
	client, err := newClient(bootstrap)
	if err != nil {
		return fmt.Errorf("client certificate bootstrap: client from %s: %w", opts.BootstrapKubeconfigPath, err)
	}
	if err := os.MkdirAll(opts.CertDir, 0o700); err != nil {
		return fmt.Errorf("client certificate bootstrap: %w", err)
	}
	store, err := clientcert.NewFileStoreWithLogger(logger, PairPrefix, opts.CertDir, opts.CertDir, "", "")
	if err != nil {
		return fmt.Errorf("client certificate bootstrap: certificate store in %s: %w", opts.CertDir, err)
	}

	// A pair already in the store (the kubeconfig was lost, say) is used
	// as it is when still valid; its key otherwise.
	var keyData []byte
	if cert, err := store.Current(); err == nil && cert.Leaf != nil {
		if now := time.Now(); now.Before(cert.Leaf.NotAfter) && now.After(cert.Leaf.NotBefore) {
			logger.Info("Using the valid client certificate in the certificate directory", "path", store.CurrentPath())
			return writeKubeconfig(bootstrap, opts.KubeconfigPath, store.CurrentPath())
		}
		if cert.PrivateKey != nil {
			if keyData, err = keyutil.MarshalPrivateKeyToPEM(cert.PrivateKey); err != nil {
				keyData = nil
			}
		}
	}
	keyPath := filepath.Join(opts.CertDir, tmpPrivateKeyFile)
	if _, err := keyutil.ParsePrivateKeyPEM(keyData); err != nil {
		if keyData, _, err = keyutil.LoadOrGenerateKeyFile(keyPath); err != nil {
			return fmt.Errorf("client certificate bootstrap: private key %s: %w", keyPath, err)
		}
	}
	certData, err := requestCertificate(ctx, client, keyData, opts.NodeName)
	if err != nil {
		return fmt.Errorf("client certificate bootstrap for node %s: %w", opts.NodeName, err)
	}
	if _, err := store.Update(certData, keyData); err != nil {
		return fmt.Errorf("client certificate bootstrap: store the certificate in %s: %w", opts.CertDir, err)
	}
	if err := os.Remove(keyPath); err != nil && !os.IsNotExist(err) {
		logger.V(2).Info("Cannot remove the request's private key", "path", keyPath, "err", err)
	}
	logger.Info("Client certificate issued", "path", store.CurrentPath())
	return writeKubeconfig(bootstrap, opts.KubeconfigPath, store.CurrentPath())
}

// valid reports whether the kubeconfig at path exists and has a client
// certificate none of whose certificates has expired.
func valid(ctx context.Context, path string) bool {
	logger := klog.FromContext(ctx)
	if _, err := os.Stat(path); err != nil {
		return false
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		logger.Info("Existing kubeconfig cannot be read; bootstrapping", "path", path, "err", err)
		return false
	}
	tc, err := cfg.TransportConfig()
	if err != nil {
		logger.Info("Existing kubeconfig has no usable transport; bootstrapping", "path", path, "err", err)
		return false
	}
	if _, err := transport.TLSConfigFor(tc); err != nil {
		logger.Info("Existing kubeconfig's TLS configuration cannot be loaded; bootstrapping", "path", path, "err", err)
		return false
	}
	certs, err := certutil.ParseCertsPEM(tc.TLS.CertData)
	if err != nil || len(certs) == 0 {
		logger.Info("Existing kubeconfig has no client certificate; bootstrapping", "path", path, "err", err)
		return false
	}
	now := time.Now()
	for _, c := range certs {
		if now.After(c.NotAfter) {
			logger.Info("Existing kubeconfig's client certificate expired; bootstrapping", "path", path, "notAfter", c.NotAfter)
			return false
		}
	}
	return true
}

// requestCertificate sends the node's CertificateSigningRequest and waits
// for the certificate.
func requestCertificate(ctx context.Context, client kubernetes.Interface, keyData []byte, nodeName string) ([]byte, error) {
	key, err := keyutil.ParsePrivateKeyPEM(keyData)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key %T cannot sign", key)
	}
	subject := &pkix.Name{Organization: []string{"system:nodes"}, CommonName: "system:node:" + nodeName}
	csrData, err := certutil.MakeCSR(key, subject, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("make the certificate request: %w", err)
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	if _, ok := key.(*rsa.PrivateKey); ok {
		usages = append(usages, certificatesv1.UsageKeyEncipherment)
	}
	name, err := requestName(signer.Public(), subject, usages)
	if err != nil {
		return nil, err
	}
	reqName, reqUID, err := csr.RequestCertificateWithContext(ctx, client, csrData, name, certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, issueTimeout)
	defer cancel()
	klog.FromContext(ctx).Info("Waiting for the client certificate to be issued", "csr", reqName)
	return csr.WaitForCertificate(ctx, client, reqName, reqUID)
}

// requestName is the kubelet's name for a request: node-csr- and a digest
// of the public key, subject and usages, so a restarted agent finds its
// request again instead of making another.
func requestName(publicKey any, subject *pkix.Name, usages []certificatesv1.KeyUsage) (string, error) {
	h := sha512.New512_256()
	encode := base64.RawURLEncoding.EncodeToString
	// '|' is not in the alphabet, so no two inputs write the same stream.
	write := func(data []byte) {
		h.Write([]byte(encode(data)))
		h.Write([]byte{'|'})
	}
	der, err := x509.MarshalPKIXPublicKey(publicKey)
	if err != nil {
		return "", fmt.Errorf("public key: %w", err)
	}
	write(der)
	write([]byte(subject.CommonName))
	for _, o := range subject.Organization {
		write([]byte(o))
	}
	for _, u := range usages {
		write([]byte(u))
	}
	return "node-csr-" + encode(h.Sum(nil)), nil
}

// writeKubeconfig writes the kubeconfig at path: the bootstrap
// kubeconfig's server and CA, and the pair at pemPath as the client
// certificate and key, as the kubelet writes it.
func writeKubeconfig(bootstrap *rest.Config, path, pemPath string) error {
	caFile, caData := bootstrap.CAFile, []byte(nil)
	if caFile == "" {
		caData = bootstrap.CAData
	}
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"default-cluster": {
			Server: bootstrap.Host, InsecureSkipTLSVerify: bootstrap.Insecure,
			CertificateAuthority: caFile, CertificateAuthorityData: caData,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificate: pemPath, ClientKey: pemPath}},
		Contexts: map[string]*clientcmdapi.Context{"default-context": {
			Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default",
		}},
		CurrentContext: "default-context",
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
