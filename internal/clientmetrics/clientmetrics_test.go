package clientmetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestRequestsCountedInEveryRegistry makes a real client-go request and
// finds it, with upstream's labels, in two registries Register was given
// (one of them twice).
func TestRequestsCountedInEveryRegistry(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default"}}`))
	}))
	defer srv.Close()
	a, b := prometheus.NewRegistry(), prometheus.NewRegistry()
	for _, reg := range []*prometheus.Registry{a, a, b} {
		if err := Register(reg); err != nil {
			t.Fatalf("Register: %v", err)
		}
	}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	host := mustHost(t, srv.URL)
	before := testutil.ToFloat64(requestResult.WithLabelValues("200", "GET", host))
	if _, err := client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("get namespace: %v", err)
	}
	if got := testutil.ToFloat64(requestResult.WithLabelValues("200", "GET", host)); got != before+1 {
		t.Errorf("rest_client_requests_total{code=200,method=GET,host=%s} = %v, want %v", host, got, before+1)
	}
	for name, reg := range map[string]*prometheus.Registry{"a": a, "b": b} {
		n, err := testutil.GatherAndCount(reg, "rest_client_requests_total", "rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds", "rest_client_response_size_bytes")
		if err != nil {
			t.Fatalf("registry %s: %v", name, err)
		}
		if n < 4 {
			t.Errorf("registry %s has %d rest_client series, want at least 4 (requests, duration, rate limiter, response size)", name, n)
		}
	}
}

func mustHost(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
