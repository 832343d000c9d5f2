package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/ticks"
)

// Defaults applied by New to zero Options fields. They are the kubelet's.
const (
	// DefaultNamespace is the namespace node leases live in.
	DefaultNamespace = corev1.NamespaceNodeLease
	// DefaultLeaseDurationSeconds is the kubelet's nodeLeaseDurationSeconds.
	DefaultLeaseDurationSeconds int32 = 40
	// DefaultRenewIntervalFraction is the kubelet's
	// nodeLeaseRenewIntervalFraction: the lease is renewed every
	// LeaseDurationSeconds × fraction (10 s with the defaults).
	DefaultRenewIntervalFraction = 0.25
)

const (
	// renewJitter is the JitterUntil factor the kubelet renews with: each
	// wait is the renew interval plus up to 4% of it.
	renewJitter = 0.04
	// maxUpdateRetries is how many UPDATEs one renew cycle tries before it
	// gives up until the next interval.
	maxUpdateRetries = 5
	// initialBackoff and maxBackoff bound the sleep between attempts to get
	// or create the lease.
	initialBackoff = 100 * time.Millisecond
	maxBackoff     = 7 * time.Second
)

// Options configures a Controller. The zero value of every optional field
// selects the kubelet's default.
type Options struct {
	// Client talks to the API server; required. The kubelet uses a separate
	// heartbeat client (short timeout, its own connections) for the lease.
	Client kubernetes.Interface
	// NodeName names the Lease and its owner Node; required, a DNS subdomain.
	NodeName string
	// HolderIdentity is written to spec.holderIdentity; default NodeName.
	HolderIdentity string
	// LeaseDurationSeconds is written to spec.leaseDurationSeconds; default
	// 40. Must not be negative.
	LeaseDurationSeconds int32
	// RenewIntervalFraction sets the renew interval as a fraction of the
	// lease duration; default 0.25. Must be in (0, 1).
	RenewIntervalFraction float64
	// Namespace holds the Lease; default "kube-node-lease".
	Namespace string
	// Clock drives renew intervals, back-off sleeps and renewTime; default
	// clock.RealClock{}.
	Clock clock.Clock
	// Align, when set, names the shared ticks (package ticks) the
	// renewals move onto without leaving the kubelet's timing: a renewal
	// comes a renew interval plus up to 4 % after the last renewTime, on
	// a tick when one falls in that band, else at the band's end, so that
	// the renewals reach the ticks' phase within 25 of them (about four
	// minutes) and stay on it. Nil waits a random jitter, as the kubelet.
	// Back-off sleeps are not moved.
	Align ticks.Align
	// OnRepeatedFailure, when set, is called from the Run goroutine each
	// time a renew attempt fails after the first failed retry within one
	// cycle (the kubelet closes its heartbeat client's connections there).
	// Conflicts and a missing lease do not count: the API server answered.
	// It must not block for long.
	OnRepeatedFailure func()
	// Registerer receives the controller's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Registration, when set, tells the controller when the Node is
	// registered and gives it the Node: the Lease's owner reference is
	// then taken from it, and while the Node is not registered the
	// controller waits for it instead of reading the Node from the API
	// server (the kubelet GETs the Node for every Lease it creates).
	// status.NodeWatch is one when a status.Reporter runs with it. Nil
	// reads the Node from the API server.
	Registration NodeRegistration
}

// NodeRegistration reports the registration of the Node whose Lease the
// controller keeps (status.NodeWatch implements it).
type NodeRegistration interface {
	// Registered is closed once the Node is registered.
	Registered() <-chan struct{}
	// RegisteredNode returns the Node once it is registered, nil before;
	// it makes no request.
	RegisteredNode() *corev1.Node
}

// Controller keeps the node's Lease in the kube-node-lease namespace
// renewed, the heartbeat the node lifecycle controller watches. Create it
// with New and drive it with Run; only one Run may be active at a time, and
// a Controller may be run again after Run returned.
type Controller struct {
	leases         coordclient.LeaseInterface
	nodes          nodeGetter
	nodeName       string
	namespace      string
	holderIdentity string
	durationSecs   int32
	renewInterval  time.Duration
	clock          clock.Clock
	align          ticks.Align
	onRepeated     func()
	metrics        *metrics
	registration   NodeRegistration

	running atomic.Bool
	// latest is the lease as last written or read; only the Run goroutine
	// touches it.
	latest *coordinationv1.Lease
}

