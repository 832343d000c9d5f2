package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// HealthServer serves the kubelet's local health endpoint, GET /healthz, and
// the agent's Prometheus metrics, GET /metrics, on healthzBindAddress:
// healthzPort (127.0.0.1:10248 by default). It is plain HTTP: keep it bound
// to loopback, as the kubelet's healthz port is.
type HealthServer struct {
	addr     string
	ln       net.Listener
	gatherer prometheus.Gatherer
	ready    chan struct{}
	bound    net.Addr
}

// NewHealthServer returns a server for addr ("host:port"; port 0 picks a free
// one) exposing gatherer's metrics. It does not listen until Run.
func NewHealthServer(addr string, gatherer prometheus.Gatherer) *HealthServer {
	return &HealthServer{addr: addr, gatherer: gatherer, ready: make(chan struct{})}
}

// newHealthServerOn returns a server that serves on ln, already bound.
func newHealthServerOn(ln net.Listener, gatherer prometheus.Gatherer) *HealthServer {
	s := NewHealthServer(ln.Addr().String(), gatherer)
	s.ln = ln
	return s
}

// Handler returns the server's routes.
func (s *HealthServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	return mux
}

// Run listens and serves until ctx is done. It returns an error when the
// address cannot be bound.
func (s *HealthServer) Run(ctx context.Context) error {
	ln := s.ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.addr); err != nil {
			return fmt.Errorf("healthz server: listen on %s: %w", s.addr, err)
		}
	}
	s.bound = ln.Addr()
	close(s.ready)
	klog.FromContext(ctx).Info("Serving healthz and metrics", "address", ln.Addr().String())
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("healthz server on %s: %w", s.addr, err)
	}
	return nil
}

// Addr blocks until the server listens (or ctx is done) and returns its
// address.
func (s *HealthServer) Addr(ctx context.Context) (net.Addr, error) {
	select {
	case <-s.ready:
		return s.bound, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// healthzServed reports whether the agent serves /healthz and /metrics
// (healthzPort not 0, or a listener for them).
func (cfg *Config) healthzServed() bool {
	return *cfg.Kubelet.HealthzPort != 0 || cfg.HealthzListener != nil
}

func healthzAddress(cfg *Config) string {
	return net.JoinHostPort(cfg.Kubelet.HealthzBindAddress, strconv.Itoa(int(*cfg.Kubelet.HealthzPort)))
}
