package volume

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// objectKind is the kind of API object the cache watches.
type objectKind int

const (
	kindConfigMap objectKind = iota
	kindSecret
)

func (k objectKind) String() string {
	if k == kindSecret {
		return "secret"
	}
	return "configmap"
}

// groupResource is what NotFound errors name: `configmap "x" not found`,
// as the kubelet's managers say.
func (k objectKind) groupResource() schema.GroupResource {
	return schema.GroupResource{Resource: k.String()}
}

// objectKey identifies a watched object.
type objectKey struct {
	kind      objectKind
	namespace string
	name      string
}

// cacheSyncTimeout is how long a read waits for a new watch's first list,
// the kubelet's.
const cacheSyncTimeout = time.Second

// objectCache keeps one watch per referenced configMap or secret, as the
// kubelet's watch-based managers: a reflector listing and watching the
// object alone (field selector metadata.name), started when the first pod
// references it and stopped when the last reference goes, or when the
// object is seen immutable. onChange is called (without locks held) for
// every add, update or delete of a watched object.
type objectCache struct {
	client   kubernetes.Interface
	clock    clock.Clock
	onChange func(objectKey)

	mu    sync.Mutex
	items map[objectKey]*cacheItem
	// ctx is Run's context; watches start once it is set.
	ctx context.Context
}

type cacheItem struct {
	key   objectKey
	refs  map[types.UID]int
	store *notifyingStore
	// cancel stops the reflector; nil while it is not running.
	cancel    context.CancelFunc
	immutable bool
}

func newObjectCache(client kubernetes.Interface, clk clock.Clock, onChange func(objectKey)) *objectCache {
	return &objectCache{client: client, clock: clk, onChange: onChange, items: map[objectKey]*cacheItem{}}
}

// start starts the watches of the objects referenced so far and of those
// referenced later, until ctx is done.
func (c *objectCache) start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ctx = ctx
	for _, it := range c.items {
		c.startLocked(it)
	}
}

// stop stops every watch.
func (c *objectCache) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, it := range c.items {
		if it.cancel != nil {
			it.cancel()
			it.cancel = nil
		}
	}
	c.ctx = nil
}

// addReference records that pod uid references key, starting its watch.
func (c *objectCache) addReference(key objectKey, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[key]
	if !ok {
		it = &cacheItem{key: key, refs: map[types.UID]int{}, store: newNotifyingStore(key, c.onChange)}
		c.items[key] = it
		c.startLocked(it)
	}
	it.refs[uid]++
}

// deleteReference drops one reference of pod uid to key, stopping the
// watch with the last one.
func (c *objectCache) deleteReference(key objectKey, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[key]
	if !ok {
		return
	}
	it.refs[uid]--
	if it.refs[uid] <= 0 {
		delete(it.refs, uid)
	}
	if len(it.refs) == 0 {
		if it.cancel != nil {
			it.cancel()
		}
		delete(c.items, key)
	}
}

// referencedBy returns the pods referencing key.
func (c *objectCache) referencedBy(key objectKey) []types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[key]
	if !ok {
		return nil
	}
	uids := make([]types.UID, 0, len(it.refs))
	for uid := range it.refs {
		uids = append(uids, uid)
	}
	return uids
}

// watched returns the number of objects watched, for tests.
func (c *objectCache) watched() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, it := range c.items {
		if it.cancel != nil {
			n++
		}
	}
	return n
}

func (c *objectCache) startLocked(it *cacheItem) {
	if c.ctx == nil || it.cancel != nil || it.immutable || c.client == nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	it.cancel = cancel
	it.store.resetSynced()
	key := it.key
	selector := fields.OneTermEqualSelector("metadata.name", key.name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			if key.kind == kindSecret {
				return c.client.CoreV1().Secrets(key.namespace).List(ctx, o)
			}
			return c.client.CoreV1().ConfigMaps(key.namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			if key.kind == kindSecret {
				return c.client.CoreV1().Secrets(key.namespace).Watch(ctx, o)
			}
			return c.client.CoreV1().ConfigMaps(key.namespace).Watch(ctx, o)
		},
	}
	var expected runtime.Object = &v1.ConfigMap{}
	if key.kind == kindSecret {
		expected = &v1.Secret{}
	}
	logger := klog.FromContext(ctx)
	r := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, c.client), expected, it.store,
		cache.ReflectorOptions{
			Name:            fmt.Sprintf("object-%q/%q", key.namespace, key.name),
			Logger:          &logger,
			MinWatchTimeout: 30 * time.Minute,
		})
	go r.RunWithContext(ctx)
}