// nodeGetter is the part of the Nodes client the controller uses.
type nodeGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
}

// New validates opts, applies defaults and registers the metrics when
// opts.Registerer is set. It makes no API calls.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil {
		return nil, errors.New("lease: Options.Client is required")
	}
	if opts.NodeName == "" {
		return nil, errors.New("lease: Options.NodeName is required")
	}
	if errs := validation.IsDNS1123Subdomain(opts.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("lease: invalid node name %q: %v", opts.NodeName, errs)
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if errs := validation.IsDNS1123Label(opts.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("lease: invalid namespace %q: %v", opts.Namespace, errs)
	}
	if opts.HolderIdentity == "" {
		opts.HolderIdentity = opts.NodeName
	}
	switch {
	case opts.LeaseDurationSeconds < 0:
		return nil, fmt.Errorf("lease: LeaseDurationSeconds %d must not be negative", opts.LeaseDurationSeconds)
	case opts.LeaseDurationSeconds == 0:
		opts.LeaseDurationSeconds = DefaultLeaseDurationSeconds
	}
	switch f := opts.RenewIntervalFraction; {
	case f == 0:
		opts.RenewIntervalFraction = DefaultRenewIntervalFraction
	case math.IsNaN(f) || f <= 0 || f >= 1:
		return nil, fmt.Errorf("lease: RenewIntervalFraction %v must be in (0, 1)", f)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	interval := time.Duration(float64(time.Duration(opts.LeaseDurationSeconds)*time.Second) * opts.RenewIntervalFraction)
	if interval <= 0 {
		return nil, fmt.Errorf("lease: renew interval %ds × %v rounds to zero", opts.LeaseDurationSeconds, opts.RenewIntervalFraction)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Controller{
		leases:         opts.Client.CoordinationV1().Leases(opts.Namespace),
		nodes:          opts.Client.CoreV1().Nodes(),
		nodeName:       opts.NodeName,
		namespace:      opts.Namespace,
		holderIdentity: opts.HolderIdentity,
		durationSecs:   opts.LeaseDurationSeconds,
		renewInterval:  interval,
		clock:          opts.Clock,
		align:          opts.Align,
		onRepeated:     opts.OnRepeatedFailure,
		metrics:        m,
		registration:   opts.Registration,
	}, nil
}

// Run renews the lease right away and then every renew interval
// (LeaseDurationSeconds × RenewIntervalFraction) plus up to 4% jitter, measured from the end of the previous renewal, until ctx is
// done. It blocks, returns nil once ctx is done (a pending back-off or
// interval wait wakes at once; an API request in flight is cancelled via
// ctx), and never gives up on API errors: it logs them and retries.
// Run returns an error without doing anything if the Controller is already
// running.
func (c *Controller) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("lease %s/%s: controller is already running", c.namespace, c.nodeName)
	}
	defer c.running.Store(false)
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(c.namespace, c.nodeName))
	ctx = klog.NewContext(ctx, logger)
	logger.V(2).Info("Starting node lease controller", "renewInterval", c.renewInterval, "leaseDurationSeconds", c.durationSecs)
	for ctx.Err() == nil {
		c.sync(ctx)
		if !c.sleep(ctx, c.renewWait()) {
			break
		}
	}
	logger.V(2).Info("Stopped node lease controller")
	return nil
}

// renewWait is the wait before the next renewal. The kubelet waits the
// renew interval plus a random jitter of up to renewJitter of it. With
// c.align, the jitter is the one that puts the next renewTime on a tick,
// if a tick falls in [last + interval, last + interval × (1 +
// renewJitter)) of the renewTime last written, else the band's end: the
// renewals drift later against the ticks by up to 0.4 s (with the
// defaults) each until they reach one, then stay on them, every renew
// interval. The band counts from the last renewTime, so that the
// renewals on the ticks are a renew interval apart exactly; the kubelet's
// wait starts when its request is answered, a few milliseconds later.
// When the last renewTime is a Step old or more (a cycle that failed or
// retried long), the wait is the kubelet's.
func (c *Controller) renewWait() time.Duration {
	if c.align == nil || c.latest == nil || c.latest.Spec.RenewTime == nil {
		return wait.Jitter(c.renewInterval, renewJitter)
	}
	took := c.clock.Since(c.latest.Spec.RenewTime.Time)
	if took < 0 || took >= ticks.Step {
		return wait.Jitter(c.renewInterval, renewJitter)
	}
	lo := c.renewInterval - took
	hi := lo + time.Duration(float64(c.renewInterval)*renewJitter)
	if w := c.align(hi); w >= lo && w < hi {
		return w
	}
	return hi
}

