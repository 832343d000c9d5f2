package server

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestAttributesMapping(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		verb         string
		subs         []string
	}{
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"POST", "/stats/summary", "create", []string{"stats"}},
		{"GET", "/stats", "get", []string{"stats"}},
		{"GET", "/metrics", "get", []string{"metrics"}},
		{"GET", "/metrics/cadvisor", "get", []string{"metrics"}},
		{"GET", "/metrics/resource", "get", []string{"metrics"}},
		{"GET", "/metrics/probes", "get", []string{"metrics"}},
		{"GET", "/metricsfoo", "get", []string{"proxy"}},
		{"GET", "/logs/", "get", []string{"log"}},
		{"GET", "/logs/syslog", "get", []string{"log"}},
		{"GET", "/logs", "get", []string{"log"}},
		{"POST", "/checkpoint/ns/pod/c", "create", []string{"checkpoint"}},
		{"GET", "/statusz", "get", []string{"statusz"}},
		{"GET", "/flagz", "get", []string{"configz"}},
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/pods/", "get", []string{"pods", "proxy"}},
		{"GET", "/podsX", "get", []string{"proxy"}},
		{"GET", "/allocatedPods", "get", []string{"pods", "proxy"}},
		{"GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"GET", "/runningpods", "get", []string{"pods", "proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/healthz/syncloop", "get", []string{"healthz", "proxy"}},
		{"GET", "/configz", "get", []string{"configz", "proxy"}},
		{"GET", "/containerLogs/ns/pod/c", "get", []string{"proxy"}},
		{"POST", "/exec/ns/pod/c", "create", []string{"proxy"}},
		{"GET", "/exec/ns/pod/c", "get", []string{"proxy"}},
		{"POST", "/attach/ns/pod/c", "create", []string{"proxy"}},
		{"POST", "/portForward/ns/pod", "create", []string{"proxy"}},
		{"POST", "/run/ns/pod/c", "create", []string{"proxy"}},
		{"GET", "/spec", "get", []string{"proxy"}},
		{"PUT", "/debug/flags/v", "update", []string{"proxy"}},
		{"PATCH", "/x", "patch", []string{"proxy"}},
		{"DELETE", "/x", "delete", []string{"proxy"}},
		{"HEAD", "/healthz", "", []string{"healthz", "proxy"}},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		u := &User{Name: "u"}
		attrs := requestAttributes(testNode, u, r, nil)
		var subs []string
		for _, a := range attrs {
			subs = append(subs, a.Subresource)
			if a.Verb != tc.verb || a.Resource != "nodes" || a.Name != testNode || a.APIVersion != "v1" || a.User != u || a.Path != tc.path {
				t.Errorf("%s %s: attributes %+v", tc.method, tc.path, a)
			}
		}
		if !reflect.DeepEqual(subs, tc.subs) {
			t.Errorf("%s %s: subresources %v, want %v", tc.method, tc.path, subs, tc.subs)
		}
	}
}

// sarFake answers SubjectAccessReviews with allow(spec) and counts calls.
type sarFake struct {
	mu    sync.Mutex
	calls []authzv1.SubjectAccessReviewSpec
	allow func(authzv1.SubjectAccessReviewSpec) bool
	err   error
}

func (f *sarFake) react(action k8stesting.Action) (bool, runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sar := action.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
	f.calls = append(f.calls, sar.Spec)
	if f.err != nil {
		return true, nil, f.err
	}
	sar.Status.Allowed = f.allow(sar.Spec)
	return true, sar, nil
}

func (f *sarFake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// tokenFake answers TokenReviews from a token → user table and counts calls.
type tokenFake struct {
	mu    sync.Mutex
	calls int
	users map[string]authnv1.UserInfo
	err   error
	// statusErr, when set, answers every review unauthenticated with this
	// status.error: the API server could not review the token.
	statusErr string
}

func (f *tokenFake) react(action k8stesting.Action) (bool, runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return true, nil, f.err
	}
	tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
	if f.statusErr != "" {
		tr.Status.Error = f.statusErr
		return true, tr, nil
	}
	if u, ok := f.users[tr.Spec.Token]; ok {
		tr.Status.Authenticated = true
		tr.Status.User = u
	}
	return true, tr, nil
}

