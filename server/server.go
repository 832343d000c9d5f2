package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/klog/v2"
)

// Route is one endpoint of the node API. Routes are the unit an embedder
// adds or replaces (see RouteGroup and Options.Routes).
type Route struct {
	// Path is a net/http ServeMux pattern without method or host, e.g.
	// "/healthz", "/exec/{podNamespace}/{podID}/{containerName}" or the
	// subtree "/logs/". A route whose Path equals a default route's replaces
	// it; two embedder routes with the same Path are an error.
	Path string
	// Methods lists the HTTP methods the route serves; others answer 405
	// "Method Not Allowed" with an Allow header. Empty serves all.
	Methods []string
	// Handler serves the route. On the secure port it runs after
	// authentication and authorization; UserFrom gives the user. A nil
	// Handler removes the default route with the same Path.
	Handler http.Handler
	// Subresources, when set, are the nodes subresources the route is
	// authorized against (any one allowing is enough) instead of the
	// kubelet's path mapping.
	Subresources []string
	// ReadOnly also serves the route on the read-only port (no
	// authentication), as the kubelet's healthz, pods, stats and metrics.
	ReadOnly bool
}

// Server is the kubelet's node API: the HTTPS server on Port with
// authentication and authorization and, when configured, the plain HTTP
// read-only server. Handler and ReadOnlyHandler may be served by an
// embedder instead of Run.
type Server struct {
	opts     Options
	secure   http.Handler
	readOnly http.Handler
	cas      *caBundle
	metrics  *httpMetrics
	slis     *sliMetrics

	ready     chan struct{}
	readyOnce sync.Once
	addr      net.Addr
	roAddr    net.Addr
}

// New returns a Server for opts, with defaults applied. It does no I/O:
// certificates and the client CA bundle are read (and a self-signed pair
// created) by Run, and on use.
func New(opts Options) (*Server, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, ready: make(chan struct{}), slis: newSLIMetrics()}
	if o.Authentication.ClientCAFile != "" {
		s.cas = &caBundle{path: o.Authentication.ClientCAFile, clock: o.Clock, interval: defaultCertReloadCheckInterval}
	}
	authnMetrics, err := newWebhookMetrics(o.Registerer, "authn")
	if err != nil {
		return nil, err
	}
	authzMetrics, err := newWebhookMetrics(o.Registerer, "authz")
	if err != nil {
		return nil, err
	}
	authn := o.Authenticator
	if authn == nil {
		a := &authenticator{anonymous: o.Authentication.Anonymous}
		if s.cas != nil {
			a.x509 = &x509Authenticator{cas: s.cas, clock: o.Clock}
		}
		if !o.Authentication.DisableWebhook {
			if o.Client == nil {
				return nil, errors.New("server: Client is required for the token webhook")
			}
			a.token = &tokenAuthenticator{
				client:  o.Client.AuthenticationV1().TokenReviews(),
				cache:   cache.NewLRUExpireCacheWithClock(defaultCacheSize, o.Clock),
				ttl:     o.Authentication.CacheTTL,
				timeout: defaultWebhookRequestTimeout,
				clock:   o.Clock,
				metrics: authnMetrics,
			}
		}
		authn = a
	}
	authz := o.Authorizer
	if authz == nil {
		if o.Authorization.Mode == AuthorizationModeAlwaysAllow {
			authz = alwaysAllow{}
		} else {
			if o.Client == nil {
				return nil, errors.New("server: Client is required for Webhook authorization")
			}
			authz = &sarAuthorizer{
				client:          o.Client.AuthorizationV1().SubjectAccessReviews(),
				cache:           cache.NewLRUExpireCacheWithClock(defaultCacheSize, o.Clock),
				authorizedTTL:   o.Authorization.AuthorizedTTL,
				unauthorizedTTL: o.Authorization.UnauthorizedTTL,
				timeout:         defaultWebhookRequestTimeout,
				clock:           o.Clock,
				metrics:         authzMetrics,
			}
		}
	}
	if s.metrics, err = newHTTPMetrics(o.Registerer); err != nil {
		return nil, err
	}
	routes, err := mergeRoutes(s.defaultRoutes(), o.Routes)
	if err != nil {
		return nil, err
	}
	if s.secure, err = buildMux(routes, func(r Route, h http.Handler) http.Handler {
		return withAuth(o.NodeName, authn, authz, r.Subresources, h)
	}); err != nil {
		return nil, err
	}
	s.secure = s.metrics.instrument("readwrite", routes, s.secure)
	if o.ReadOnlyPort > 0 || o.ReadOnlyListener != nil {
		var ro []Route
		for _, r := range routes {
			if r.ReadOnly {
				ro = append(ro, r)
			}
		}
		ro = append(ro, disabledRoutes(true)...)
		if s.readOnly, err = buildMux(ro, nil); err != nil {
			return nil, err
		}
		s.readOnly = s.metrics.instrument("readonly", ro, s.readOnly)
	}
	return s, nil
}

