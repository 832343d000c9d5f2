package podsource

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// updateBuffer is how many merged updates may wait for the consumer before
// the sources block, the kubelet's channel size.
const updateBuffer = 50

// Options configures a Config.
type Options struct {
	// Sources are the pod sources to merge; their names must be unique and
	// not empty. A Config without sources is valid: it is ready at once and
	// never emits.
	Sources []Source
	// Clock stamps the kubernetes.io/config.seen annotation; default
	// clock.RealClock{}.
	Clock clock.Clock
	// Recorder, when set, receives a FailedValidation warning event for a
	// pod ignored because another pod of its source has the same namespace
	// and name, as the kubelet records.
	Recorder record.EventRecorder
}

// Config merges the snapshots of several pod sources into one ordered stream
// of Updates with the kubelet's pod config semantics, and keeps the latest
// version of every pod. Create it with New, start it with Run, consume
// Updates. All methods are safe for concurrent use.
type Config struct {
	sources  []Source
	clock    clock.Clock
	recorder record.EventRecorder

	// mergeMu serializes merges and their enqueueing, so updates reach the
	// queue in the order the merges computed them. It guards mergeNames
	// and mergeUIDs, the sets a merge keeps of the names and UIDs it met
	// in a snapshot, reused from merge to merge.
	mergeMu    sync.Mutex
	mergeNames map[types.NamespacedName]struct{}
	mergeUIDs  map[types.UID]struct{}
	queue      chan Update
	updates    chan Update

	// podsMu guards pods and mirrors: per source, per UID, the stored
	// entry of every pod, mirror pods apart. Only merge writes them (a
	// source's map of pods in place), with mergeMu held.
	podsMu  sync.RWMutex
	pods    map[string]map[types.UID]entry
	mirrors map[string]map[types.UID]entry

	// readyMu guards delivered: the sources whose first update the consumer
	// took from Updates.
	readyMu   sync.RWMutex
	delivered map[string]bool

	running atomic.Bool
}

// entry is one stored pod. pod is never modified once stored (a change
// stores a new object), so it may be handed out read-only; rv is the
// resourceVersion the source last sent for the pod.
type entry struct {
	pod *v1.Pod
	rv  string
}