// get returns the object: from its watch when a pod references it and the
// watch runs, otherwise from the API server.
func (c *objectCache) get(ctx context.Context, key objectKey) (runtime.Object, error) {
	c.mu.Lock()
	it, ok := c.items[key]
	var running bool
	if ok {
		running = it.cancel != nil || it.immutable
	}
	c.mu.Unlock()
	if !ok || !running {
		return c.fetch(ctx, key)
	}
	if err := it.store.waitSynced(ctx, c.clock, cacheSyncTimeout); err != nil {
		return nil, fmt.Errorf("failed to sync %s cache: %w", key.kind, err)
	}
	obj, exists, err := it.store.GetByKey(key.namespace + "/" + key.name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(key.kind.groupResource(), key.name)
	}
	o := obj.(runtime.Object)
	if isImmutable(o) {
		c.mu.Lock()
		if !it.immutable {
			it.immutable = true
			if it.cancel != nil {
				it.cancel()
				it.cancel = nil
				klog.FromContext(ctx).V(4).Info("Stopped watching for changes - object is immutable", "obj", klog.KRef(key.namespace, key.name))
			}
		}
		c.mu.Unlock()
	}
	return o, nil
}

// fetch reads the object from the API server.
func (c *objectCache) fetch(ctx context.Context, key objectKey) (runtime.Object, error) {
	if c.client == nil {
		return nil, fmt.Errorf("cannot get %s %s/%s: no API client", key.kind, key.namespace, key.name)
	}
	var (
		obj runtime.Object
		err error
	)
	if key.kind == kindSecret {
		obj, err = c.client.CoreV1().Secrets(key.namespace).Get(ctx, key.name, metav1.GetOptions{})
	} else {
		obj, err = c.client.CoreV1().ConfigMaps(key.namespace).Get(ctx, key.name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(key.kind.groupResource(), key.name)
	}
	return obj, err
}

func isImmutable(o runtime.Object) bool {
	switch t := o.(type) {
	case *v1.ConfigMap:
		return t.Immutable != nil && *t.Immutable
	case *v1.Secret:
		return t.Immutable != nil && *t.Immutable
	}
	return false
}

// notifyingStore is the reflector's store: a thread-safe store that knows
// whether the first list arrived and reports every change of the watched
// object.
type notifyingStore struct {
	cache.Store
	key      objectKey
	onChange func(objectKey)

	mu     sync.Mutex
	synced chan struct{}
	// closed tells whether synced is closed.
	closed bool
}

func newNotifyingStore(key objectKey, onChange func(objectKey)) *notifyingStore {
	return &notifyingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), key: key, onChange: onChange, synced: make(chan struct{})}
}

// resetSynced makes readers wait for the next list: a restarted watch may
// have missed changes.
func (s *notifyingStore) resetSynced() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.synced = make(chan struct{})
		s.closed = false
	}
}

func (s *notifyingStore) waitSynced(ctx context.Context, clk clock.Clock, timeout time.Duration) error {
	s.mu.Lock()
	ch := s.synced
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	default:
	}
	t := clk.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C():
		return fmt.Errorf("timed out waiting for the condition")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// relevant filters out other objects a server (or a fake) that ignores the
// field selector sends.
func (s *notifyingStore) relevant(obj interface{}) bool {
	m, err := metaAccessor(obj)
	return err == nil && m.GetName() == s.key.name && m.GetNamespace() == s.key.namespace
}

func (s *notifyingStore) notify() {
	if s.onChange != nil {
		s.onChange(s.key)
	}
}

func (s *notifyingStore) Add(obj interface{}) error {
	if !s.relevant(obj) {
		return nil
	}
	if err := s.Store.Add(obj); err != nil {
		return err
	}
	s.notify()
	return nil
}

func (s *notifyingStore) Update(obj interface{}) error {
	if !s.relevant(obj) {
		return nil
	}
	if err := s.Store.Update(obj); err != nil {
		return err
	}
	s.notify()
	return nil
}

func (s *notifyingStore) Delete(obj interface{}) error {
	if !s.relevant(obj) {
		return nil
	}
	if err := s.Store.Delete(obj); err != nil {
		return err
	}
	s.notify()
	return nil
}

func (s *notifyingStore) Replace(list []interface{}, rv string) error {
	kept := list[:0:0]
	for _, o := range list {
		if s.relevant(o) {
			kept = append(kept, o)
		}
	}
	if err := s.Store.Replace(kept, rv); err != nil {
		return err
	}
	s.mu.Lock()
	first := !s.closed
	if first {
		close(s.synced)
		s.closed = true
	}
	s.mu.Unlock()
	// The first list is no change: readers waited for it. A later one
	// (after the watch broke) may carry changes.
	if !first {
		s.notify()
	}
	return nil
}

func metaAccessor(obj interface{}) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}
