package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	cri "k8s.io/cri-api/pkg/apis"
)

// The CRI runtime service is a Runtime.
var _ Runtime = cri.RuntimeService(nil)

// BenchmarkAuthorizedRequest measures one /healthz request through token
// authentication and webhook authorization, both answered from their
// caches: the steady state of the API server's and metrics-server's polls.
func BenchmarkAuthorizedRequest(b *testing.B) {
	t := &testing.T{}
	h := newAuthHarness(t, false, func(authzv1.SubjectAccessReviewSpec) bool { return true })
	handler := h.s.Handler()
	req := httptest.NewRequest("GET", "/healthz", nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("warm-up: %d", rec.Code)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req.Header.Set("Authorization", "Bearer alice-token")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
	}
}
