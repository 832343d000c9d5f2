package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Well-known users and groups, as the API server's.
const (
	AnonymousUser           = "system:anonymous"
	UnauthenticatedGroup    = "system:unauthenticated"
	AuthenticatedGroup      = "system:authenticated"
	bearerProtocolPrefix    = "base64url.bearer.authorization.k8s.io."
	webSocketProtocolHeader = "Sec-Websocket-Protocol"
)

// User is an authenticated identity. Handlers find the request's user with
// UserFrom.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

type userKey struct{}

// UserFrom returns the user the secure server authenticated for the
// request whose context is ctx; false on the read-only server or outside a
// request.
func UserFrom(ctx context.Context) (*User, bool) {
	u, ok := ctx.Value(userKey{}).(*User)
	return u, ok
}

// Authenticator identifies the user of a request. It returns (nil, false,
// nil) when the request carries no credentials it understands, and an
// error when it carries credentials that are invalid or cannot be checked.
// It must be safe for concurrent use.
type Authenticator interface {
	AuthenticateRequest(r *http.Request) (*User, bool, error)
}

// Decision is an authorizer's verdict.
type Decision int

// Decisions. DecisionNoOpinion forbids on the node API, as the kubelet's
// single authorizer.
const (
	DecisionDeny Decision = iota
	DecisionAllow
	DecisionNoOpinion
)

// Attributes describe one request for authorization: always a resource
// request on nodes/<node name> with API version v1.
type Attributes struct {
	User        *User
	Verb        string
	APIVersion  string
	Resource    string
	Subresource string
	Name        string
	Path        string
}

// Authorizer decides whether a request may proceed. An error answers 500.
// It must be safe for concurrent use.
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (Decision, string, error)
}

// Node API paths that the authorization mapping distinguishes, as the
// kubelet's.
const (
	statsPath         = "/stats/"
	metricsPath       = "/metrics"
	logsPath          = "/logs/"
	checkpointPath    = "/checkpoint/"
	statuszPath       = "/statusz"
	flagzPath         = "/flagz"
	allocatedPodsPath = "/allocatedPods"
	podsPath          = "/pods"
	runningPodsPath   = "/runningpods/"
	healthzPath       = "/healthz"
	configzPath       = "/configz"
)

func isSubpath(subpath, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return subpath == path || (strings.HasPrefix(subpath, path) && subpath[len(path)] == '/')
}

