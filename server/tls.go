package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Self-signed certificate file names in CertDirectory, as the kubelet's.
const (
	SelfSignedCertName = "kubelet.crt"
	SelfSignedKeyName  = "kubelet.key"
	// bootstrapPairPrefix names the bootstrapped pair in CertDirectory:
	// kubelet-server-current.pem and its dated predecessors.
	bootstrapPairPrefix = "kubelet-server"
)

var errNoServingCert = errors.New("no serving certificate available for the kubelet")

// fileStamp identifies a version of a file cheaply.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stat(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// caBundle is a client CA file, re-read when it changes (checked at most
// once per interval, on use). A file that becomes unreadable or invalid
// keeps the last good pool.
type caBundle struct {
	path     string
	clock    clock.PassiveClock
	interval time.Duration

	mu      sync.Mutex
	p       *x509.CertPool
	stamp   fileStamp
	checked time.Time
}

// pool returns the bundle, re-read when the file changed; a bundle that
// became unreadable keeps the previous one, with an error on logger.
func (c *caBundle) pool(logger logr.Logger) (*x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if c.p != nil && now.Sub(c.checked) < c.interval {
		return c.p, nil
	}
	c.checked = now
	st, err := stat(c.path)
	if err == nil && c.p != nil && st == c.stamp {
		return c.p, nil
	}
	var p *x509.CertPool
	if err == nil {
		p, err = certutil.NewPool(c.path)
	}
	if err != nil {
		if c.p != nil {
			logger.Error(err, "Keeping the previous client CA bundle", "file", c.path)
			return c.p, nil
		}
		return nil, fmt.Errorf("load client CA file %s: %w", c.path, err)
	}
	c.p, c.stamp = p, st
	return p, nil
}

// keyPairFiles is a serving certificate and key on disk, re-read when
// either changes (checked at most once per interval, on use), as the
// kubelet's ReloadKubeletServerCertificateFile. A pair that becomes
// unreadable keeps the last good one.
type keyPairFiles struct {
	certFile, keyFile string
	clock             clock.PassiveClock
	interval          time.Duration
	// logger takes the error when a changed pair cannot be read.
	logger logr.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	cst, kst fileStamp
	checked  time.Time
}

func (k *keyPairFiles) current() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock.Now()
	if k.cert != nil && now.Sub(k.checked) < k.interval {
		return k.cert, nil
	}
	k.checked = now
	cst, err1 := stat(k.certFile)
	kst, err2 := stat(k.keyFile)
	if err := errors.Join(err1, err2); err == nil && k.cert != nil && cst == k.cst && kst == k.kst {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			k.logger.Error(err, "Keeping the previous serving certificate", "certFile", k.certFile, "keyFile", k.keyFile)
			return k.cert, nil
		}
		return nil, fmt.Errorf("load serving certificate %s, %s: %w", k.certFile, k.keyFile, err)
	}
	k.cert, k.cst, k.kst = &cert, cst, kst
	return k.cert, nil
}

// hostnamesAndIPs splits node addresses into DNS names and IPs, deduplicated
// and sorted, as the kubelet's serving certificate template does.
func hostnamesAndIPs(addrs []v1.NodeAddress) ([]string, []net.IP) {
	var names []string
	var ips []net.IP
	for _, a := range addrs {
		if a.Address == "" {
			continue
		}
		ip := net.ParseIP(a.Address)
		switch a.Type {
		case v1.NodeHostName:
			if ip != nil {
				ips = append(ips, ip)
			} else {
				names = append(names, a.Address)
			}
		case v1.NodeExternalIP, v1.NodeInternalIP:
			if ip != nil {
				ips = append(ips, ip)
			}
		case v1.NodeExternalDNS, v1.NodeInternalDNS:
			names = append(names, a.Address)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	slices.SortFunc(ips, func(a, b net.IP) int { return cmpString(a.String(), b.String()) })
	ips = slices.CompactFunc(ips, func(a, b net.IP) bool { return a.Equal(b) })
	return names, ips
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ensureSelfSigned writes a self-signed serving pair to certFile and
// keyFile unless both are readable already: issued for host (the node's
// hostname) and the node's other names and IPs, with the directory 0700
// and the files 0600.
func ensureSelfSigned(logger klog.Logger, certFile, keyFile, host string, names []string, ips []net.IP) error {
	ok, err := certutil.CanReadCertAndKey(certFile, keyFile)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	alt := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == host })
	cert, key, err := certutil.GenerateSelfSignedCertKey(host, ips, alt)
	if err != nil {
		return fmt.Errorf("unable to generate self signed cert: %w", err)
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{certFile, cert}, {keyFile, key}} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
			return fmt.Errorf("create certificate directory for %s: %w", f.path, err)
		}
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	logger.V(4).Info("Using self-signed cert", "TLSCertFile", certFile, "TLSPrivateKeyFile", keyFile)
	return nil
}

