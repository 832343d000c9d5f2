package volume

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Token refresh parameters, the kubelet's token manager's.
const (
	// tokenMaxTTL is the longest a token is used before it is refreshed.
	tokenMaxTTL = 24 * time.Hour
	// tokenMaxJitter spreads the refreshes of many tokens.
	tokenMaxJitter = 10 * time.Second
)

// tokenManager requests service-account tokens with the TokenRequest API
// and caches them, refreshing a token when 80 % of its life has passed or
// it is older than 24 h, as the kubelet's token manager. A token whose
// refresh fails is used until it expires.
type tokenManager struct {
	client kubernetes.Interface
	clock  clock.Clock

	mu    sync.RWMutex
	cache map[string]*authenticationv1.TokenRequest
}

func newTokenManager(client kubernetes.Interface, clk clock.Clock) *tokenManager {
	return &tokenManager{client: client, clock: clk, cache: map[string]*authenticationv1.TokenRequest{}}
}

// get returns a token of service account namespace/name for tr.
func (m *tokenManager) get(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	key := tokenKey(name, namespace, tr)
	m.mu.RLock()
	cached, ok := m.cache[key]
	m.mu.RUnlock()
	if ok && !m.requiresRefresh(ctx, cached) {
		return cached, nil
	}
	fresh, err := m.request(ctx, namespace, name, tr)
	if err != nil {
		switch {
		case !ok:
			return nil, fmt.Errorf("failed to fetch token: %w", err)
		case m.expired(cached):
			return nil, fmt.Errorf("token %s expired and refresh failed: %w", key, err)
		default:
			klog.FromContext(ctx).Error(err, "Couldn't update token", "cacheKey", key)
			return cached, nil
		}
	}
	m.mu.Lock()
	m.cache[key] = fresh
	m.mu.Unlock()
	return fresh, nil
}

func (m *tokenManager) request(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if m.client == nil {
		return nil, errors.New("cannot request service account tokens without an API client")
	}
	return m.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, tr, metav1.CreateOptions{})
}

// deletePod forgets the tokens bound to pod uid.
func (m *tokenManager) deletePod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, tr := range m.cache {
		if tr.Spec.BoundObjectRef != nil && tr.Spec.BoundObjectRef.UID == uid {
			delete(m.cache, k)
		}
	}
}

// cleanup forgets expired tokens.
func (m *tokenManager) cleanup() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, tr := range m.cache {
		if m.expired(tr) {
			delete(m.cache, k)
		}
	}
}

func (m *tokenManager) expired(tr *authenticationv1.TokenRequest) bool {
	return m.clock.Now().After(tr.Status.ExpirationTimestamp.Time)
}

// requiresRefresh reports whether tr is older than 24 h or has less than
// 20 % of its life left, less up to 10 s of jitter.
func (m *tokenManager) requiresRefresh(ctx context.Context, tr *authenticationv1.TokenRequest) bool {
	if tr.Spec.ExpirationSeconds == nil {
		klog.FromContext(ctx).Error(nil, "Expiration seconds was nil for token request", "serviceAccount", tr.Name)
		return false
	}
	now := m.clock.Now()
	exp := tr.Status.ExpirationTimestamp.Time
	life := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	issued := exp.Add(-life)
	jitter := time.Duration(rand.Float64()*tokenMaxJitter.Seconds()) * time.Second
	if now.After(issued.Add(tokenMaxTTL - jitter)) {
		return true
	}
	return now.After(exp.Add(-life*20/100 - jitter))
}

// tokenKey identifies a token request, as the kubelet's cache key.
func tokenKey(name, namespace string, tr *authenticationv1.TokenRequest) string {
	var exp int64
	if tr.Spec.ExpirationSeconds != nil {
		exp = *tr.Spec.ExpirationSeconds
	}
	var ref authenticationv1.BoundObjectReference
	if tr.Spec.BoundObjectRef != nil {
		ref = *tr.Spec.BoundObjectRef
	}
	return fmt.Sprintf("%q/%q/%#v/%#v/%#v/%q", name, namespace, tr.Spec.Audiences, exp, ref, tr.UID)
}