// verbFor maps an HTTP method to the API verb the kubelet authorizes.
// Other methods map to "".
func verbFor(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodGet:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// subresourcesFor returns the subresources a request on path is authorized
// against, most specific first; one allowing is enough. This is the v1.37
// kubelet's mapping with KubeletFineGrainedAuthz (GA, locked on): /pods,
// /runningpods, /allocatedPods, /healthz and /configz first try their own
// subresource and fall back to proxy.
func subresourcesFor(path string) []string {
	var fine string
	switch {
	case isSubpath(path, allocatedPodsPath), isSubpath(path, podsPath):
		fine = "pods"
	case isSubpath(path, healthzPath):
		fine = "healthz"
	case isSubpath(path, configzPath):
		fine = "configz"
	case isSubpath(path, runningPodsPath):
		fine = "pods"
	}
	var coarse string
	switch {
	case isSubpath(path, statsPath):
		coarse = "stats"
	case isSubpath(path, metricsPath):
		coarse = "metrics"
	case isSubpath(path, logsPath):
		coarse = "log"
	case isSubpath(path, checkpointPath):
		coarse = "checkpoint"
	case isSubpath(path, statuszPath):
		coarse = "statusz"
	case isSubpath(path, flagzPath):
		coarse = "configz"
	default:
		coarse = "proxy"
	}
	if fine == "" {
		return []string{coarse}
	}
	return []string{fine, coarse}
}

// requestAttributes returns the attributes a request is authorized with:
// one per subresource (see subresourcesFor), or per entry of override when
// the route names its own.
func requestAttributes(nodeName string, u *User, r *http.Request, override []string) []Attributes {
	subs := override
	if len(subs) == 0 {
		subs = subresourcesFor(r.URL.Path)
	}
	verb := verbFor(r.Method)
	attrs := make([]Attributes, len(subs))
	for i, s := range subs {
		attrs[i] = Attributes{User: u, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: s, Name: nodeName, Path: r.URL.Path}
	}
	return attrs
}

// authenticator is the kubelet's authentication chain: x509 client
// certificates, then bearer tokens (Authorization header or WebSocket
// protocol) checked by TokenReview; an authenticated user gains
// system:authenticated. With anonymous on, a request that carries no
// credentials (not one whose credentials failed) is system:anonymous.
type authenticator struct {
	x509      *x509Authenticator
	token     *tokenAuthenticator
	anonymous bool
}

func (a *authenticator) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	var errs []error
	if a.x509 != nil {
		u, ok, err := a.x509.authenticate(r)
		if ok {
			return withAuthenticatedGroup(u), true, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if a.token != nil {
		u, ok, err := a.token.authenticate(r)
		if ok {
			return withAuthenticatedGroup(u), true, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, false, errors.Join(errs...)
	}
	if a.anonymous {
		return &User{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}, true, nil
	}
	return nil, false, nil
}

func withAuthenticatedGroup(u *User) *User {
	if u.Name == AnonymousUser || slices.Contains(u.Groups, AuthenticatedGroup) || slices.Contains(u.Groups, UnauthenticatedGroup) {
		return u
	}
	u.Groups = append(u.Groups, AuthenticatedGroup)
	return u
}

// x509Authenticator verifies a request's client certificate chain against
// the client CA bundle: CommonName is the user, Organizations its groups.
type x509Authenticator struct {
	cas   *caBundle
	clock clock.PassiveClock
}

func (a *x509Authenticator) authenticate(r *http.Request) (*User, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	pool, err := a.cas.pool(klog.FromContext(r.Context()))
	if err != nil {
		return nil, false, err
	}
	chain := r.TLS.PeerCertificates
	opts := x509.VerifyOptions{
		Roots:       pool,
		CurrentTime: a.clock.Now(),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(chain) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range chain[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return nil, false, fmt.Errorf("verifying certificate SN=%s failed: %w", chain[0].SerialNumber, err)
	}
	if chain[0].Subject.CommonName == "" {
		return nil, false, nil
	}
	return &User{Name: chain[0].Subject.CommonName, Groups: slices.Clone(chain[0].Subject.Organization)}, true, nil
}

// tokenAuthenticator checks bearer tokens with TokenReview, from the
// Authorization header and, for a WebSocket request, from a
// base64url.bearer.authorization.k8s.io protocol — tried in that order, as
// the kubelet's union of the bearertoken and websocket authenticators, so a
// WebSocket token is honoured whatever else the Authorization header holds.
// Reviews that answer (authenticated or not) are cached for ttl under the
// token's SHA-256; a review that fails — the call, or an answer with
// status.error — is not cached, as the kubelet's token cache with cacheErrs
// off: the next request asks again. Failed calls are retried (see retry).
type tokenAuthenticator struct {
	client  authnclient.TokenReviewInterface
	cache   *cache.LRUExpireCache
	ttl     time.Duration
	timeout time.Duration
	clock   clock.Clock
	metrics *webhookMetrics
}

type tokenResult struct {
	user *User
	ok   bool
}

var errInvalidToken = errors.New("invalid bearer token")

func (a *tokenAuthenticator) authenticate(r *http.Request) (*User, bool, error) {
	var errs []error
	u, ok, err := a.authenticateHeader(r)
	if ok {
		return u, true, nil
	}
	if err != nil {
		errs = append(errs, err)
	}
	u, ok, err = a.authenticateProtocol(r)
	if ok {
		return u, true, nil
	}
	if err != nil {
		errs = append(errs, err)
	}
	return nil, false, errors.Join(errs...)
}

// authenticateHeader checks the Authorization header's bearer token, as the
// kubelet's bearertoken authenticator: another scheme, or an empty token,
// is no credential; the header is removed once the token is accepted, so
// it is never proxied on.
func (a *tokenAuthenticator) authenticateHeader(r *http.Request) (*User, bool, error) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	if auth == "" {
		return nil, false, nil
	}
	parts := strings.SplitN(auth, " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return nil, false, nil
	}
	u, ok, err := a.review(r.Context(), parts[1])
	if ok {
		r.Header.Del("Authorization")
		return u, true, nil
	}
	if err == nil {
		err = errInvalidToken
	}
	return nil, false, err
}

// authenticateProtocol checks the token of a WebSocket request's
// base64url.bearer.authorization.k8s.io protocol, as the kubelet's
// websocket protocol authenticator: only on a WebSocket upgrade, one token
// at most, and at least one other protocol to echo back; the token's
// protocol is removed once accepted.
func (a *tokenAuthenticator) authenticateProtocol(r *http.Request) (*User, bool, error) {
	if !wsstream.IsWebSocketRequest(r) {
		return nil, false, nil
	}
	var token string
	saw := false
	filtered := []string{}
	for _, v := range r.Header.Values(webSocketProtocolHeader) {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if !strings.HasPrefix(p, bearerProtocolPrefix) {
				filtered = append(filtered, p)
				continue
			}
			if saw {
				return nil, false, errors.New("multiple base64.bearer.authorization tokens specified")
			}
			saw = true
			decoded, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(p, bearerProtocolPrefix))
			if err != nil {
				return nil, false, errors.New("invalid base64.bearer.authorization token encoding")
			}
			if !utf8.Valid(decoded) {
				return nil, false, errors.New("invalid base64.bearer.authorization token")
			}
			token = string(decoded)
		}
	}
	if token == "" {
		return nil, false, nil
	}
	if len(filtered) == 0 {
		return nil, false, errors.New("missing additional subprotocol")
	}
	u, ok, err := a.review(r.Context(), token)
	if ok {
		r.Header.Set(webSocketProtocolHeader, strings.Join(filtered, ","))
		return u, true, nil
	}
	if err == nil {
		err = errInvalidToken
	}
	return nil, false, err
}

func (a *tokenAuthenticator) review(ctx context.Context, token string) (*User, bool, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := a.cache.Get(key); ok {
		res := v.(tokenResult)
		return copyUser(res.user), res.ok, nil
	}
	var tr *authnv1.TokenReview
	err := retry(ctx, a.clock, a.timeout, func(ctx context.Context) (err error) {
		start := a.clock.Now()
		tr, err = a.client.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		a.metrics.observe(err, a.clock.Since(start))
		return err
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to make webhook authenticator request")
		return nil, false, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated && tr.Status.Error != "" {
		// Not cached: the API server could not review the token (its
		// authenticators failed), which says nothing of the token itself.
		return nil, false, fmt.Errorf("token review: %s", tr.Status.Error)
	}
	res := tokenResult{}
	if tr.Status.Authenticated {
		u := &User{Name: tr.Status.User.Username, UID: tr.Status.User.UID, Groups: slices.Clone(tr.Status.User.Groups)}
		if len(tr.Status.User.Extra) > 0 {
			u.Extra = make(map[string][]string, len(tr.Status.User.Extra))
			for k, v := range tr.Status.User.Extra {
				u.Extra[k] = slices.Clone(v)
			}
		}
		res.user, res.ok = u, true
	}
	a.cache.Add(key, res, a.ttl)
	return copyUser(res.user), res.ok, nil
}

func copyUser(u *User) *User {
	if u == nil {
		return nil
	}
	c := *u
	c.Groups = slices.Clone(u.Groups)
	return &c
}

// alwaysAllow is the AlwaysAllow authorization mode.
type alwaysAllow struct{}

func (alwaysAllow) Authorize(context.Context, Attributes) (Decision, string, error) {
	return DecisionAllow, "", nil
}

// sarAuthorizer asks the API server with SubjectAccessReview and caches
// allowed answers for authorizedTTL and the others for unauthorizedTTL;
// failed calls are retried (see retry) and not cached.
type sarAuthorizer struct {
	client          authzclient.SubjectAccessReviewInterface
	cache           *cache.LRUExpireCache
	authorizedTTL   time.Duration
	unauthorizedTTL time.Duration
	timeout         time.Duration
	clock           clock.Clock
	metrics         *webhookMetrics
}

type sarResult struct {
	allowed bool
	reason  string
}

func (a *sarAuthorizer) Authorize(ctx context.Context, attr Attributes) (Decision, string, error) {
	spec := authzv1.SubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{
			Verb:        attr.Verb,
			Version:     attr.APIVersion,
			Resource:    attr.Resource,
			Subresource: attr.Subresource,
			Name:        attr.Name,
		},
	}
	if u := attr.User; u != nil {
		spec.User, spec.UID, spec.Groups = u.Name, u.UID, u.Groups
		if len(u.Extra) > 0 {
			spec.Extra = make(map[string]authzv1.ExtraValue, len(u.Extra))
			for k, v := range u.Extra {
				spec.Extra[k] = v
			}
		}
	}
	key := sarKey(&spec)
	if v, ok := a.cache.Get(key); ok {
		res := v.(sarResult)
		return decision(res.allowed), res.reason, nil
	}
	var sar *authzv1.SubjectAccessReview
	err := retry(ctx, a.clock, a.timeout, func(ctx context.Context) (err error) {
		start := a.clock.Now()
		sar, err = a.client.Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		a.metrics.observe(err, a.clock.Since(start))
		return err
	})
	if err != nil {
		return DecisionNoOpinion, "", fmt.Errorf("subject access review: %w", err)
	}
	res := sarResult{allowed: sar.Status.Allowed, reason: sar.Status.Reason}
	ttl := a.unauthorizedTTL
	if res.allowed {
		ttl = a.authorizedTTL
	}
	a.cache.Add(key, res, ttl)
	return decision(res.allowed), res.reason, nil
}

// sarKey identifies a review's spec in the cache; fields are separated by
// bytes that cannot occur in them unescaped (names are UTF-8 text).
func sarKey(spec *authzv1.SubjectAccessReviewSpec) string {
	ra := spec.ResourceAttributes
	n := len(spec.User) + len(spec.UID) + len(ra.Verb) + len(ra.Subresource) + len(ra.Name) + 32
	for _, g := range spec.Groups {
		n += len(g) + 2
	}
	b := make([]byte, 0, n)
	for _, s := range [...]string{spec.User, spec.UID, ra.Verb, ra.Version, ra.Resource, ra.Subresource, ra.Name} {
		b = strconv.AppendQuote(b, s)
	}
	b = append(b, 0)
	for _, g := range spec.Groups {
		b = strconv.AppendQuote(b, g)
	}
	if len(spec.Extra) > 0 {
		keys := make([]string, 0, len(spec.Extra))
		for k := range spec.Extra {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = append(b, 0)
			b = strconv.AppendQuote(b, k)
			for _, v := range spec.Extra[k] {
				b = strconv.AppendQuote(b, v)
			}
		}
	}
	return string(b)
}

func decision(allowed bool) Decision {
	if allowed {
		return DecisionAllow
	}
	return DecisionDeny
}

// withAuth wraps h with the kubelet's authentication and authorization
// filter: 401 "Unauthorized" when no user is authenticated, 500 on an
// authorization error, 403 with the kubelet's message when no attribute
// set is allowed. The user goes into the request context for h.
func withAuth(nodeName string, authn Authenticator, authz Authorizer, override []string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		u, ok, err := authn.AuthenticateRequest(r)
		if err != nil {
			logger.Error(err, "Unable to authenticate the request due to an error")
		}
		if err != nil || !ok {
			writeError(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		attrs := requestAttributes(nodeName, u, r, override)
		subs := make([]string, 0, len(attrs))
		allowed := false
		for _, a := range attrs {
			subs = append(subs, a.Subresource)
			d, _, err := authz.Authorize(r.Context(), a)
			if err != nil {
				logger.Error(err, "Authorization error", "user", u.Name, "verb", a.Verb, "resource", a.Resource, "subresource", a.Subresource)
				writeError(w, http.StatusInternalServerError, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)", u.Name, a.Verb, a.Resource, a.Subresource))
				return
			}
			if d == DecisionAllow {
				allowed = true
				break
			}
		}
		if !allowed {
			logger.V(2).Info("Forbidden", "user", u.Name, "verb", attrs[0].Verb, "resource", attrs[0].Resource, "subresource(s)", subs)
			writeError(w, http.StatusForbidden, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n", u.Name, attrs[0].Verb, attrs[0].Resource, subs))
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

// writeError writes msg as the body with status code, as go-restful's
// WriteErrorString does for the kubelet (plain text, no trailing newline
// unless msg has one).
func writeError(w http.ResponseWriter, code int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg))
}

// webhookMetrics are the kubelet's delegated authentication or
// authorization metrics (apiserver_delegated_authn_* or
// apiserver_delegated_authz_*): every TokenReview or SubjectAccessReview
// call, retries included, counted and timed by the HTTP status code of its
// answer ("201" for a review made, the error's code for an API error) or
// "<error>" when no answer came. A nil *webhookMetrics records nothing.
type webhookMetrics struct {
	total   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// newWebhookMetrics returns the metrics of kind "authn" or "authz",
// registered on reg when it is not nil.
func newWebhookMetrics(reg prometheus.Registerer, kind string) (*webhookMetrics, error) {
	m := &webhookMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_delegated_" + kind + "_request_total",
			Help: "[ALPHA] Number of HTTP requests partitioned by status code.",
		}, []string{"code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apiserver_delegated_" + kind + "_request_duration_seconds",
			Help:    "[ALPHA] Request latency in seconds. Broken down by status code.",
			Buckets: []float64{0.25, 0.5, 0.7, 1, 1.5, 3, 5, 10},
		}, []string{"code"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.total, m.latency} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register delegated %s metrics: %w", kind, err)
			}
		}
	}
	return m, nil
}

func (m *webhookMetrics) observe(err error, took time.Duration) {
	if m == nil {
		return
	}
	code := strconv.Itoa(http.StatusCreated)
	if err != nil {
		code = "<error>"
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Code != 0 {
			code = strconv.Itoa(int(status.Status().Code))
		}
	}
	m.total.WithLabelValues(code).Inc()
	m.latency.WithLabelValues(code).Observe(took.Seconds())
}

// Webhook retries, as the kubelet's DefaultAuthWebhookRetryBackoff: up to
// 5 attempts, 500ms apart growing by 1.5 (±20% jitter).
const (
	webhookAttempts     = 5
	webhookInitialDelay = 500 * time.Millisecond
)

// retry runs call, each attempt bounded by timeout, until it succeeds,
// fails with an error that is not transient, ctx is done, or the attempts
// run out; it waits on clk between attempts.
func retry(ctx context.Context, clk clock.Clock, timeout time.Duration, call func(context.Context) error) error {
	delay := webhookInitialDelay
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := call(actx)
		cancel()
		if err == nil || !transient(err) || attempt == webhookAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-clk.After(wait.Jitter(delay, 0.2)):
		}
		delay = time.Duration(float64(delay) * 1.5)
	}
}

// transient reports whether a webhook call's error is worth retrying, as
// the kubelet's webhook.DefaultShouldRetry: a reset or lost connection, an
// internal error, a timeout, throttling, or an answer asking to retry.
func transient(err error) bool {
	if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) || apierrors.IsInternalError(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
		return true
	}
	_, retry := apierrors.SuggestsClientDelay(err)
	return retry
}
