package status

import (
	"context"
	"errors"

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
// selector metadata.name). Its methods are safe for concurrent use.
type NodeWatch struct {
	name     string
	informer cache.SharedIndexInformer
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
	return &NodeWatch{name: name, informer: informer}, nil
}

// Node returns the Node as last seen, and false until the watch has seen it
// (before Run, or before the node is registered). The Node is shared with
// the watch's cache: callers must not modify it.
func (w *NodeWatch) Node() (*v1.Node, bool) {
	obj, ok, err := w.informer.GetStore().GetByKey(w.name)
	if err != nil || !ok {
		return nil, false
	}
	node, ok := obj.(*v1.Node)
	return node, ok
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
// started, as the kubelet's node informer gates its pod sources.
func (w *NodeWatch) HasSynced() bool { return w.informer.HasSynced() }

// Run watches the node until ctx is done. It blocks and returns nil.
func (w *NodeWatch) Run(ctx context.Context) error {
	w.informer.RunWithContext(ctx)
	return nil
}
