package status

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Labels and annotations the reporter puts on the Node at registration.
const (
	// labelOSBeta and labelArchBeta are the deprecated aliases of
	// kubernetes.io/os and kubernetes.io/arch the kubelet still sets.
	labelOSBeta   = "beta.kubernetes.io/os"
	labelArchBeta = "beta.kubernetes.io/arch"
	// annotationControllerManagedAttachDetach tells the attach/detach
	// controller to attach volumes for this node (always "true": nodekit
	// does not attach volumes itself).
	annotationControllerManagedAttachDetach = "volumes.kubernetes.io/controller-managed-attach-detach"
	// taintExternalCloudProvider is the taint a node registered with an
	// external cloud provider carries until the cloud controller manager
	// initialized it (k8s.io/cloud-provider's TaintExternalCloudProvider).
	taintExternalCloudProvider = "node.cloudprovider.kubernetes.io/uninitialized"
)

// defaultLabels are the labels the kubelet owns and reconciles on an
// existing Node.
var defaultLabels = []string{
	v1.LabelHostname, v1.LabelTopologyZone, v1.LabelTopologyRegion,
	v1.LabelFailureDomainBetaZone, v1.LabelFailureDomainBetaRegion,
	v1.LabelInstanceTypeStable, v1.LabelInstanceType,
	v1.LabelOSStable, v1.LabelArchStable, v1.LabelWindowsBuild,
	labelOSBeta, labelArchBeta,
}

const (
	registerBackoffInitial = 100 * time.Millisecond
	registerBackoffMax     = 7 * time.Second
)

// register creates the Node, retrying with back-off (100 ms doubling to 7 s)
// until it succeeds or ctx is done.
func (r *Reporter) register(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	step := registerBackoffInitial
	for {
		node := r.initialNode(ctx)
		r.initial.Store(node)
		logger.Info("Attempting to register node", "node", klog.KObj(node))
		if err := r.tryRegister(ctx, node); err == nil {
			logger.Info("Successfully registered node", "node", klog.KObj(node))
			return nil
		} else if ctx.Err() == nil {
			logger.Error(err, "Unable to register node with API server, will retry", "node", klog.KObj(node), "backoff", step)
		}
		t := r.clock.NewTimer(step)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
		step = min(step*2, registerBackoffMax)
	}
}

// initialNode is the Node the reporter creates: default and configured
// labels, taints, the attach/detach annotation, and the status every setter
// computes.
func (r *Reporter) initialNode(ctx context.Context) *v1.Node {
	logger := klog.FromContext(ctx)
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.opts.NodeName,
			Labels: map[string]string{
				v1.LabelHostname:   r.opts.Hostname,
				v1.LabelOSStable:   goruntime.GOOS,
				v1.LabelArchStable: goruntime.GOARCH,
				labelOSBeta:        goruntime.GOOS,
				labelArchBeta:      goruntime.GOARCH,
			},
			Annotations: map[string]string{annotationControllerManagedAttachDetach: "true"},
		},
		Spec: v1.NodeSpec{Unschedulable: r.opts.Unschedulable},
	}
	for k, v := range r.opts.Labels {
		if old, ok := node.Labels[k]; ok && old != v {
			logger.Info("Node label overrides the default", "node", klog.KObj(node), "labelKey", k, "labelValue", v, "default", old)
		}
		node.Labels[k] = v
	}
	taints := append([]v1.Taint(nil), r.opts.Taints...)
	if r.opts.Unschedulable && !hasTaint(taints, v1.TaintNodeUnschedulable, v1.TaintEffectNoSchedule) {
		taints = append(taints, v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule})
	}
	if r.opts.ExternalCloudProvider {
		taints = append(taints, v1.Taint{Key: taintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule})
	}
	if len(taints) > 0 {
		node.Spec.Taints = taints
	}
	node.Spec.ProviderID = r.opts.ProviderID
	r.runSetters(ctx, node)
	return node
}

