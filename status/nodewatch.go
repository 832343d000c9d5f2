package status

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NodeWatch watches the node's own API object, once, for every module that
// reads it: the Reporter patches its status from it, admission checks pods
// against its allocatable, labels and taints, the API server pod source
// waits for it, the cgroup hierarchy sizes itself from its allocatable.
// It is the kubelet's node informer (a single-object informer with field
// selector metadata.name). A local NodeWatch (NewLocalNodeWatch) stands in
// for it on a standalone node, which has no API server. Its methods are safe
// for concurrent use.
type NodeWatch struct {
	name string
	// informer watches the API; nil for a local watch, whose Node is
	// local's.
	informer cache.SharedIndexInformer
	local    atomic.Pointer[v1.Node]
	// watchErrors counts the times the informer's list or watch failed:
	// its Node may then be stale until it lists again (see WatchErrors).
	watchErrors atomic.Int64

	// registered is closed, once, when a Reporter running with this
	// watch registered the Node; registeredNode is what registering
	// answered.
	registered     chan struct{}
	regOnce        sync.Once
	registeredNode atomic.Pointer[v1.Node]
	nodeCreated    atomic.Bool
}

// NewNodeWatch returns a watch of node name through client. It does no I/O
// until Run. Give a client without a request timeout (the agent's main
// client, not its heartbeat client), or every watch is cut off after the
// timeout and re-listed.
func NewNodeWatch(client kubernetes.Interface, name string) (*NodeWatch, error) {
	if client == nil || name == "" {
		return nil, errors.New("node watch: a client and the node name are required")
	}
	selector := fields.OneTermEqualSelector(metav1.ObjectNameField, name).String()
	informer := coreinformers.NewFilteredNodeInformer(client, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = selector
	})
	w := &NodeWatch{name: name, informer: informer, registered: make(chan struct{})}
	if err := informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		w.noteWatchError()
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, fmt.Errorf("node watch of %s: %w", name, err)
	}
	return w, nil
}

func (w *NodeWatch) noteWatchError() { w.watchErrors.Add(1) }

// WatchErrors counts the times the watch's list or watch call failed since
// it was made (always 0 for a local watch). After one, the Node it shows
// can be stale until the informer lists again — after an API server outage
// that can be tens of seconds (the reflector's back-off) — so a reader that
// must see what the API server has (the Reporter) reads the API until the
// watch shows what the API answered.
func (w *NodeWatch) WatchErrors() int64 { return w.watchErrors.Load() }

// NewLocalNodeWatch returns the NodeWatch of a standalone node, one without
// an API server: it watches nothing, has synced from the start, and its Node
// is the one last given to SetLocal (a Reporter without a Client computes it
// from the setters, as the kubelet computes its node when it has no API
// server). Everything that reads a NodeWatch (admission, the cgroup
// hierarchy, the node API) works unchanged on it.
func NewLocalNodeWatch(name string) (*NodeWatch, error) {
	if name == "" {
		return nil, errors.New("node watch: the node name is required")
	}
	return &NodeWatch{name: name, registered: make(chan struct{})}, nil
}

// Local reports whether w is a local watch (NewLocalNodeWatch).
func (w *NodeWatch) Local() bool { return w.informer == nil }

// SetLocal makes node the Node a local watch shows; the watch keeps it, so
// the caller must not modify it afterwards. It returns an error on a watch
// of the API server, whose Node only the API server changes, and for a
// node of another name.
func (w *NodeWatch) SetLocal(node *v1.Node) error {
	switch {
	case w.informer != nil:
		return errors.New("node watch: SetLocal on a watch of the API server")
	case node == nil || node.Name != w.name:
		return errors.New("node watch: SetLocal with another node than " + w.name)
	}
	w.local.Store(node)
	return nil
}

// Node returns the Node as last seen, and false until the watch has seen it
// (before Run, or before the node is registered; for a local watch, before
// the first SetLocal). The Node is shared with the watch's cache: callers
// must not modify it.
func (w *NodeWatch) Node() (*v1.Node, bool) {
	if w.informer == nil {
		node := w.local.Load()
		return node, node != nil
	}
	obj, ok, err := w.informer.GetStore().GetByKey(w.name)
	if err != nil || !ok {
		return nil, false
	}
	node, ok := obj.(*v1.Node)
	return node, ok
}

// Registered returns a channel that is closed once a Reporter running with
// this watch has registered the Node: created it, found it existing or (with
// registration off) seen it appear; for a local watch, once the Reporter
// computed it. A watch no Reporter runs with never closes it. Modules that
// need the Node's UID (the Lease's and the CSINode's owner references) wait
// for it rather than read the Node from the API server before it exists.
func (w *NodeWatch) Registered() <-chan struct{} { return w.registered }

// RegisteredNode returns, once Registered is closed, the Node as the watch
// last saw it or, while the watch has not seen it yet, as the API server
// answered the registration (the created Node, with its UID); nil before.
// It makes no request. The Node is shared: callers must not modify it.
func (w *NodeWatch) RegisteredNode() *v1.Node {
	select {
	case <-w.registered:
	default:
		return nil
	}
	if node, ok := w.Node(); ok {
		return node
	}
	return w.registeredNode.Load()
}

// NodeCreated reports whether registering created the Node (false before
// Registered is closed, when the Node existed, and with registration off):
// objects owned by a Node just created cannot exist yet unless left by an
// earlier Node of the same name, so their owners may CREATE them without
// reading them first.
func (w *NodeWatch) NodeCreated() bool {
	select {
	case <-w.registered:
		return w.nodeCreated.Load()
	default:
		return false
	}
}

// noteRegistered records node as what registering answered, and whether
// registering created it, and closes Registered, once.
func (w *NodeWatch) noteRegistered(node *v1.Node, created bool) {
	w.regOnce.Do(func() {
		w.registeredNode.Store(node)
		w.nodeCreated.Store(created)
		close(w.registered)
	})
}

// Allocatable returns the node's allocatable resources as last seen; nil
// before the node is known. The list is shared: callers must not modify it.
func (w *NodeWatch) Allocatable() v1.ResourceList {
	if n, ok := w.Node(); ok {
		return n.Status.Allocatable
	}
	return nil
}

// HasSynced reports whether the watch has listed the node since Run
// started, as the kubelet's node informer gates its pod sources; always
// true for a local watch.
func (w *NodeWatch) HasSynced() bool {
	return w.informer == nil || w.informer.HasSynced()
}

// Run watches the node until ctx is done (a local watch only waits). It
// blocks and returns nil.
func (w *NodeWatch) Run(ctx context.Context) error {
	if w.informer == nil {
		<-ctx.Done()
		return nil
	}
	w.informer.RunWithContext(ctx)
	return nil
}
