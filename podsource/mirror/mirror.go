package mirror

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/podsource"
)

// ErrNodeUnknown is returned (wrapped) when a mirror pod cannot be created
// because the node is not known yet: it is not registered, or its informer
// has not synced. The caller syncs the static pod again once the node is
// known.
var ErrNodeUnknown = errors.New("the node is not known yet")

// Options configures a Client.
type Options struct {
	// Client creates and deletes the mirror pods; required. Through the
	// Node authorizer and NodeRestriction, a node may only create mirror
	// pods bound to itself and owned by its Node.
	Client kubernetes.Interface
	// NodeName is the node; required.
	NodeName string
	// Node returns the Node as last seen and whether it is known; required
	// (status.Reporter's Node is one). Its UID goes into the owner
	// reference; a node being deleted gets no new mirror pods. It must not
	// block.
	Node func() (*v1.Node, bool)
}

// Client creates and deletes the mirror pods of static pods: their copies
// in the API, through which the cluster sees them (the kubelet's
// MirrorClient). It keeps no state and is safe for concurrent use.
type Client struct {
	client   kubernetes.Interface
	nodeName string
	node     func() (*v1.Node, bool)
}

// New validates opts and returns a Client. It makes no API calls.
func New(opts Options) (*Client, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("podsource/mirror: Options.Client is required")
	case opts.NodeName == "":
		return nil, errors.New("podsource/mirror: Options.NodeName is required")
	case opts.Node == nil:
		return nil, errors.New("podsource/mirror: Options.Node is required")
	}
	return &Client{client: opts.Client, nodeName: opts.NodeName, node: opts.Node}, nil
}

// NodeKnown reports whether the node is known (registered and seen), so
// Create can make mirror pods; before, Create returns ErrNodeUnknown. It
// does not block.
func (c *Client) NodeKnown() bool {
	_, ok := c.node()
	return ok
}

// Create creates the mirror pod of staticPod: a copy (without UID,
// resourceVersion and managed fields) with the kubernetes.io/config.mirror
// annotation set to the static pod's kubernetes.io/config.hash, and one
// owner reference to the Node (apiVersion v1, kind Node, its name and UID,
// controller true, no blockOwnerDeletion), as NodeRestriction requires. A
// mirror pod of the same name and hash that already exists is success. It
// returns an error wrapping ErrNodeUnknown while the node is not known, and
// creates nothing (returning nil) when the node is being deleted, as the
// kubelet. staticPod is not modified.
func (c *Client) Create(ctx context.Context, staticPod *v1.Pod) error {
	logger := klog.FromContext(ctx)
	node, ok := c.node()
	switch {
	case !ok:
		return fmt.Errorf("create mirror pod %s: %w", klog.KObj(staticPod), ErrNodeUnknown)
	case node.DeletionTimestamp != nil:
		logger.Info("Not creating a mirror pod, the node is being deleted", "pod", klog.KObj(staticPod), "node", c.nodeName)
		return nil
	case node.UID == "":
		return fmt.Errorf("create mirror pod %s: node %s has no UID", klog.KObj(staticPod), c.nodeName)
	}
	hash := staticPod.Annotations[podsource.ConfigHashAnnotationKey]
	mirror := staticPod.DeepCopy()
	mirror.UID = ""
	mirror.ResourceVersion = ""
	mirror.ManagedFields = nil
	mirror.Annotations = make(map[string]string, len(staticPod.Annotations)+1)
	for k, v := range staticPod.Annotations {
		mirror.Annotations[k] = v
	}
	mirror.Annotations[podsource.ConfigMirrorAnnotationKey] = hash
	controller := true
	mirror.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: v1.SchemeGroupVersion.String(),
		Kind:       "Node",
		Name:       c.nodeName,
		UID:        node.UID,
		Controller: &controller,
	}}

	pods := c.client.CoreV1().Pods(mirror.Namespace)
	logger.V(2).Info("Creating a mirror pod for static pod", "pod", klog.KObj(staticPod), "podUID", staticPod.UID)
	_, err := pods.Create(ctx, mirror, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, getErr := pods.Get(ctx, mirror.Name, metav1.GetOptions{})
		if getErr == nil && podsource.IsMirrorPod(existing) && existing.Annotations[podsource.ConfigMirrorAnnotationKey] == hash {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("create mirror pod %s: %w", klog.KObj(staticPod), err)
	}
	return nil
}

