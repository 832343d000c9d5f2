package imagepull

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// Options configures a Manager. RootDir and Images are required.
type Options struct {
	// RootDir is the kubelet's root directory (--root-dir); the records
	// are under RootDir/image_manager.
	RootDir string
	// Images lists the runtime's images once, at Init, to turn the intents
	// a crash left into records of an image the kubelet pulled.
	Images cri.ImageManagerService
	// Policy is imagePullCredentialsVerificationPolicy ("" means the
	// kubelet's default, NeverVerifyPreloadedImages) and Allowlist
	// preloadedImagesVerificationAllowlist, for
	// NeverVerifyAllowlistedImages only.
	Policy    kubeletconfig.ImagePullCredentialsVerificationPolicy
	Allowlist []string
	// MaxPods and MaxParallelPulls size the in-memory caches as the
	// kubelet's: intents max(2×MaxPods, 2×MaxParallelPulls) up to 1024,
	// pulled records 5×MaxPods up to 2000 (MaxPods 0 means 110). A record
	// beyond them is read from disk when asked.
	MaxPods, MaxParallelPulls int
	// Clock dates the records (default clock.RealClock{}).
	Clock clock.Clock
	// Registerer registers the kubelet's metrics of the image pull
	// manager: kubelet_imagemanager_image_mustpull_checks_total,
	// kubelet_imagemanager_ondisk_pullintents and _pulledrecords, and
	// kubelet_imagemanager_inmemory_pullintents_usage_percent and
	// _pulledrecords_usage_percent. nil registers nothing.
	Registerer prometheus.Registerer
}

// Results of MustAttemptImagePull, the labels of
// kubelet_imagemanager_image_mustpull_checks_total.
const (
	resultPolicyAllowed = "credentialPolicyAllowed"
	resultRecordFound   = "credentialRecordFound"
	resultMustAuth      = "mustAuthenticate"
	resultError         = "error"
)

// writeWhileMatchingLimit: a secret found to match while checking is
// added to the image's record only while the record lists fewer secrets
// (the kubelet's bound on writes under namespace turnover).
const writeWhileMatchingLimit = 100

// Manager is the kubelet's image pull manager
// (pkg/kubelet/images/pullmanager): it records which credentials pulled
// each image and tells whether a pod must pull an image present on the
// node again with its own. Its methods are safe for concurrent use; the
// first call (or Init) opens the records.
type Manager struct {
	opts    Options
	policy  policy
	clock   clock.Clock
	metrics *metrics // nil: no Registerer
	intentN int
	pulledN int

	initOnce sync.Once
	initErr  error

	// mu serializes the store and guards pulling.
	mu    sync.Mutex
	store *store
	// pulling counts the pulls in flight by image: its intent is removed
	// when the last one ends.
	pulling map[string]int
}