// mergeRoutes applies extra to defaults: same Path replaces, nil Handler
// removes, others are added.
func mergeRoutes(defaults, extra []Route) ([]Route, error) {
	out := make([]Route, 0, len(defaults)+len(extra))
	out = append(out, defaults...)
	seen := make(map[string]bool, len(extra))
	for _, r := range extra {
		if r.Path == "" || r.Path[0] != '/' {
			return nil, fmt.Errorf("server: route path %q must start with /", r.Path)
		}
		if seen[r.Path] {
			return nil, fmt.Errorf("server: two routes for %s", r.Path)
		}
		seen[r.Path] = true
		i := indexRoute(out, r.Path)
		switch {
		case i >= 0 && r.Handler == nil:
			out = append(out[:i], out[i+1:]...)
		case i >= 0:
			out[i] = r
		case r.Handler != nil:
			out = append(out, r)
		}
	}
	return out, nil
}

func indexRoute(rs []Route, path string) int {
	for i, r := range rs {
		if r.Path == path {
			return i
		}
	}
	return -1
}

// buildMux registers routes on a ServeMux; every handler (and the 404 for
// unknown paths) goes through wrap when it is not nil, so authentication
// covers every path as the kubelet's filter does.
func buildMux(routes []Route, wrap func(Route, http.Handler) http.Handler) (h http.Handler, err error) {
	mux := http.NewServeMux()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("server: conflicting routes: %v", p)
		}
	}()
	hasRoot := false
	for _, r := range routes {
		if r.Path == "/" {
			hasRoot = true
		}
		var handler http.Handler = r.Handler
		if len(r.Methods) > 0 {
			handler = allowMethods(r.Methods, handler)
		}
		if wrap != nil {
			handler = wrap(r, handler)
		}
		mux.Handle(r.Path, handler)
	}
	if !hasRoot {
		var nf http.Handler = http.NotFoundHandler()
		if wrap != nil {
			nf = wrap(Route{Path: "/"}, nf)
		}
		mux.Handle("/", nf)
	}
	return mux, nil
}