func (f *tokenFake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

type authHarness struct {
	s     *Server
	clk   *clocktesting.FakeClock
	sar   *sarFake
	token *tokenFake
}

func newAuthHarness(t *testing.T, anonymous bool, allow func(authzv1.SubjectAccessReviewSpec) bool) *authHarness {
	t.Helper()
	return newAuthHarnessWith(t, anonymous, allow, nil)
}

// newAuthHarnessWith is newAuthHarness with the server's metrics on reg.
func newAuthHarnessWith(t *testing.T, anonymous bool, allow func(authzv1.SubjectAccessReviewSpec) bool, reg prometheus.Registerer) *authHarness {
	t.Helper()
	h := &authHarness{
		clk: clocktesting.NewFakeClock(time.Now()),
		sar: &sarFake{allow: allow},
		token: &tokenFake{users: map[string]authnv1.UserInfo{
			"alice-token": {Username: "alice", UID: "a1", Groups: []string{"devs"}, Extra: map[string]authnv1.ExtraValue{"scopes": {"x"}}},
		}},
	}
	client := fake.NewClientset()
	client.PrependReactor("create", "subjectaccessreviews", h.sar.react)
	client.PrependReactor("create", "tokenreviews", h.token.react)
	o := baseOptions(testPod("default", "p", "c"))
	o.Authentication = AuthnOptions{Anonymous: anonymous}
	o.Authorization = AuthzOptions{}
	o.Client = client
	o.Clock = h.clk
	o.Registerer = reg
	h.s = mustNew(t, o)
	return h
}

func (h *authHarness) get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.s.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestUnauthenticated401(t *testing.T) {
	h := newAuthHarness(t, false, func(authzv1.SubjectAccessReviewSpec) bool { return true })
	for _, p := range []string{"/healthz", "/pods", "/nope", "/exec/default/p/c"} {
		code, body := h.get(t, p, "")
		if code != http.StatusUnauthorized || body != "Unauthorized" {
			t.Errorf("GET %s without credentials: %d %q, want 401 Unauthorized", p, code, body)
		}
	}
	if h.sar.count() != 0 || h.token.count() != 0 {
		t.Errorf("webhooks called for requests without credentials: sar %d token %d", h.sar.count(), h.token.count())
	}
	// A token the API server does not know is rejected, with or without
	// anonymous access.
	for _, anon := range []bool{false, true} {
		h := newAuthHarness(t, anon, func(authzv1.SubjectAccessReviewSpec) bool { return true })
		if code, body := h.get(t, "/healthz", "bad-token"); code != http.StatusUnauthorized || body != "Unauthorized" {
			t.Errorf("anonymous=%v, bad token: %d %q", anon, code, body)
		}
	}
}

func TestAnonymousWhenEnabled(t *testing.T) {
	h := newAuthHarness(t, true, func(s authzv1.SubjectAccessReviewSpec) bool {
		return s.User == AnonymousUser && s.ResourceAttributes.Subresource == "healthz"
	})
	code, body := h.get(t, "/healthz", "")
	if code != http.StatusOK || body != "ok" {
		t.Fatalf("anonymous /healthz: %d %q", code, body)
	}
	got := h.sar.calls[0]
	if !reflect.DeepEqual(got.Groups, []string{UnauthenticatedGroup}) {
		t.Errorf("anonymous groups %v", got.Groups)
	}
	code, body = h.get(t, "/pods", "")
	want := "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
	if code != http.StatusForbidden || body != want {
		t.Errorf("anonymous /pods: %d %q, want 403 %q", code, body, want)
	}
}

func TestTokenWebhookAndCache(t *testing.T) {
	h := newAuthHarness(t, false, func(authzv1.SubjectAccessReviewSpec) bool { return true })
	for i := 0; i < 3; i++ {
		if code, body := h.get(t, "/healthz", "alice-token"); code != http.StatusOK {
			t.Fatalf("GET with alice's token: %d %q", code, body)
		}
	}
	if n := h.token.count(); n != 1 {
		t.Errorf("TokenReviews within the cache TTL = %d, want 1", n)
	}
	spec := h.sar.calls[0]
	want := authzv1.SubjectAccessReviewSpec{
		User: "alice", UID: "a1", Groups: []string{"devs", AuthenticatedGroup},
		Extra: map[string]authzv1.ExtraValue{"scopes": {"x"}},
		ResourceAttributes: &authzv1.ResourceAttributes{
			Verb: "get", Version: "v1", Resource: "nodes", Subresource: "healthz", Name: testNode,
		},
	}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("SAR spec\n got %+v\nwant %+v", spec, want)
	}
	// A rejected token is cached too.
	h.get(t, "/healthz", "bad")
	h.get(t, "/healthz", "bad")
	if n := h.token.count(); n != 2 {
		t.Errorf("TokenReviews after a rejected token twice = %d, want 2", n)
	}
	// After the TTL (2m), the token is reviewed again.
	h.clk.Step(DefaultAuthnCacheTTL + time.Second)
	h.get(t, "/healthz", "alice-token")
	if n := h.token.count(); n != 3 {
		t.Errorf("TokenReviews after the TTL = %d, want 3", n)
	}
	// A failing webhook answers 401 and is not cached.
	h.token.err = errors.New("apiserver down")
	h.clk.Step(DefaultAuthnCacheTTL + time.Second)
	if code, _ := h.get(t, "/healthz", "alice-token"); code != http.StatusUnauthorized {
		t.Errorf("token webhook failing: %d, want 401", code)
	}
	h.token.err = nil
	if code, _ := h.get(t, "/healthz", "alice-token"); code != http.StatusOK {
		t.Errorf("token webhook back: %d, want 200", code)
	}
}