// servingTemplate returns the CSR template of the node's serving
// certificate (CN system:node:<name>, O system:nodes, the node's DNS names
// and IPs), or nil while the node has no IP address, as the kubelet (which
// needs one IP unless AllowDNSOnlyNodeCSR is on).
func servingTemplate(nodeName string, addrs func() []v1.NodeAddress) func() *x509.CertificateRequest {
	return func() *x509.CertificateRequest {
		if addrs == nil {
			return nil
		}
		names, ips := hostnamesAndIPs(addrs())
		if len(ips) == 0 {
			return nil
		}
		return &x509.CertificateRequest{
			Subject:     pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
			DNSNames:    names,
			IPAddresses: ips,
		}
	}
}

// certMetrics are the kubelet's serving certificate manager metrics.
type certMetrics struct {
	rotation prometheus.Histogram
	renewErr prometheus.Counter
}

func newCertMetrics() *certMetrics {
	return &certMetrics{
		rotation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet",
			Name:      "certificate_manager_server_rotation_seconds",
			Help:      "[ALPHA] Histogram of the number of seconds the previous certificate lived before being rotated.",
			Buckets:   []float64{60, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000},
		}),
		renewErr: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "server_expiration_renew_errors",
			Help:      "[ALPHA] Counter of certificate renewal errors.",
		}),
	}
}

// register registers the metrics and the TTL gauge of current's
// certificate with reg (nil registers nothing).
func (m *certMetrics) register(reg prometheus.Registerer, current func() *tls.Certificate, clk clock.PassiveClock) error {
	if reg == nil {
		return nil
	}
	ttl := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "kubelet",
		Name:      "certificate_manager_server_ttl_seconds",
		Help: "[ALPHA] Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds " +
			"until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF.",
	}, func() float64 {
		if c := current(); c != nil && c.Leaf != nil {
			return math.Trunc(c.Leaf.NotAfter.Sub(clk.Now()).Seconds())
		}
		return math.Inf(1)
	})
	for _, c := range []prometheus.Collector{m.rotation, m.renewErr, ttl} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register certificate manager metrics: %w", err)
		}
	}
	return nil
}

// newBootstrapManager returns client-go's certificate manager set up as the
// kubelet's serving certificate manager: the pair lives in certDir as
// kubelet-server-current.pem (certFile/keyFile, when set, seed it), CSRs
// go to the kubelet-serving signer with the serving usages, and the
// certificate rotates at 70–90% of its lifetime or when the node's
// addresses change. A missing certDir is created 0700.
func newBootstrapManager(ctx context.Context, client kubernetes.Interface, o Options, metrics *certMetrics) (certificate.Manager, error) {
	// client-go's store would create a missing directory 0755: the node's
	// private keys go in a directory only the agent may enter.
	if err := os.MkdirAll(o.TLS.CertDirectory, 0o700); err != nil {
		return nil, fmt.Errorf("create the certificate directory %s: %w", o.TLS.CertDirectory, err)
	}
	store, err := certificate.NewFileStoreWithLogger(klog.FromContext(ctx).V(3), bootstrapPairPrefix, o.TLS.CertDirectory, o.TLS.CertDirectory, o.TLS.CertFile, o.TLS.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("failed to initialize server certificate store: %w", err)
	}
	cfg := &certificate.Config{
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate:      servingTemplate(o.NodeName, o.NodeAddresses),
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
		Name:             "kubelet-serving",
		Ctx:              &ctx,
	}
	if metrics != nil {
		cfg.CertificateRotation = metrics.rotation
		cfg.CertificateRenewFailure = metrics.renewErr
	}
	m, err := certificate.NewManager(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to initialize server certificate manager: %w", err)
	}
	return m, nil
}

// tlsParams parses tlsMinVersion and tlsCipherSuites as the kubelet's flags.
func tlsParams(logger klog.Logger, o TLSOptions) (uint16, []uint16, error) {
	suites, err := cliflag.TLSCipherSuites(o.CipherSuites)
	if err != nil {
		return 0, nil, fmt.Errorf("tlsCipherSuites: %w", err)
	}
	insecure := cliflag.InsecureTLSCiphers()
	for name, id := range insecure {
		if slices.Contains(suites, id) {
			logger.Info("Use of insecure cipher detected.", "cipher", name)
		}
	}
	minVersion, err := cliflag.TLSVersion(o.MinVersion)
	if err != nil {
		return 0, nil, fmt.Errorf("tlsMinVersion: %w", err)
	}
	if minVersion == tls.VersionTLS13 && len(suites) != 0 {
		logger.Info("Warning: TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites")
	}
	return minVersion, suites, nil
}