// allowMethods answers 405 with an Allow header to other methods, as the
// kubelet's AllowedMethodsRestfulFilter.
func allowMethods(methods []string, h http.Handler) http.Handler {
	allow := strings.Join(methods, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range methods {
			if r.Method == m {
				h.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
	})
}

// Handler returns the secure server's handler: every request is
// authenticated and authorized, then routed. It expects r.TLS for x509
// client certificates.
func (s *Server) Handler() http.Handler { return s.secure }

// ReadOnlyHandler returns the read-only server's handler, or nil when
// ReadOnlyPort is 0.
func (s *Server) ReadOnlyHandler() http.Handler { return s.readOnly }

// Run prepares the serving certificate (loads the configured pair, creates
// a self-signed one, or starts the CSR-based certificate manager), listens
// on the secure port and, when configured, the read-only port, and serves
// until ctx is done. It returns an error when a certificate, the client CA
// bundle or an address cannot be had; it is called once. With neither
// port (nor listener) it serves nothing and returns nil at once. Upgraded
// connections (exec, attach, port-forward sessions) are not closed when
// Run returns: they end when either peer closes them.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	o := s.opts
	if o.EnableSystemLogQuery {
		logger.Info("enableSystemLogQuery is not implemented: /logs/ serves files only")
	}
	var servers []*http.Server
	var listeners []net.Listener
	served := false
	defer func() {
		s.readyOnce.Do(func() { close(s.ready) })
		if served {
			return
		}
		for _, l := range append(listeners, o.Listener, o.ReadOnlyListener) {
			if l != nil {
				_ = l.Close()
			}
		}
	}()
	if o.Port > 0 || o.Listener != nil {
		cfg, stop, err := s.tlsConfig(ctx)
		if err != nil {
			return err
		}
		defer stop()
		ln := o.Listener
		if ln == nil {
			addr := net.JoinHostPort(o.Address, strconv.Itoa(int(o.Port)))
			if ln, err = net.Listen("tcp", addr); err != nil {
				return fmt.Errorf("node API: listen on %s: %w", addr, err)
			}
		}
		listeners = append(listeners, ln)
		s.addr = ln.Addr()
		srv := newHTTPServer(ctx, s.secure)
		srv.TLSConfig = cfg
		servers = append(servers, srv)
		logger.Info("Starting to listen", "address", ln.Addr().String())
	}
	if s.readOnly != nil {
		ln := o.ReadOnlyListener
		if ln == nil {
			addr := net.JoinHostPort(o.Address, strconv.Itoa(int(o.ReadOnlyPort)))
			var err error
			if ln, err = net.Listen("tcp", addr); err != nil {
				return fmt.Errorf("node API: listen read-only on %s: %w", addr, err)
			}
		}
		listeners = append(listeners, ln)
		s.roAddr = ln.Addr()
		servers = append(servers, newHTTPServer(ctx, s.readOnly))
		logger.Info("Starting to listen read-only", "address", ln.Addr().String())
	}
	s.readyOnce.Do(func() { close(s.ready) })
	if len(servers) == 0 {
		// Nothing to serve: no goroutine waits for the stop.
		return nil
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func(srv *http.Server, ln net.Listener) {
			var err error
			if srv.TLSConfig != nil {
				err = srv.Serve(tls.NewListener(ln, srv.TLSConfig))
			} else {
				err = srv.Serve(ln)
			}
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}(srv, listeners[i])
	}
	served = true // the servers own the listeners now
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			_ = srv.Close()
		}
	}
	if runErr != nil {
		return fmt.Errorf("node API: serve: %w", runErr)
	}
	return nil
}

// readHeaderTimeout bounds how long a client may take to send a request's
// headers, so that connections trickling headers (slowloris) cannot hold
// the server's goroutines and file descriptors for ReadTimeout (4 hours).
// Long-running streams (exec, attach, logs follow) are not affected: it
// ends when the headers are read.
const readHeaderTimeout = 10 * time.Second

func newHTTPServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       90 * time.Second,
		ReadTimeout:       4 * 60 * time.Minute,
		WriteTimeout:      4 * 60 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}