// Delete deletes the mirror pod namespace/name at once (grace period 0),
// only if its UID is uid (a precondition; uid "" deletes whatever pod has
// the name, as the kubelet's orphan cleanup does). It returns whether that
// pod is gone: true when deleted or not found, false with a nil error when
// another pod (another UID) has the name now.
func (c *Client) Delete(ctx context.Context, namespace, name string, uid types.UID) (bool, error) {
	klog.FromContext(ctx).V(2).Info("Deleting a mirror pod", "pod", klog.KRef(namespace, name), "podUID", uid)
	opts := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	if uid != "" {
		opts.Preconditions = metav1.NewUIDPreconditions(string(uid))
	}
	err := c.client.CoreV1().Pods(namespace).Delete(ctx, name, opts)
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsConflict(err):
		// The UID precondition failed: the name belongs to another pod.
		return false, nil
	default:
		return false, fmt.Errorf("delete mirror pod %s: %w", klog.KRef(namespace, name), err)
	}
}

// Action is what Decide finds a static pod's mirror pod needs.
type Action int

const (
	// None: the mirror pod is current, the pod is not static, or it is
	// terminating.
	None Action = iota
	// Create: the static pod has no mirror pod.
	Create
	// Recreate: the mirror pod is of another version of the static pod
	// (its hash differs) or is being deleted: delete it, then create it.
	Recreate
)

// String names the action.
func (a Action) String() string {
	switch a {
	case None:
		return "None"
	case Create:
		return "Create"
	case Recreate:
		return "Recreate"
	default:
		return fmt.Sprintf("Action(%d)", int(a))
	}
}

// Decide says what staticPod's mirror pod needs, given mirrorPod, the
// mirror pod the sources show under its name (nil when none;
// podsource.Config's MirrorPodFor), and whether the pod is terminating (its
// containers are being stopped or stopped for good: then its mirror pod is
// left alone, and deleted by the orphan cleanup once the static pod is
// gone), as the kubelet's SyncPod does.
func Decide(staticPod, mirrorPod *v1.Pod, terminating bool) Action {
	switch {
	case !podsource.IsStaticPod(staticPod), terminating:
		return None
	case mirrorPod == nil:
		return Create
	case mirrorPod.DeletionTimestamp != nil, !podsource.IsMirrorPodOf(mirrorPod, staticPod):
		return Recreate
	default:
		return None
	}
}

// Sync brings staticPod's mirror pod in line (Decide, then Delete and
// Create as needed); the pod loop calls it on every sync of a pod that is
// not terminating, as the kubelet's SyncPod does, and for every static pod
// of an OpMirror update. A mirror pod whose name another pod (another UID)
// took meanwhile is left alone. Errors are the Create and Delete errors.
func (c *Client) Sync(ctx context.Context, staticPod, mirrorPod *v1.Pod, terminating bool) error {
	switch Decide(staticPod, mirrorPod, terminating) {
	case Create:
		return c.Create(ctx, staticPod)
	case Recreate:
		klog.FromContext(ctx).Info("Replacing the mirror pod of a static pod", "pod", klog.KObj(staticPod),
			"mirrorPodUID", mirrorPod.UID, "deleting", mirrorPod.DeletionTimestamp != nil)
		gone, err := c.Delete(ctx, mirrorPod.Namespace, mirrorPod.Name, mirrorPod.UID)
		if err != nil || !gone {
			return err
		}
		return c.Create(ctx, staticPod)
	default:
		return nil
	}
}

// DeleteOrphans deletes the mirror pods whose static pod is gone
// (podsource.Config's OrphanedMirrorPods), except those terminating
// reports true for: their static pod is still stopping, and its status
// goes to the mirror pod until it stopped. Each is deleted with its UID as
// precondition (the kubelet deletes by name alone). It returns the
// deletion errors joined; the housekeeping calls it every period.
func (c *Client) DeleteOrphans(ctx context.Context, orphans []*v1.Pod, terminating func(mirrorPod *v1.Pod) bool) error {
	var errs []error
	for _, m := range orphans {
		if terminating != nil && terminating(m) {
			continue
		}
		if _, err := c.Delete(ctx, m.Namespace, m.Name, m.UID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