func TestWebSocketBearerProtocol(t *testing.T) {
	h := newAuthHarness(t, false, func(authzv1.SubjectAccessReviewSpec) bool { return true })
	var seen http.Header
	o := h.s.opts
	o.Routes = []Route{{Path: "/echo", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		u, _ := UserFrom(r.Context())
		_, _ = w.Write([]byte(u.Name))
	})}}
	s := mustNew(t, o)
	req := httptest.NewRequest("GET", "/echo", nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io, "+bearerProtocolPrefix+base64.RawURLEncoding.EncodeToString([]byte("alice-token")))
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "alice" {
		t.Fatalf("websocket bearer: %d %q", rec.Code, rec.Body.String())
	}
	if got := seen.Get("Sec-WebSocket-Protocol"); got != "v5.channel.k8s.io" {
		t.Errorf("protocols passed on = %q, want the token removed", got)
	}
}

func TestFineGrainedFallbackAndForbidden(t *testing.T) {
	// alice may only use nodes/proxy: /pods and /healthz fall back to it.
	h := newAuthHarness(t, false, func(s authzv1.SubjectAccessReviewSpec) bool {
		return s.ResourceAttributes.Subresource == "proxy"
	})
	if code, _ := h.get(t, "/pods", "alice-token"); code != http.StatusOK {
		t.Fatalf("/pods with nodes/proxy: %d", code)
	}
	if n := h.sar.count(); n != 2 {
		t.Errorf("SARs for /pods = %d, want 2 (pods, then proxy)", n)
	}
	subs := []string{h.sar.calls[0].ResourceAttributes.Subresource, h.sar.calls[1].ResourceAttributes.Subresource}
	if !reflect.DeepEqual(subs, []string{"pods", "proxy"}) {
		t.Errorf("SAR order %v", subs)
	}
	code, body := h.get(t, "/stats/summary", "alice-token")
	want := "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[stats])\n"
	if code != http.StatusForbidden || body != want {
		t.Errorf("/stats/summary: %d %q, want 403 %q", code, body, want)
	}
	// Authorized answers are cached 5m, unauthorized ones 30s.
	before := h.sar.count()
	h.get(t, "/pods", "alice-token")
	h.get(t, "/stats/summary", "alice-token")
	if n := h.sar.count() - before; n != 0 {
		t.Errorf("SARs for cached answers = %d, want 0", n)
	}
	h.clk.Step(DefaultUnauthorizedTTL + time.Second)
	h.get(t, "/stats/summary", "alice-token") // stats: asked again
	h.get(t, "/pods", "alice-token")          // pods denial expired: asked again; proxy still cached
	if n := h.sar.count() - before; n != 2 {
		t.Errorf("SARs after 31s = %d, want 2", n)
	}
	h.clk.Step(DefaultAuthorizedTTL)
	before = h.sar.count()
	h.get(t, "/pods", "alice-token")
	if n := h.sar.count() - before; n != 2 {
		t.Errorf("SARs after 5m = %d, want 2", n)
	}
}

func TestAuthorizationError500(t *testing.T) {
	h := newAuthHarness(t, false, nil)
	h.sar.err = errors.New("boom")
	code, body := h.get(t, "/healthz", "alice-token")
	want := "Authorization error (user=alice, verb=get, resource=nodes, subresource=healthz)"
	if code != http.StatusInternalServerError || body != want {
		t.Errorf("SAR failing: %d %q, want 500 %q", code, body, want)
	}
}