// sync runs one renew cycle: an optimistic UPDATE from the latest known
// lease, falling back to GET/CREATE with back-off and fresh UPDATEs.
func (c *Controller) sync(ctx context.Context) {
	logger := klog.FromContext(ctx)
	start := c.clock.Now()
	if c.latest != nil {
		err := c.updateWithRetries(ctx, c.latest)
		if err == nil {
			c.metrics.cycleDone(c.clock.Since(start))
			return
		}
		if ctx.Err() != nil {
			return
		}
		logger.Info("Failed to renew lease from the latest known version, falling back to reading it", "err", err)
	}
	lease, created := c.ensureWithBackoff(ctx)
	if lease == nil {
		return // ctx is done
	}
	c.latest = lease
	if !created {
		if err := c.updateWithRetries(ctx, lease); err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Failed to renew lease, will retry", "interval", c.renewInterval)
			}
			return
		}
	}
	c.metrics.cycleDone(c.clock.Since(start))
}

// updateWithRetries writes a renewed copy of base, up to maxUpdateRetries
// times. A conflict re-reads the lease (with back-off) before the next try;
// a missing lease ends the attempts at once so that the caller re-creates
// it. On success c.latest holds the written lease.
func (c *Controller) updateWithRetries(ctx context.Context, base *coordinationv1.Lease) error {
	var lastErr error
	for i := range maxUpdateRetries {
		if err := ctx.Err(); err != nil {
			return err
		}
		updated, err := c.leases.Update(ctx, c.renewed(ctx, base), metav1.UpdateOptions{})
		if err == nil {
			c.latest = updated
			c.metrics.renewed(c.clock.Now())
			return nil
		}
		c.metrics.failed(opUpdate)
		lastErr = err
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("renew lease %s/%s: %w", c.namespace, c.nodeName, err)
		case apierrors.IsConflict(err):
			klog.FromContext(ctx).V(2).Info("Lease changed since it was read, reading it again", "err", err)
			fresh, created := c.ensureWithBackoff(ctx)
			if fresh == nil {
				return ctx.Err()
			}
			if created {
				c.latest = fresh
				return nil
			}
			base = fresh
			continue
		}
		klog.FromContext(ctx).Error(err, "Failed to renew lease", "attempt", i+1)
		if i > 0 && c.onRepeated != nil {
			c.onRepeated()
		}
	}
	return fmt.Errorf("renew lease %s/%s: %d attempts failed, last: %w", c.namespace, c.nodeName, maxUpdateRetries, lastErr)
}

// ensureWithBackoff reads the lease, creating it when it does not exist,
// and retries with exponential back-off until it succeeds or ctx is done
// (then it returns nil). created reports whether this call created it.
func (c *Controller) ensureWithBackoff(ctx context.Context) (lease *coordinationv1.Lease, created bool) {
	delay := initialBackoff
	// missing is true when the last attempt found no lease and waited
	// for the Node's registration: the next one creates it at once.
	missing := false
	for {
		lease, created, err := c.ensure(ctx, missing)
		missing = false
		if err == nil {
			return lease, created
		}
		if ctx.Err() != nil {
			return nil, false
		}
		if errors.Is(err, errNodeNotRegistered) {
			// The agent registers the Node while the lease starts: not
			// a failure, the lease waits for its owner.
			if c.registration != nil {
				klog.FromContext(ctx).V(2).Info("Waiting for the node to be registered before creating its lease")
				select {
				case <-ctx.Done():
					return nil, false
				case <-c.registration.Registered():
				}
				missing = true
				continue
			}
			klog.FromContext(ctx).Info("Waiting for the node to be registered before creating its lease", "err", err, "retryAfter", delay)
		} else {
			klog.FromContext(ctx).Error(err, "Failed to ensure lease exists, will retry", "retryAfter", delay)
		}
		if !c.sleep(ctx, delay) {
			return nil, false
		}
		delay = min(2*delay, maxBackoff)
	}
}