// New checks opts (the policy and its allowlist) and applies defaults. It
// does no I/O.
func New(opts Options) (*Manager, error) {
	if opts.RootDir == "" || opts.Images == nil {
		return nil, errors.New("image pull manager: the root directory and the CRI image service are required")
	}
	if opts.Policy != kubeletconfig.NeverVerifyAllowlistedImages && len(opts.Allowlist) > 0 {
		return nil, fmt.Errorf("image pull manager: an allowlist is only for policy %s, not %s", kubeletconfig.NeverVerifyAllowlistedImages, opts.Policy)
	}
	p, err := newPolicy(opts.Policy, opts.Allowlist)
	if err != nil {
		return nil, fmt.Errorf("image pull manager: %w", err)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	maxPods := opts.MaxPods
	if maxPods <= 0 {
		maxPods = 110
	}
	m := &Manager{opts: opts, policy: p, clock: opts.Clock, pulling: map[string]int{},
		intentN: max(min(max(2*maxPods, 2*opts.MaxParallelPulls), 1024), 1),
		pulledN: max(min(5*maxPods, 2000), 1)}
	if opts.Registerer != nil {
		if m.metrics, err = newMetrics(opts.Registerer); err != nil {
			return nil, fmt.Errorf("image pull manager: %w", err)
		}
	}
	return m, nil
}

// metrics are the kubelet's image pull manager metrics.
type metrics struct {
	checks                      *prometheus.CounterVec
	onDiskIntents, onDiskPulled prometheus.Gauge
	inMemIntents, inMemPulled   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubelet", Name: name, Help: help})
	}
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "imagemanager_image_mustpull_checks_total",
			Help: "Counter for how many times kubelet checked whether credentials need to be re-verified to access an image",
		}, []string{"result"}),
		onDiskIntents: gauge("imagemanager_ondisk_pullintents", "Number of ImagePullIntents stored on disk."),
		onDiskPulled:  gauge("imagemanager_ondisk_pulledrecords", "Number of ImagePulledRecords stored on disk."),
		inMemIntents:  gauge("imagemanager_inmemory_pullintents_usage_percent", "The ImagePullIntents in-memory cache usage in percent."),
		inMemPulled:   gauge("imagemanager_inmemory_pulledrecords_usage_percent", "The ImagePulledRecords in-memory cache usage in percent."),
	}
	if err := errors.Join(register(reg, &m.checks), register(reg, &m.onDiskIntents), register(reg, &m.onDiskPulled),
		register(reg, &m.inMemIntents), register(reg, &m.inMemPulled)); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers *c, or makes it the collector of that name already
// registered (another Manager of the same registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}

// meter sets the record gauges: the files on disk (as the kubelet, counted
// after each change) and the caches' use. m.mu is held.
func (m *Manager) meter() {
	if m.metrics == nil {
		return
	}
	if n, err := m.store.count(); err == nil {
		m.metrics.onDiskIntents.Set(float64(n.intents))
		m.metrics.onDiskPulled.Set(float64(n.pulled))
	}
	m.metrics.inMemIntents.Set(float64(m.store.intents.cache.Len() * 100 / m.store.intents.size))
	m.metrics.inMemPulled.Set(float64(m.store.pulled.cache.Len() * 100 / m.store.pulled.size))
}

// Init opens the records once: it makes RootDir/image_manager/pulling and
// .../pulled (0700), rewrites v1alpha1 records as v1beta1, and turns each
// intent left by an agent that stopped mid-pull into a pulled record
// without credentials when the runtime has the image by that name (its
// tags and digests), as the kubelet at start: the image counts as pulled
// by the kubelet and every pod must prove it may use it. An intent whose
// image the runtime has not (or that it cannot list) stays, with the same
// effect. Only a directory that cannot be made is an error; unreadable
// records are logged with their file names and prove nothing. The other
// methods call Init themselves; call it at start to fail early.
func (m *Manager) Init(ctx context.Context) error {
	m.initOnce.Do(func() {
		logger := klog.FromContext(ctx)
		m.mu.Lock()
		defer m.mu.Unlock()
		s, intents, err := openStore(logger, m.opts.RootDir, m.intentN, m.pulledN)
		if err != nil {
			m.initErr = err
			return
		}
		m.store = s
		m.convertIntents(ctx, logger, intents)
		m.meter()
	})
	return m.initErr
}

// convertIntents turns the intents (their images) of images the runtime
// has into pulled records without credentials. m.mu is held.
func (m *Manager) convertIntents(ctx context.Context, logger logr.Logger, intents []string) {
	if len(intents) == 0 {
		return
	}
	images, err := m.opts.Images.ListImages(ctx, nil)
	if err != nil {
		logger.Error(err, "Cannot list images to turn the image pull intents left by a previous run into records; they stay", "intents", len(intents))
		return
	}
	left := map[string]bool{}
	for _, image := range intents {
		left[image] = true
	}
	for _, img := range images {
		for _, name := range append(slices.Clone(img.GetRepoDigests()), img.GetRepoTags()...) {
			if !left[name] {
				continue
			}
			if err := m.writePulled(name, img.GetId(), nil); err != nil {
				logger.Error(err, "Cannot record an image pulled before a restart", "image", name, "imageRef", img.GetId())
				continue
			}
			if err := m.store.deleteIntent(name); err != nil {
				logger.V(2).Info("Cannot remove an image pull intent", "image", name, "err", err)
			}
		}
	}
}