func TestRouteSubresourceOverride(t *testing.T) {
	h := newAuthHarness(t, false, func(s authzv1.SubjectAccessReviewSpec) bool {
		return s.ResourceAttributes.Subresource == "log"
	})
	o := h.s.opts
	o.Routes = []Route{{Path: "/containerLogs/{podNamespace}/{podID}/{containerName}", Subresources: []string{"log"},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("from elsewhere")) })}}
	s := mustNew(t, o)
	req := httptest.NewRequest("GET", "/containerLogs/default/p/c", nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "from elsewhere" {
		t.Errorf("replaced logs route: %d %q", rec.Code, rec.Body.String())
	}
}

// staticAuthn authenticates every request as u.
type staticAuthn struct{ u *User }

func (a staticAuthn) AuthenticateRequest(*http.Request) (*User, bool, error) { return a.u, true, nil }

type denyAll struct{}

func (denyAll) Authorize(context.Context, Attributes) (Decision, string, error) {
	return DecisionNoOpinion, "", nil
}

func TestCustomAuthenticatorAndAuthorizer(t *testing.T) {
	o := baseOptions()
	o.Authenticator = staticAuthn{&User{Name: "bob"}}
	o.Authorizer = denyAll{}
	s := mustNew(t, o)
	code, body, _ := do(t, s.Handler(), "GET", "/metrics", nil)
	if code != http.StatusForbidden || body != "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[metrics])\n" {
		t.Errorf("no opinion: %d %q", code, body)
	}
}

func TestWebhookRetries(t *testing.T) {
	h := newAuthHarness(t, false, func(authzv1.SubjectAccessReviewSpec) bool { return true })
	var mu sync.Mutex
	sarFails, tokenFails := 2, 1
	client := fake.NewClientset()
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if sarFails > 0 {
			sarFails--
			return true, nil, apierrors.NewInternalError(errors.New("etcd hiccup"))
		}
		return h.sar.react(a)
	})
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if tokenFails > 0 {
			tokenFails--
			return true, nil, apierrors.NewTooManyRequests("slow down", 1)
		}
		return h.token.react(a)
	})
	o := h.s.opts
	o.Client = client
	s := mustNew(t, o)
	done := make(chan int)
	go func() {
		req := httptest.NewRequest("GET", "/healthz", nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		done <- rec.Code
	}()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case code := <-done:
			if code != http.StatusOK {
				t.Fatalf("after transient webhook errors: %d, want 200", code)
			}
			mu.Lock()
			defer mu.Unlock()
			if sarFails != 0 || tokenFails != 0 || h.sar.count() != 1 || h.token.count() != 1 {
				t.Errorf("attempts left sar %d token %d; successes sar %d token %d", sarFails, tokenFails, h.sar.count(), h.token.count())
			}
			return
		case <-deadline:
			t.Fatal("request did not finish")
		case <-time.After(5 * time.Millisecond):
			h.clk.Step(time.Second)
		}
	}
}

func TestTransientErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewInternalError(errors.New("x")), true},
		{apierrors.NewTimeoutError("x", 1), true},
		{apierrors.NewTooManyRequests("x", 1), true},
		{apierrors.NewServiceUnavailable("x"), false},
		{apierrors.NewForbidden(authzv1.Resource("subjectaccessreviews"), "", errors.New("x")), false},
		{errors.New("plain"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A TokenReview that fails — the call, or an answer whose status.error says
// the API server could not review the token — is not cached: once the
// backend works again, the very next request with a valid token succeeds
// (within the cache TTL, on a clock that does not move).
func TestTokenReviewFailuresNotCached(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(*tokenFake)
	}{
		{"status.error", func(f *tokenFake) { f.statusErr = "webhook authenticator unavailable" }},
		{"call error", func(f *tokenFake) { f.err = errors.New("connection refused") }},
		{"API error", func(f *tokenFake) { f.err = apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("no")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newAuthHarness(t, false, func(authzv1.SubjectAccessReviewSpec) bool { return true })
			h.token.mu.Lock()
			tc.fail(h.token)
			h.token.mu.Unlock()
			if code, body := h.get(t, "/healthz", "alice-token"); code != http.StatusUnauthorized {
				t.Fatalf("GET while TokenReview fails: %d %q, want 401", code, body)
			}
			h.token.mu.Lock()
			h.token.err, h.token.statusErr = nil, ""
			h.token.mu.Unlock()
			before := h.token.count()
			if code, body := h.get(t, "/healthz", "alice-token"); code != http.StatusOK {
				t.Fatalf("GET once TokenReview works again: %d %q, want 200 (the failure was cached)", code, body)
			}
			if n := h.token.count() - before; n != 1 {
				t.Errorf("TokenReviews for the request after the failure = %d, want 1", n)
			}
		})
	}
}

// A WebSocket request's bearer protocol token is honoured whatever the
// Authorization header holds (another scheme, or a bearer token that is
// rejected), as the kubelet's union of the bearertoken and websocket
// authenticators; a token protocol with no other protocol is refused.
func TestWebSocketBearerProtocolWithAuthorizationHeader(t *testing.T) {
	h := newAuthHarness(t, false, func(authzv1.SubjectAccessReviewSpec) bool { return true })
	o := h.s.opts
	o.Routes = []Route{{Path: "/echo", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := UserFrom(r.Context())
		_, _ = w.Write([]byte(u.Name))
	})}}
	s := mustNew(t, o)
	tokenProtocol := bearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte("alice-token"))
	for _, tc := range []struct {
		name, authorization, protocols string
		wantCode                       int
		wantBody                       string
	}{
		{"basic auth header", "Basic YWxpY2U6cHc=", "v5.channel.k8s.io, " + tokenProtocol, http.StatusOK, "alice"},
		{"rejected bearer header", "Bearer not-a-token", "v5.channel.k8s.io, " + tokenProtocol, http.StatusOK, "alice"},
		{"no other protocol", "", tokenProtocol, http.StatusUnauthorized, "Unauthorized"},
		{"two tokens", "", "v5.channel.k8s.io, " + tokenProtocol + ", " + tokenProtocol, http.StatusUnauthorized, "Unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/echo", nil)
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Connection", "Upgrade")
			if tc.authorization != "" {
				req.Header.Set("Authorization", tc.authorization)
			}
			req.Header.Set("Sec-WebSocket-Protocol", tc.protocols)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != tc.wantCode || rec.Body.String() != tc.wantBody {
				t.Errorf("got %d %q, want %d %q", rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
	// Without a WebSocket upgrade the protocol header carries no credential.
	req := httptest.NewRequest("GET", "/echo", nil)
	req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io, "+tokenProtocol)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("bearer protocol on a plain GET: %d, want 401", rec.Code)
	}
}

// Every TokenReview and SubjectAccessReview call is counted in the
// kubelet's apiserver_delegated_authn_* / apiserver_delegated_authz_*
// metrics by the code of its answer; cached answers make no call.
func TestDelegatedAuthMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h := newAuthHarnessWith(t, false, func(authzv1.SubjectAccessReviewSpec) bool { return true }, reg)
	for i := 0; i < 2; i++ {
		if code, body := h.get(t, "/healthz", "alice-token"); code != http.StatusOK {
			t.Fatalf("GET: %d %q", code, body)
		}
	}
	h.token.mu.Lock()
	h.token.err = errors.New("connection refused")
	h.token.mu.Unlock()
	h.get(t, "/healthz", "other-token")
	for _, c := range []struct {
		name, code string
		want       float64
	}{
		{"apiserver_delegated_authn_request_total", "201", 1},
		{"apiserver_delegated_authn_request_total", "<error>", 1},
		{"apiserver_delegated_authz_request_total", "201", 1},
	} {
		if got := counterValue(t, reg, c.name, c.code); got != c.want {
			t.Errorf("%s{code=%q} = %v, want %v", c.name, c.code, got, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "apiserver_delegated_authn_request_duration_seconds", "apiserver_delegated_authz_request_duration_seconds"); err != nil || n != 3 {
		t.Errorf("delegated latency series = %d (%v), want 3", n, err)
	}
}

func counterValue(t *testing.T, g prometheus.Gatherer, name, code string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The servers bound how long a client may take to send its headers.
func TestReadHeaderTimeout(t *testing.T) {
	srv := newHTTPServer(context.Background(), http.NotFoundHandler())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadHeaderTimeout > time.Minute {
		t.Errorf("ReadHeaderTimeout = %v, want a bound of at most a minute", srv.ReadHeaderTimeout)
	}
}