// New validates opts and returns a Config that has not started its sources.
func New(opts Options) (*Config, error) {
	seen := make(map[string]bool, len(opts.Sources))
	for i, s := range opts.Sources {
		if s == nil {
			return nil, fmt.Errorf("podsource: source %d is nil", i)
		}
		name := s.Name()
		if name == "" {
			return nil, fmt.Errorf("podsource: source %d (%T) has an empty name", i, s)
		}
		if seen[name] {
			return nil, fmt.Errorf("podsource: two sources are named %q", name)
		}
		seen[name] = true
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Config{
		sources:   append([]Source(nil), opts.Sources...),
		clock:     opts.Clock,
		recorder:  opts.Recorder,
		queue:     make(chan Update, updateBuffer),
		updates:   make(chan Update),
		pods:      make(map[string]map[types.UID]entry, len(opts.Sources)),
		mirrors:   make(map[string]map[types.UID]entry, len(opts.Sources)),
		delivered: make(map[string]bool, len(opts.Sources)),

		mergeNames: map[types.NamespacedName]struct{}{},
		mergeUIDs:  map[types.UID]struct{}{},
	}, nil
}

// Updates returns the stream of merged updates, in the order they were
// computed. For each snapshot of a source the Config sends, in this order,
// the OpRemove, OpAdd, OpUpdate, OpDelete and OpReconcile updates it
// implies (each only when not empty), plus an empty OpAdd for a source's
// first snapshot when it implies no OpAdd, OpUpdate or OpDelete. The
// channel is unbuffered: a source's snapshot is merged only while fewer than
// 50 updates wait. It is closed when Run returns.
func (c *Config) Updates() <-chan Update { return c.updates }

// Names returns the names of the Config's sources, in the order given.
func (c *Config) Names() []string {
	names := make([]string, len(c.sources))
	for i, s := range c.sources {
		names[i] = s.Name()
	}
	return names
}

// AllReady reports whether the consumer has taken from Updates the first
// update of every source. It turns true only after the receive (a moment
// after it, so a consumer polling it may see false once more), never
// before; but the consumer may still be handling that update. What removes
// pods, containers or data no source wants must therefore not read it: the
// pod lifecycle loop's pods.Controller.SourcesReady turns true once the
// loop has handled those updates. It does not block.
func (c *Config) AllReady() bool {
	c.readyMu.RLock()
	defer c.readyMu.RUnlock()
	for _, s := range c.sources {
		if !c.delivered[s.Name()] {
			return false
		}
	}
	return true
}

// SeenSource reports whether the consumer has taken the first update of the
// named source from Updates. It does not block.
func (c *Config) SeenSource(name string) bool {
	c.readyMu.RLock()
	defer c.readyMu.RUnlock()
	return c.delivered[name]
}

// GetPodByUID returns the latest version of the pod uid from any source,
// with the Config's annotations, and whether there is one; mirror pods are
// not found here (see MirrorPodFor). The pod is shared and read-only: the
// caller must not modify it (DeepCopy it first). It does not block.
func (c *Config) GetPodByUID(uid types.UID) (*v1.Pod, bool) {
	c.podsMu.RLock()
	defer c.podsMu.RUnlock()
	for _, pods := range c.pods {
		if e, ok := pods[uid]; ok {
			return e.pod, true
		}
	}
	return nil, false
}

// Pods returns the latest version of every pod of every source, with the
// Config's annotations, as the kubelet's pod manager lists them: pods stay
// until their source removes them, terminated ones included. Mirror pods
// (the API objects of static pods) are left out: the static pod itself is
// listed. The slice is the caller's; the pods are shared and read-only. It
// does not block.
func (c *Config) Pods() []*v1.Pod {
	c.podsMu.RLock()
	defer c.podsMu.RUnlock()
	n := 0
	for _, pods := range c.pods {
		n += len(pods)
	}
	out := make([]*v1.Pod, 0, n)
	for _, pods := range c.pods {
		for _, e := range pods {
			if _, mirror := e.pod.Annotations[ConfigMirrorAnnotationKey]; !mirror {
				out = append(out, e.pod)
			}
		}
	}
	return out
}

// Run starts every source, merges their snapshots and delivers the updates
// until ctx is done; then it stops the sources, closes Updates and returns
// nil. When a source fails, Run stops the others and returns its error. Run
// may be called once.
func (c *Config) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("podsource: Config is already running or has run")
	}
	defer close(c.updates)
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var wg sync.WaitGroup
	for _, s := range c.sources {
		snapshots := make(chan []*v1.Pod)
		name := s.Name()
		srcCtx := klog.NewContext(ctx, logger.WithValues("source", name))
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := s.Run(srcCtx, snapshots); err != nil && ctx.Err() == nil {
				cancel(fmt.Errorf("podsource: source %q: %w", name, err))
			}
		}()
		go func() {
			defer wg.Done()
			c.listen(srcCtx, name, snapshots)
		}()
	}
	logger.V(2).Info("Started pod sources", "sources", len(c.sources))
	c.deliver(ctx)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	logger.V(2).Info("Stopped pod sources")
	return nil
}

// listen merges the snapshots of source until ctx is done.
func (c *Config) listen(ctx context.Context, source string, snapshots <-chan []*v1.Pod) {
	for {
		select {
		case <-ctx.Done():
			return
		case pods := <-snapshots:
			c.mergeMu.Lock()
			updates := c.merge(ctx, source, pods)
			for _, u := range updates {
				select {
				case c.queue <- u:
				case <-ctx.Done():
					c.mergeMu.Unlock()
					return
				}
			}
			c.mergeMu.Unlock()
		}
	}
}

// deliver hands queued updates to the consumer one at a time until ctx is
// done, marking a source delivered once the consumer took its first update.
func (c *Config) deliver(ctx context.Context) {
	for {
		var u Update
		select {
		case <-ctx.Done():
			return
		case u = <-c.queue:
		}
		select {
		case <-ctx.Done():
			return
		case c.updates <- u:
		}
		c.readyMu.Lock()
		c.delivered[u.Source] = true
		c.readyMu.Unlock()
	}
}