// tlsConfig builds the secure server's TLS configuration and returns a func
// that stops the certificate manager, if one runs.
func (s *Server) tlsConfig(ctx context.Context) (*tls.Config, func(), error) {
	logger := klog.FromContext(ctx)
	o := s.opts
	minVersion, suites, err := tlsParams(logger, o.TLS)
	if err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{
		MinVersion:   minVersion,
		CipherSuites: suites,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	stop := func() {}
	var current func() (*tls.Certificate, error)
	if o.TLS.Bootstrap {
		m := newCertMetrics()
		mgr, err := newBootstrapManager(ctx, o.Client, o, m)
		if err != nil {
			return nil, nil, err
		}
		if err := m.register(o.Registerer, mgr.Current, o.Clock); err != nil {
			return nil, nil, err
		}
		mgr.Start()
		stop = mgr.Stop
		current = func() (*tls.Certificate, error) {
			if c := mgr.Current(); c != nil {
				return c, nil
			}
			return nil, errNoServingCert
		}
	} else {
		certFile, keyFile := o.TLS.CertFile, o.TLS.KeyFile
		if certFile == "" {
			certFile = filepath.Join(o.TLS.CertDirectory, SelfSignedCertName)
			keyFile = filepath.Join(o.TLS.CertDirectory, SelfSignedKeyName)
			host, names, ips := s.certNames()
			if err := ensureSelfSigned(logger, certFile, keyFile, host, names, ips); err != nil {
				return nil, nil, err
			}
		}
		kp := &keyPairFiles{certFile: certFile, keyFile: keyFile, clock: o.Clock, interval: defaultCertReloadCheckInterval, logger: logger}
		if _, err := kp.current(); err != nil {
			return nil, nil, fmt.Errorf("failed to load certificate: %w", err)
		}
		current = kp.current
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current() }
	if s.cas != nil {
		pool, err := s.cas.pool(logger)
		if err != nil {
			return nil, nil, fmt.Errorf("unable to load client CA file %s: %w", s.cas.path, err)
		}
		// Ask for client certificates but let requests without (or with an
		// unverified) one through to the token and anonymous authenticators.
		cfg.ClientAuth = tls.RequestClientCert
		cfg.ClientCAs = pool
	}
	return cfg, stop, nil
}

// certNames returns the self-signed certificate's host and its other
// names and IPs from the node's addresses.
func (s *Server) certNames() (string, []string, []net.IP) {
	var names []string
	var ips []net.IP
	if s.opts.NodeAddresses != nil {
		names, ips = hostnamesAndIPs(s.opts.NodeAddresses())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = s.opts.NodeName
	}
	host = strings.ToLower(strings.TrimSpace(host))
	if s.opts.NodeAddresses != nil {
		for _, a := range s.opts.NodeAddresses() {
			if a.Type == "Hostname" && a.Address != "" {
				host = a.Address
				break
			}
		}
	}
	return host, names, ips
}

// Addr blocks until Run listens (or ctx is done) and returns the secure
// server's address; nil when the secure port is off.
func (s *Server) Addr(ctx context.Context) (net.Addr, error) {
	select {
	case <-s.ready:
		return s.addr, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ReadOnlyAddr is Addr for the read-only server.
func (s *Server) ReadOnlyAddr(ctx context.Context) (net.Addr, error) {
	select {
	case <-s.ready:
		return s.roAddr, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// httpMetrics are the kubelet's kubelet_http_* metrics.
type httpMetrics struct {
	// websocketStreams is kubelet_websocket_streaming_requests_total.
	websocketStreams *prometheus.CounterVec
	requests         *prometheus.CounterVec
	inflight         *prometheus.GaugeVec
	duration         *prometheus.HistogramVec
}

var httpLabels = []string{"method", "path", "server_type", "long_running"}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "http_requests_total",
			Help: "[ALPHA] Number of the http requests received since the server started",
		}, httpLabels),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "http_inflight_requests",
			Help: "[ALPHA] Number of the inflight http requests",
		}, httpLabels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "http_requests_duration_seconds",
			Help:    "[ALPHA] Duration in seconds to serve http requests",
			Buckets: prometheus.DefBuckets,
		}, httpLabels),
		websocketStreams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "websocket_streaming_requests_total",
			Help: "[ALPHA] Total number of WebSocket streaming requests (exec/attach/portforward) received by the kubelet.",
		}, []string{"subresource"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.inflight, m.duration, m.websocketStreams} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register node API metrics: %w", err)
			}
		}
	}
	return m, nil
}

var knownMethods = map[string]bool{"OPTIONS": true, "GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true, "TRACE": true, "CONNECT": true}

// instrument counts and times requests by method, path bucket (the
// routes' first path segment, or metrics/<x>), server type and whether the
// request is long-running, as the kubelet's ServeHTTP. It does not wrap
// the ResponseWriter, so flushing and hijacking work as without it.
func (m *httpMetrics) instrument(serverType string, routes []Route, h http.Handler) http.Handler {
	buckets := map[string]bool{}
	for _, r := range routes {
		buckets[rootPath(r.Path)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		if !knownMethods[method] {
			method = "other"
		}
		path := rootPath(r.URL.Path)
		if !buckets[path] {
			path = "other"
		}
		long := "false"
		switch path {
		case "exec", "attach", "portforward", "debug":
			long = "true"
		}
		start := time.Now()
		m.requests.WithLabelValues(method, path, serverType, long).Inc()
		g := m.inflight.WithLabelValues(method, path, serverType, long)
		g.Inc()
		defer func() {
			g.Dec()
			m.duration.WithLabelValues(method, path, serverType, long).Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(w, r)
	})
}

// rootPath is the kubelet's getURLRootPath: "metrics/<x>" for metrics
// subpaths, else the first path segment.
func rootPath(p string) string {
	p = strings.TrimPrefix(p, "/")
	first, rest, _ := strings.Cut(p, "/")
	if first == "metrics" && rest != "" {
		second, _, _ := strings.Cut(rest, "/")
		if second != "" && !strings.HasPrefix(second, "{") {
			return "metrics/" + second
		}
	}
	return first
}