func hasTaint(taints []v1.Taint, key string, effect v1.TaintEffect) bool {
	for _, t := range taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

// tryRegister creates node; when a Node of that name exists (or creating is
// forbidden but the Node may exist) it reconciles what the kubelet owns on it.
func (r *Reporter) tryRegister(ctx context.Context, node *v1.Node) error {
	nodes := r.opts.RegisterClient.CoreV1().Nodes()
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		r.markRegistered(created, true)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("create node %s: %w", node.Name, err)
	}
	// The node watch usually has the Node by now (it starts with the
	// reporter): a restarted agent saves the GET the kubelet makes here.
	existing, getErr := r.existingNode(ctx)
	if getErr != nil {
		return fmt.Errorf("create node %s: %w; get the existing node: %w", node.Name, err, getErr)
	}
	klog.FromContext(ctx).Info("Node was previously registered", "node", klog.KObj(node))
	reconciled := existing.DeepCopy()
	if reconcileExisting(node, reconciled) {
		patched, err := r.sendPatch(ctx, r.opts.RegisterClient, existing, reconciled, patchReasonRegister)
		if err != nil {
			return fmt.Errorf("reconcile existing node %s: %w", node.Name, err)
		}
		existing = patched
	}
	r.markRegistered(existing, false)
	return nil
}

// existingNode returns the Node as the watch has it, or from the API when
// the watch has not listed it yet. The returned Node is shared.
func (r *Reporter) existingNode(ctx context.Context) (*v1.Node, error) {
	if node, ok := r.node.Node(); ok {
		return node, nil
	}
	return r.opts.RegisterClient.CoreV1().Nodes().Get(ctx, r.opts.NodeName, metav1.GetOptions{})
}

// reconcileExisting brings what the kubelet owns on an existing Node in line
// with the initial one: the attach/detach annotation, the default labels,
// missing capacity and allocatable, and huge page sizes. It reports whether
// existing changed.
func reconcileExisting(initial, existing *v1.Node) bool {
	changed := false
	if want := initial.Annotations[annotationControllerManagedAttachDetach]; existing.Annotations[annotationControllerManagedAttachDetach] != want {
		if existing.Annotations == nil {
			existing.Annotations = map[string]string{}
		}
		existing.Annotations[annotationControllerManagedAttachDetach] = want
		changed = true
	}
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for _, k := range defaultLabels {
		want, ok := initial.Labels[k]
		if !ok {
			continue
		}
		if existing.Labels[k] != want {
			existing.Labels[k] = want
			changed = true
		}
		if existing.Labels[k] == "" {
			delete(existing.Labels, k)
		}
	}
	if existing.Status.Capacity == nil && initial.Status.Capacity != nil {
		existing.Status.Capacity = initial.Status.Capacity.DeepCopy()
		changed = true
	}
	if existing.Status.Allocatable == nil && initial.Status.Allocatable != nil {
		existing.Status.Allocatable = initial.Status.Allocatable.DeepCopy()
		changed = true
	}
	if existing.Status.Capacity == nil {
		existing.Status.Capacity = v1.ResourceList{}
	}
	if existing.Status.Allocatable == nil {
		existing.Status.Allocatable = v1.ResourceList{}
	}
	isHugePages := func(name v1.ResourceName) bool {
		return strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
	}
	for name, c := range initial.Status.Capacity {
		if !isHugePages(name) {
			continue
		}
		if have, ok := existing.Status.Capacity[name]; !ok || have.Cmp(c) != 0 {
			existing.Status.Capacity[name] = c.DeepCopy()
			changed = true
		}
		a := initial.Status.Allocatable[name]
		if have, ok := existing.Status.Allocatable[name]; !ok || have.Cmp(a) != 0 {
			existing.Status.Allocatable[name] = a.DeepCopy()
			changed = true
		}
	}
	for name := range existing.Status.Capacity {
		if _, ok := initial.Status.Capacity[name]; isHugePages(name) && !ok {
			delete(existing.Status.Capacity, name)
			delete(existing.Status.Allocatable, name)
			changed = true
		}
	}
	return changed
}