// RecordPullIntent records on disk that image (a container's image field
// as written) is about to be pulled with credentials the records will
// name: until RecordImagePulled or RecordImagePullFailed, and after a
// crash, the image counts as pulled by the kubelet. Each call must be
// followed by exactly one of those two.
func (m *Manager) RecordPullIntent(ctx context.Context, image string) error {
	if err := m.Init(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.meter()
	if err := m.store.writeIntent(image); err != nil {
		return err
	}
	m.pulling[image]++
	return nil
}

// RecordImagePulled records that image was pulled as imageRef (the
// runtime's image ID) with creds: one secret (its coordinates and the
// hash of its credentials), or NodePodsAccessible for a pull without
// credentials. creds are added to the image's record. When the record
// cannot be written the error is logged and the intent is kept, so the
// image still counts as pulled by the kubelet.
func (m *Manager) RecordImagePulled(ctx context.Context, image, imageRef string, creds *kubeletconfig.ImagePullCredentials) {
	logger := klog.FromContext(ctx)
	if err := m.Init(ctx); err != nil {
		logger.Error(err, "Cannot record a pulled image", "image", image, "imageRef", imageRef)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.meter()
	if err := m.writePulled(image, imageRef, creds); err != nil {
		logger.Error(err, "Cannot record a pulled image", "image", image, "imageRef", imageRef)
		return
	}
	m.pullEnded(logger, image)
}

// RecordImagePullFailed records that a pull of image RecordPullIntent
// announced did not happen or failed.
func (m *Manager) RecordImagePullFailed(ctx context.Context, image string) {
	if m.Init(ctx) != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.meter()
	m.pullEnded(klog.FromContext(ctx), image)
}

// pullEnded removes image's intent when no other pull of it is in
// flight. m.mu is held.
func (m *Manager) pullEnded(logger logr.Logger, image string) {
	if m.pulling[image] > 1 {
		m.pulling[image]--
		return
	}
	if err := m.store.deleteIntent(image); err != nil {
		logger.Error(err, "Cannot remove an image pull intent", "image", image)
		return
	}
	delete(m.pulling, image)
}

// writePulled adds creds (nil: none, the image counts as pulled by the
// kubelet but nobody proved access) for image to imageRef's record,
// writing it only when it changed. A record that cannot be read is
// replaced. m.mu is held.
func (m *Manager) writePulled(image, imageRef string, creds *kubeletconfig.ImagePullCredentials) error {
	name, err := trimTagDigest(image)
	if err != nil {
		return fmt.Errorf("invalid image name %q: %w", image, err)
	}
	r, _, err := m.store.getPulled(imageRef)
	if err != nil {
		r = nil // replaced: it proves nothing
	}
	now := metav1.NewTime(m.clock.Now())
	if r == nil {
		r = &kubeletconfig.ImagePulledRecord{LastUpdatedTime: now, ImageRef: imageRef,
			CredentialMapping: map[string]kubeletconfig.ImagePullCredentials{}}
		if creds != nil {
			r.CredentialMapping[name] = *creds
		}
		return m.store.writePulled(r)
	}
	merged, changed := mergeCreds(r.CredentialMapping[name], creds)
	if !changed {
		return nil
	}
	out := r.DeepCopy()
	if out.CredentialMapping == nil {
		out.CredentialMapping = map[string]kubeletconfig.ImagePullCredentials{}
	}
	out.CredentialMapping[name] = merged
	out.LastUpdatedTime = now
	return m.store.writePulled(out)
}

// mergeCreds adds add to have: NodePodsAccessible replaces any list; a
// secret replaces the one with its coordinates (a new hash); a service
// account joins the list. Lists stay sorted by namespace, name and UID.
func mergeCreds(have kubeletconfig.ImagePullCredentials, add *kubeletconfig.ImagePullCredentials) (kubeletconfig.ImagePullCredentials, bool) {
	if add == nil || have.NodePodsAccessible {
		return have, false
	}
	switch {
	case add.NodePodsAccessible:
		return kubeletconfig.ImagePullCredentials{NodePodsAccessible: true}, true
	case len(add.KubernetesSecrets) > 0:
		secrets := slices.Clone(have.KubernetesSecrets)
		changed := false
		for _, s := range add.KubernetesSecrets {
			i := slices.IndexFunc(secrets, func(h kubeletconfig.ImagePullSecret) bool {
				return h.UID == s.UID && h.Namespace == s.Namespace && h.Name == s.Name
			})
			switch {
			case i < 0:
				secrets = append(secrets, s)
			case secrets[i].CredentialHash != s.CredentialHash:
				secrets[i].CredentialHash = s.CredentialHash
			default:
				continue
			}
			changed = true
		}
		if !changed {
			return have, false
		}
		slices.SortFunc(secrets, func(a, b kubeletconfig.ImagePullSecret) int {
			return compareCoords(a.Namespace, a.Name, a.UID, b.Namespace, b.Name, b.UID)
		})
		have.KubernetesSecrets = secrets
		return have, true
	case len(add.KubernetesServiceAccounts) > 0:
		accounts := slices.Clone(have.KubernetesServiceAccounts)
		changed := false
		for _, a := range add.KubernetesServiceAccounts {
			if !slices.Contains(accounts, a) {
				accounts = append(accounts, a)
				changed = true
			}
		}
		if !changed {
			return have, false
		}
		slices.SortFunc(accounts, func(a, b kubeletconfig.ImagePullServiceAccount) int {
			return compareCoords(a.Namespace, a.Name, a.UID, b.Namespace, b.Name, b.UID)
		})
		have.KubernetesServiceAccounts = accounts
		return have, true
	}
	return have, false
}

func compareCoords(ns1, name1, uid1, ns2, name2, uid2 string) int {
	if c := strings.Compare(ns1, ns2); c != 0 {
		return c
	}
	if c := strings.Compare(name1, name2); c != 0 {
		return c
	}
	return strings.Compare(uid1, uid2)
}

// MustAttemptImagePull tells whether a pod must pull image (its
// container's image field as written), present on the node as imageRef,
// with its own credentials before using it, as the kubelet's: not when
// the policy trusts the image (NeverVerify; NeverVerifyPreloadedImages
// and an image no record says the kubelet pulled; an allowlisted image),
// nor when the image's record says it was pulled without credentials, or
// with one of the pod's secrets (the same namespace, name and UID, or
// credentials with the same hash), or for the pod's service account.
// podCredentials, asked only when the record names credentials, returns
// the pod's secrets that hold credentials for the image's registry (each
// with the hash of those credentials) and the service account a
// credential provider would use (nil: none). A matching secret not yet in
// the record is added to it. A record that cannot be read is logged and
// the answer is true; an error from podCredentials is returned, with
// true.
func (m *Manager) MustAttemptImagePull(ctx context.Context, image, imageRef string,
	podCredentials func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error)) (bool, error) {
	if imageRef == "" {
		return true, nil
	}
	must, result, err := m.mustAttempt(ctx, image, imageRef, podCredentials)
	if m.metrics != nil {
		m.metrics.checks.WithLabelValues(result).Inc()
	}
	return must, err
}

func (m *Manager) mustAttempt(ctx context.Context, image, imageRef string,
	podCredentials func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error)) (bool, string, error) {
	logger := klog.FromContext(ctx)
	if err := m.Init(ctx); err != nil {
		logger.Error(err, "Unable to access cache records about image pulls")
		return true, resultError, nil
	}
	m.mu.Lock()
	r, byKubelet, err := m.pulledBy(image, imageRef)
	m.mu.Unlock()
	if err != nil {
		logger.Error(err, "Unable to access cache records about image pulls", "image", image, "imageRef", imageRef)
		return true, resultError, nil
	}
	if !m.policy(image, byKubelet) {
		return false, resultPolicyAllowed, nil
	}
	if r == nil {
		return true, resultMustAuth, nil
	}
	name, err := trimTagDigest(image)
	if err != nil {
		logger.Error(err, "Failed to parse image name, forcing image credentials reverification", "image", image)
		return true, resultError, nil
	}
	cached, ok := r.CredentialMapping[name]
	switch {
	case !ok:
		return true, resultMustAuth, nil
	case cached.NodePodsAccessible:
		return false, resultRecordFound, nil
	case len(cached.KubernetesSecrets) == 0 && len(cached.KubernetesServiceAccounts) == 0:
		return true, resultMustAuth, nil
	}
	secrets, account, err := podCredentials()
	if err != nil {
		return true, resultError, err
	}
	for _, ps := range secrets {
		for _, cs := range cached.KubernetesSecrets {
			hashes := cs.CredentialHash != "" && ps.CredentialHash == cs.CredentialHash
			coords := ps.UID == cs.UID && ps.Namespace == cs.Namespace && ps.Name == cs.Name
			room := len(cached.KubernetesSecrets) < writeWhileMatchingLimit
			switch {
			case hashes:
				if !coords && room {
					// Another secret with the same credentials: remember it.
					m.rememberSecret(ctx, image, imageRef, ps)
				}
				return false, resultRecordFound, nil
			case coords && room:
				// The same secret with new credentials: remember its hash.
				m.rememberSecret(ctx, image, imageRef, ps)
				return false, resultRecordFound, nil
			}
		}
	}
	if account != nil && slices.Contains(cached.KubernetesServiceAccounts, *account) {
		return false, resultRecordFound, nil
	}
	return true, resultMustAuth, nil
}