// ensure makes one attempt to read the lease or, if it does not exist, to
// create it with the owner reference to the Node. missing says that the
// lease was just found missing: ensure creates it without reading it
// first, and reads it when the CREATE is answered AlreadyExists.
func (c *Controller) ensure(ctx context.Context, missing bool) (*coordinationv1.Lease, bool, error) {
	if !missing {
		lease, err := c.leases.Get(ctx, c.nodeName, metav1.GetOptions{})
		if err == nil {
			return lease, false, nil
		}
		if !apierrors.IsNotFound(err) {
			c.metrics.failed(opGet)
			return nil, false, fmt.Errorf("get lease %s/%s: %w", c.namespace, c.nodeName, err)
		}
	}
	owner, err := c.nodeOwner(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("create lease %s/%s: %w", c.namespace, c.nodeName, err)
	}
	desired := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:            c.nodeName,
			Namespace:       c.namespace,
			OwnerReferences: []metav1.OwnerReference{owner},
		},
	}
	c.assertSpec(desired)
	lease, err := c.leases.Create(ctx, desired, metav1.CreateOptions{})
	if missing && apierrors.IsAlreadyExists(err) {
		return c.ensure(ctx, false)
	}
	if err != nil {
		c.metrics.failed(opCreate)
		return nil, false, fmt.Errorf("create lease %s/%s: %w", c.namespace, c.nodeName, err)
	}
	c.metrics.renewed(c.clock.Now())
	klog.FromContext(ctx).V(2).Info("Created lease")
	return lease, true, nil
}

// renewed returns a copy of base with the desired spec and, when base has
// no owner references and the Node can be read, the owner reference. A
// Node that cannot be read is logged and never blocks the renewal.
func (c *Controller) renewed(ctx context.Context, base *coordinationv1.Lease) *coordinationv1.Lease {
	lease := base.DeepCopy()
	c.assertSpec(lease)
	if len(lease.OwnerReferences) == 0 {
		if owner, err := c.nodeOwner(ctx); err == nil {
			lease.OwnerReferences = []metav1.OwnerReference{owner}
		} else {
			klog.FromContext(ctx).Info("Renewing lease without an owner reference", "err", err)
		}
	}
	return lease
}

// assertSpec sets the holder, the duration and renewTime = now.
func (c *Controller) assertSpec(lease *coordinationv1.Lease) {
	if h := lease.Spec.HolderIdentity; h == nil || *h != c.holderIdentity {
		lease.Spec.HolderIdentity = ptr.To(c.holderIdentity)
	}
	if d := lease.Spec.LeaseDurationSeconds; d == nil || *d != c.durationSecs {
		lease.Spec.LeaseDurationSeconds = ptr.To(c.durationSecs)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: c.clock.Now()}
}

// errNodeNotRegistered marks nodeOwner's error when the Node does not
// exist (yet).
var errNodeNotRegistered = errors.New("the node is not registered yet")

// nodeOwner builds the lease's owner reference, so that deleting the Node
// garbage-collects its lease, from the registered Node when the controller
// has a Registration, else from the Node read from the API server.
func (c *Controller) nodeOwner(ctx context.Context) (metav1.OwnerReference, error) {
	if c.registration != nil {
		node := c.registration.RegisteredNode()
		if node == nil {
			return metav1.OwnerReference{}, errNodeNotRegistered
		}
		return ownerOf(node), nil
	}
	node, err := c.nodes.Get(ctx, c.nodeName, metav1.GetOptions{})
	if err != nil {
		c.metrics.failed(opGetNode)
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("%w: %w", errNodeNotRegistered, err)
		}
		return metav1.OwnerReference{}, fmt.Errorf("get node %s for the lease owner reference: %w", c.nodeName, err)
	}
	return ownerOf(node), nil
}

// ownerOf is the owner reference to node.
func ownerOf(node *corev1.Node) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: corev1.SchemeGroupVersion.Version,
		Kind:       "Node",
		Name:       node.Name,
		UID:        node.UID,
	}
}

// sleep waits d on the controller's clock. It returns false, at once, when
// ctx is done first.
func (c *Controller) sleep(ctx context.Context, d time.Duration) bool {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
