package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/podsource"
)

// NodeSyncPeriod is how often Run checks Options.NodeHasSynced before it
// starts watching. The kubelet checks every second
// (WaitForAPIServerSyncPeriod); the check is a read of the node watch's
// state, so checking ten times as often costs nothing and starts the pods
// of a restarted agent up to a second sooner.
const NodeSyncPeriod = 100 * time.Millisecond

// Options configures a Source.
type Options struct {
	// Client lists and watches the pods; required.
	Client kubernetes.Interface
	// NodeName selects the pods bound to the node (spec.nodeName); required.
	NodeName string
	// NodeHasSynced, when set, gates the watch: Run polls it every
	// NodeSyncPeriod and starts watching pods only once it returns true,
	// as the kubelet waits for its Node informer so that admission knows
	// the node. It must not block.
	NodeHasSynced func() bool
	// Clock paces the NodeHasSynced polling; default clock.RealClock{}.
	Clock clock.Clock
}

// Source is the kubelet's "api" pod source: the pods of every namespace
// bound to one node, from a reflector's list and watch, sent as a full
// snapshot on every change. Create it with New; a podsource.Config runs it.
type Source struct {
	client        kubernetes.Interface
	nodeName      string
	nodeHasSynced func() bool
	clock         clock.Clock
}

var _ podsource.Source = (*Source)(nil)

// New validates opts and returns a Source. It makes no API calls.
func New(opts Options) (*Source, error) {
	if opts.Client == nil {
		return nil, errors.New("podsource/apiserver: Options.Client is required")
	}
	if opts.NodeName == "" {
		return nil, errors.New("podsource/apiserver: Options.NodeName is required")
	}
	if errs := validation.IsDNS1123Subdomain(opts.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("podsource/apiserver: invalid node name %q: %v", opts.NodeName, errs)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Source{client: opts.Client, nodeName: opts.NodeName, nodeHasSynced: opts.NodeHasSynced, clock: opts.Clock}, nil
}

// Name returns podsource.APIServerSource ("api").
func (s *Source) Name() string { return podsource.APIServerSource }

// Run waits for NodeHasSynced when set, then lists and watches the node's
// pods (field selector spec.nodeName=<node>, all namespaces) and sends the
// complete list on out after the initial list and after every change, until
// ctx is done. List and watch failures are retried with the reflector's
// back-off; Run returns nil when ctx is done.
func (s *Source) Run(ctx context.Context, out chan<- []*v1.Pod) error {
	logger := klog.FromContext(ctx).WithValues("node", s.nodeName)
	if s.nodeHasSynced != nil {
		logger.Info("Waiting for node sync before watching apiserver pods")
		if !s.waitForNode(ctx) {
			return nil
		}
	}
	logger.Info("Watching apiserver pods")

	selector := fields.OneTermEqualSelector("spec.nodeName", s.nodeName).String()
	pods := s.client.CoreV1().Pods(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	push := func(objs []interface{}) {
		snapshot := make([]*v1.Pod, 0, len(objs))
		for _, o := range objs {
			// The field selector already filters; the check keeps the
			// contract with servers (and fakes) that ignore it.
			if p, ok := o.(*v1.Pod); ok && p.Spec.NodeName == s.nodeName {
				snapshot = append(snapshot, p)
			}
		}
		select {
		case out <- snapshot:
		case <-ctx.Done():
		}
	}
	store := cache.NewUndeltaStore(push, cache.MetaNamespaceKeyFunc)
	// The wrapper lets the reflector use watch-list against a real API
	// server and fall back to list+watch for clients that cannot (fakes).
	r := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, s.client), &v1.Pod{}, store,
		cache.ReflectorOptions{Name: "podsource/apiserver", Logger: &logger})
	r.RunWithContext(ctx)
	return nil
}

// waitForNode polls nodeHasSynced every NodeSyncPeriod until it returns
// true (true) or ctx is done (false).
func (s *Source) waitForNode(ctx context.Context) bool {
	for !s.nodeHasSynced() {
		t := s.clock.NewTimer(NodeSyncPeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
		klog.FromContext(ctx).V(4).Info("Node sync has not completed yet", "node", s.nodeName)
	}
	return true
}
