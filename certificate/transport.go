package certificate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	clientcert "k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"
)

// The kubelet's periods (pkg/kubelet/certificate/transport.go).
const (
	// checkPeriod is how often the transport looks for a new certificate.
	checkPeriod = 10 * time.Second
	// firstCertificatePeriod is how often it looks while it has none.
	firstCertificatePeriod = time.Second
	// exitAfter is how long the agent runs without a valid certificate
	// while the API server answers before it gives up, so that its
	// supervisor or the bootstrap credentials can start it afresh.
	exitAfter = 5 * time.Minute
)

// TransportOptions configures UpdateTransport.
type TransportOptions struct {
	// Manager provides the client certificate (NewClientRotation).
	// Required.
	Manager clientcert.Manager
	// Dial opens the connections to the API server and CloseAll closes
	// every connection Dial opened (a k8s.io/client-go/util/connrotation
	// dialer and its tracker). Both required.
	Dial     func(ctx context.Context, network, address string) (net.Conn, error)
	CloseAll func()
}

// RotatingTransport watches the certificate a transport made by
// UpdateTransport presents; Run does the watching.
type RotatingTransport struct {
	o         TransportOptions
	period    time.Duration
	exitAfter time.Duration
	now       func() time.Time

	mu            sync.Mutex
	last          *tls.Certificate
	lastAvailable time.Time
}

// UpdateTransport returns a copy of cfg whose clients present
// o.Manager's current client certificate in every TLS handshake, as the
// kubelet's UpdateTransport (rotateCertificates): cfg's own client
// credentials (certificate, key, token) are dropped, its CA, server name
// and proxy kept, and cfg.DisableCompression applies. Connections are
// dialled with o.Dial. It returns the RotatingTransport whose Run closes
// them all (o.CloseAll) when the manager's certificate changes, so the
// next request handshakes with the new one, without a restart. cfg must
// not have a Transport, a Dial or WrapTransport of its own.
func UpdateTransport(cfg *rest.Config, o TransportOptions) (*rest.Config, *RotatingTransport, error) {
	if o.Manager == nil || o.Dial == nil || o.CloseAll == nil {
		return nil, nil, errors.New("rotating client transport: Manager, Dial and CloseAll are required")
	}
	if cfg.Transport != nil || cfg.Dial != nil || cfg.WrapTransport != nil {
		return nil, nil, fmt.Errorf("rotating client transport for %s: the configuration already has a transport or dialer", cfg.Host)
	}
	out := rest.AnonymousClientConfig(cfg)
	tlsConfig, err := rest.TLSConfigFor(out)
	if err != nil {
		return nil, nil, fmt.Errorf("rotating client transport for %s: TLS configuration: %w", cfg.Host, err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{}
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c := o.Manager.Current(); c != nil {
			return c, nil
		}
		// No certificate yet: the handshake goes on without one.
		return &tls.Certificate{}, nil
	}
	proxy := out.Proxy
	if proxy == nil {
		proxy = http.ProxyFromEnvironment
	}
	out.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         o.Dial,
		DisableCompression:  out.DisableCompression,
	})
	// The transport enforces the TLS settings; client-go refuses them
	// beside a transport of its own.
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Dial = nil
	out.Proxy = nil
	t := &RotatingTransport{
		o: o, period: checkPeriod, exitAfter: exitAfter, now: time.Now,
		last: o.Manager.Current(),
	}
	t.lastAvailable = t.now()
	return out, t, nil
}

// Run checks the manager's certificate every 10 seconds (every second
// until there is one) until ctx is done, and closes the transport's
// connections whenever it changed. It returns an error, for the agent to
// exit as the kubelet does, once the certificate has expired, or there
// has been none for 5 minutes, while the API server answers (the
// manager's ServerHealthy): the supervisor's restart then bootstraps
// afresh. With the server unreachable it only logs.
func (t *RotatingTransport) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	period := t.period
	if t.current() == nil {
		period = firstCertificatePeriod
	}
	timer := time.NewTimer(period)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if err := t.check(logger); err != nil {
			return err
		}
		period = t.period
		if t.current() == nil {
			period = firstCertificatePeriod
		}
		timer.Reset(period)
	}
}

func (t *RotatingTransport) current() *tls.Certificate {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// check is one look at the manager's certificate.
func (t *RotatingTransport) check(logger klog.Logger) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	curr := t.o.Manager.Current()
	now := t.now()
	switch {
	case curr == nil:
		if now.After(t.lastAvailable.Add(t.exitAfter)) {
			if t.o.Manager.ServerHealthy() {
				return fmt.Errorf("no valid client certificate since %v and the API server is responsive", t.lastAvailable)
			}
			logger.Error(nil, "No valid client certificate is found but the server is not responsive. A restart may be necessary to retrieve new initial credentials.", "lastCertificateAvailabilityTime", t.lastAvailable, "shutdownThreshold", t.exitAfter)
		}
	case curr.Leaf != nil && now.After(curr.Leaf.NotAfter):
		if t.o.Manager.ServerHealthy() {
			return fmt.Errorf("the client certificate (serial %s) expired at %v and the API server is responsive", curr.Leaf.SerialNumber, curr.Leaf.NotAfter)
		}
		logger.Error(nil, "The currently active client certificate has expired, but the server is not responsive. A restart may be necessary to retrieve new initial credentials.", "notAfter", curr.Leaf.NotAfter)
		t.lastAvailable = now
	default:
		t.lastAvailable = now
	}
	if curr == nil || curr == t.last {
		return nil
	}
	t.last = curr
	kv := []any{}
	if curr.Leaf != nil {
		kv = append(kv, "serial", curr.Leaf.SerialNumber.String(), "notAfter", curr.Leaf.NotAfter)
	}
	logger.Info("Certificate rotation detected, shutting down client connections to start using new credentials", kv...)
	t.o.CloseAll()
	return nil
}