// rememberSecret adds secret to imageRef's record for image.
func (m *Manager) rememberSecret(ctx context.Context, image, imageRef string, secret kubeletconfig.ImagePullSecret) {
	m.mu.Lock()
	err := m.writePulled(image, imageRef, &kubeletconfig.ImagePullCredentials{KubernetesSecrets: []kubeletconfig.ImagePullSecret{secret}})
	m.meter()
	m.mu.Unlock()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to write an image pulled record", "image", image, "imageRef", imageRef)
	}
}

// pulledBy returns imageRef's record and whether the kubelet pulled the
// image: a record, or an intent for image (a pull in flight, or one a
// crash interrupted). m.mu is held.
func (m *Manager) pulledBy(image, imageRef string) (*kubeletconfig.ImagePulledRecord, bool, error) {
	r, exists, err := m.store.getPulled(imageRef)
	if err != nil {
		return nil, false, err
	}
	if exists {
		return r, true, nil
	}
	if m.pulling[image] > 0 {
		return nil, true, nil
	}
	found, err := m.store.intentExists(image)
	if err != nil {
		return nil, false, fmt.Errorf("failed to check existence of an image pull intent: %w", err)
	}
	return nil, found, nil
}

// PruneUnknownRecords removes the pulled records of the image refs not in
// images (the images left on the node after a garbage collection) that
// were last written before until (when the collection began): the image
// GC's hook. A record that cannot be read stays (logged).
func (m *Manager) PruneUnknownRecords(ctx context.Context, images []string, until time.Time) {
	logger := klog.FromContext(ctx)
	if m.Init(ctx) != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.meter()
	records, err := m.store.listPulled(logger)
	if err != nil {
		logger.Error(err, "There were errors listing image pulled records; pruning the ones that could be read")
	}
	keep := map[string]bool{}
	for _, id := range images {
		keep[id] = true
	}
	for _, r := range records {
		if !r.LastUpdatedTime.Time.Before(until) || keep[r.ImageRef] {
			continue
		}
		if err := m.store.deletePulled(r.ImageRef); err != nil {
			logger.Error(err, "Failed to remove an image pulled record", "imageRef", r.ImageRef)
		}
	}
}
