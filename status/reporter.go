package status

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/ticks"
)

// Defaults of the reporter, as the kubelet's.
const (
	// defaultUpdateFrequency is nodeStatusUpdateFrequency: how often the
	// status is computed.
	defaultUpdateFrequency = 10 * time.Second
	// defaultReportFrequency is nodeStatusReportFrequency: how often the
	// status is patched when nothing changed.
	defaultReportFrequency = 5 * time.Minute
	// updateRetries is the kubelet's nodeStatusUpdateRetry.
	updateRetries = 5
	// fastReadyInterval is how often the status is re-evaluated at startup,
	// without calling the API, until the node turns Ready.
	fastReadyInterval = 100 * time.Millisecond
	// fastReadyTimeout ends the fast startup loop (the kubelet's
	// nodeReadyGracePeriod).
	fastReadyTimeout = 120 * time.Second
	// startupHoldFirstWait is the first wait of a restarted agent's
	// startup hold (see Reporter.loop); it doubles up to fastReadyInterval.
	startupHoldFirstWait = 10 * time.Millisecond
)

// Options configures a Reporter.
type Options struct {
	// Client talks to the API server as the node for its status (the
	// GET and PATCH of each cycle). The kubelet uses its heartbeat client
	// here: short timeouts, no rate limit. nil makes a
	// standalone Reporter, for a node without an API server: it registers
	// nothing and patches nothing, but computes the Node (labels, taints and
	// every setter's status) at start and every UpdateFrequency and keeps it
	// in its local NodeWatch, where admission and the rest of the agent read
	// it, as the kubelet computes its node when it runs without an API
	// server.
	Client kubernetes.Interface
	// RegisterClient registers the Node: its CREATE and, when a Node of
	// the name exists, the GET and status PATCH that reconcile it. The
	// kubelet registers with its main client (rate limited, no request
	// timeout), not the heartbeat client: an API server that queues
	// requests (API Priority and Fairness) holds a request without a
	// timeout up to its default queue wait (a quarter of its
	// --request-timeout, 15 s) before answering 429, but one sent with the
	// heartbeat's 10-s timeout only 2.5 s, and the retry then waits out
	// the 429's Retry-After. Default Client; set only with Client.
	RegisterClient kubernetes.Interface
	// Node is the watch of the node the Reporter reads it from (try 0 of
	// every update, as the kubelet's informer). nil makes the Reporter watch
	// the node itself, through Client, from Run; when Client has a request
	// timeout (the agent's heartbeat client does) give a NodeWatch on a
	// client without one, or every watch is cut off after the timeout.
	// Without a Client it must be a local watch (NewLocalNodeWatch), or nil
	// for one of the Reporter's own.
	Node *NodeWatch
	// NodeName is the Node's name; required.
	NodeName string
	// Hostname is the kubernetes.io/hostname label; default NodeName.
	Hostname string

	// Labels are added at registration (kubelet --node-labels); they win
	// over the default labels.
	Labels map[string]string
	// Taints are set at registration (kubelet --register-with-taints).
	Taints []v1.Taint
	// Unschedulable registers the node cordoned, with the
	// node.kubernetes.io/unschedulable:NoSchedule taint.
	Unschedulable bool
	// ProviderID is set as the Node's spec.providerID at registration
	// (kubelet providerID, --provider-id).
	ProviderID string
	// ExternalCloudProvider registers the node with the
	// node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule
	// taint, which the external cloud controller manager removes once it
	// initialized the node (kubelet --cloud-provider=external).
	ExternalCloudProvider bool
	// NoRegister leaves creating the Node to someone else (kubelet
	// registerNode: false): Run waits for the Node to exist, then keeps
	// its status as usual.
	NoRegister bool

	// UpdateFrequency is how often the status is computed; default 10s.
	UpdateFrequency time.Duration
	// ReportFrequency is how often the status is patched when nothing
	// changed; default 5m. As in the kubelet, the first forced report after a
	// change comes after ReportFrequency ± 50% so that nodes spread out.
	ReportFrequency time.Duration

	// Setters compute the status, in Order (see OrderedSetter for
	// replacement by Name). Typically DefaultSetters plus the embedder's.
	Setters []OrderedSetter

	// Clock drives every timer and timestamp; default clock.RealClock{}.
	Clock clock.Clock
	// Align moves the regular status cycles (UpdateFrequency) to the
	// node's shared ticks (package ticks; nil waits UpdateFrequency
	// exactly). The startup's fast cycles keep their own waits.
	Align ticks.Align
	// Registerer receives the nodekit_node_status_* metrics (see the
	// package documentation); nil registers none.
	Registerer prometheus.Registerer
	// OnRepeatedFailure is called after every failed retry of a status
	// update (from the second try on), e.g. to close the client's
	// connections as the kubelet does. It runs on the reporter's goroutine
	// and must not block.
	OnRepeatedFailure func()
}

// Reporter registers the Node and keeps its status up to date, as the
// kubelet's node status loop does.
type Reporter struct {
	opts       Options
	setters    []OrderedSetter
	clock      clock.Clock
	metrics    *metrics
	registered chan struct{}
	regOnce    sync.Once
	started    atomic.Bool
	// jitter returns a float in [0, 1) for the report delay.
	jitter func() float64
	// waits counts the times the loop went back to waiting for its timers,
	// so that tests can tell when a round is over.
	waits atomic.Int64
	// kick asks Run for a status cycle now (SyncNow).
	kick chan struct{}

	// node watches the node; ownWatch says the Reporter made it and runs
	// it.
	node     *NodeWatch
	ownWatch bool
	// initial is the Node last computed to register it (NodeAnyWay).
	initial atomic.Pointer[v1.Node]

	// The fields below belong to Run's goroutine.
	lastReport    time.Time
	reportDelay   time.Duration
	lastPatched   *v1.Node // the API's answer to the last patch
	patchedFromRV string   // resourceVersion of the node that patch was computed from
	// readAPI makes every try read the Node from the API, not the watch:
	// set when the watch failed (seenWatchErrors behind NodeWatch's count)
	// or a cycle failed, cleared once the watch shows apiRV, the
	// resourceVersion the API last answered. Otherwise, after an API
	// server outage, the cycles would compare the setters with the Node
	// from before it (Ready) and not see that the node lifecycle
	// controller marked it Unknown meanwhile, until the watch re-lists.
	readAPI         bool
	apiRV           string
	seenWatchErrors int64
}

// New validates opts, applies defaults and returns a Reporter. It does not
// contact the API server.
func New(opts Options) (*Reporter, error) {
	if opts.NodeName == "" {
		return nil, errors.New("node status reporter: NodeName is required")
	}
	if errs := validation.IsDNS1123Subdomain(opts.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("node status reporter: node name %q: %v", opts.NodeName, errs)
	}
	if opts.Hostname == "" {
		opts.Hostname = opts.NodeName
	}
	if errs := validation.IsValidLabelValue(opts.Hostname); len(errs) > 0 {
		return nil, fmt.Errorf("node status reporter: hostname %q is not a valid label value: %v", opts.Hostname, errs)
	}
	for k, v := range opts.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("node status reporter: node label key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("node status reporter: node label %s=%q: %v", k, v, errs)
		}
	}
	for _, t := range opts.Taints {
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			return nil, fmt.Errorf("node status reporter: taint key %q: %v", t.Key, errs)
		}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("node status reporter: taint %s has unknown effect %q", t.Key, t.Effect)
		}
	}
	if opts.UpdateFrequency < 0 || opts.ReportFrequency < 0 {
		return nil, fmt.Errorf("node status reporter: frequencies must not be negative (update %v, report %v)", opts.UpdateFrequency, opts.ReportFrequency)
	}
	if opts.UpdateFrequency == 0 {
		opts.UpdateFrequency = defaultUpdateFrequency
	}
	if opts.ReportFrequency == 0 {
		opts.ReportFrequency = defaultReportFrequency
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.RegisterClient == nil {
		opts.RegisterClient = opts.Client
	} else if opts.Client == nil {
		return nil, errors.New("node status reporter: a RegisterClient needs a Client")
	}
	setters, err := resolveSetters(opts.Setters)
	if err != nil {
		return nil, fmt.Errorf("node status reporter: %w", err)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("node status reporter: %w", err)
	}
	r := &Reporter{
		opts:       opts,
		setters:    setters,
		clock:      opts.Clock,
		metrics:    m,
		registered: make(chan struct{}),
		jitter:     rand.Float64,
		kick:       make(chan struct{}, 1),
	}
	switch r.node = opts.Node; {
	case r.node == nil && opts.Client == nil:
		if r.node, err = NewLocalNodeWatch(opts.NodeName); err != nil {
			return nil, fmt.Errorf("node status reporter: %w", err)
		}
	case r.node == nil:
		if r.node, err = NewNodeWatch(opts.Client, opts.NodeName); err != nil {
			return nil, fmt.Errorf("node status reporter: %w", err)
		}
		r.ownWatch = true
	case opts.Client == nil && !r.node.Local():
		return nil, errors.New("node status reporter: without a Client, Node must be a local watch (NewLocalNodeWatch)")
	case opts.Client != nil && r.node.Local():
		return nil, errors.New("node status reporter: a local Node watch needs a standalone Reporter (no Client)")
	}
	return r, nil
}

// Node returns the Node as the Reporter's watch last saw it (see
// NodeWatch.Node).
func (r *Reporter) Node() (*v1.Node, bool) { return r.node.Node() }

// NodeAnyWay returns the Node as the Reporter's watch last saw it or,
// while the watch does not have it (not registered yet, the API server
// unreachable, or deleted), the Node as the Reporter last computed it to
// register it: labels, taints and every setter's status, without a UID.
// It is the kubelet's getNodeAnyWay, the node its admission checks pods
// against, so static pods run before the node is registered. false only
// before Run computed the Node the first time. It does not block; the Node
// is shared and read-only.
func (r *Reporter) NodeAnyWay() (*v1.Node, bool) {
	if node, ok := r.node.Node(); ok {
		return node, true
	}
	node := r.initial.Load()
	return node, node != nil
}

// HasSynced reports whether the Reporter's node watch has listed the node
// (see NodeWatch.HasSynced).
func (r *Reporter) HasSynced() bool { return r.node.HasSynced() }

// Registered returns a channel that is closed once the Node exists (created
// or found by this Reporter; for a standalone Reporter, once it computed the
// Node). It is safe for concurrent use.
func (r *Reporter) Registered() <-chan struct{} { return r.registered }

// SyncNow asks Run for a status cycle at once rather than at the next
// UpdateFrequency tick, as the kubelet's graceful node shutdown does so that
// the Node turns NotReady without delay. It does not block; requests made
// while one is pending are one cycle. Before the Node is registered it
// only makes the first cycle after registration come sooner. Safe for
// concurrent use.
func (r *Reporter) SyncNow() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run registers the Node, then computes its status every UpdateFrequency
// and patches it when it changed or ReportFrequency elapsed, until ctx is
// done. At startup it also re-evaluates the status every 100 ms,
// without calling the API, and patches as soon as the node turns Ready.
// Run blocks; it returns nil when ctx is done and an error only if called
// twice. A standalone Reporter (no Client) only computes the Node into its
// local watch, at once and every UpdateFrequency.
func (r *Reporter) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return fmt.Errorf("node status reporter for node %s: Run called twice", r.opts.NodeName)
	}
	if r.opts.Client == nil {
		r.runLocal(ctx)
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	if r.ownWatch {
		wg.Go(func() { _ = r.node.Run(ctx) })
	}

	if r.opts.NoRegister {
		if !r.waitForNode(ctx) {
			return nil
		}
	} else if err := r.register(ctx); err != nil {
		return nil // ctx is done
	}
	// No wait for the watch's first list: until it has listed, the
	// Reporter reads the API server's last answers (cachedNode), as the
	// kubelet's first status update does not wait for its informer.
	r.loop(ctx)
	return nil
}

// waitForNode waits, with registerNode false, until the node watch has the
// Node someone else created; false once ctx is done.
func (r *Reporter) waitForNode(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	r.initial.Store(r.initialNode(ctx))
	logger.Info("registerNode is false: waiting for the Node to be created", "node", klog.KRef("", r.opts.NodeName))
	if !cache.WaitForCacheSync(ctx.Done(), r.node.HasSynced) {
		return false
	}
	// The watch's cache is read, no request is made: a short period costs
	// nothing.
	var node *v1.Node
	err := wait.PollUntilContextCancel(ctx, nodeAppearPoll, true, func(context.Context) (bool, error) {
		n, ok := r.node.Node()
		node = n
		return ok, nil
	})
	if err != nil {
		return false
	}
	r.markRegistered(node, false)
	return true
}

// nodeAppearPoll is how often the node watch is read for a Node someone
// else creates (registerNode false).
const nodeAppearPoll = 200 * time.Millisecond

// runLocal is Run of a standalone Reporter: the Node is computed, never
// sent.
func (r *Reporter) runLocal(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("No API server: the node is not registered and its status is kept locally", "node", klog.KRef("", r.opts.NodeName))
	node := r.initialNode(ctx)
	r.initial.Store(node)
	r.setLocal(ctx, node)
	r.markRegistered(node, false)
	t := r.clock.NewTimer(r.opts.Align.Wait(r.opts.UpdateFrequency))
	defer t.Stop()
	for {
		r.waits.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			r.localCycle(ctx)
			t.Reset(r.opts.Align.Wait(r.opts.UpdateFrequency))
		case <-r.kick:
			r.localCycle(ctx)
		}
	}
}

// localCycle is one status cycle of a standalone Reporter.
func (r *Reporter) localCycle(ctx context.Context) {
	if current, ok := r.node.Node(); ok {
		node, _ := r.updateNode(ctx, current)
		r.setLocal(ctx, node)
	}
}

func (r *Reporter) setLocal(ctx context.Context, node *v1.Node) {
	if err := r.node.SetLocal(node); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot keep the node's status")
	}
}

// markRegistered records node, the Node as the API server (or, standalone,
// the setters) last answered at registration, and whether registering
// created it, in the watch and closes Registered.
func (r *Reporter) markRegistered(node *v1.Node, created bool) {
	r.node.noteRegistered(node, created)
	r.regOnce.Do(func() { close(r.registered) })
}

// loop runs the status cycles and the fast startup loop.
//
// A Node the API already shows Ready is one whose agent restarted: its
// first cycle is held back until the setters say Ready too, so that checks
// that have not answered yet since the start (the runtime's first status,
// the PLEG's first relist) never flip a running node NotReady, as the
// kubelet asks the runtime once before its first status update. The
// setters are evaluated without calling the API at once, then after 10 ms,
// the wait doubling up to fastReadyInterval, so that the node's heartbeat
// follows within milliseconds of its checks passing. The hold ends at the
// first regular cycle (UpdateFrequency) whatever the setters say.
func (r *Reporter) loop(ctx context.Context) {
	start := r.clock.Now()
	holding := r.apiShowsReady()
	holdWait := fastReadyInterval
	switch {
	case !holding:
		r.syncStatus(ctx)
	case r.wouldBeReady(ctx):
		holding = false
		r.syncStatus(ctx)
	default:
		holdWait = startupHoldFirstWait
	}
	regular := r.clock.NewTimer(r.opts.Align.Wait(r.opts.UpdateFrequency))
	defer regular.Stop()
	fast := r.clock.NewTimer(holdWait)
	defer fast.Stop()
	fastC := fast.C()
	for {
		r.waits.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-regular.C():
			holding = false
			r.syncStatus(ctx)
			regular.Reset(r.opts.Align.Wait(r.opts.UpdateFrequency))
		case <-r.kick:
			holding = false
			r.syncStatus(ctx)
		case <-fastC:
			switch {
			case holding && r.wouldBeReady(ctx):
				holding = false
				klog.FromContext(ctx).V(2).Info("Node is ready after the restart", "node", klog.KRef("", r.opts.NodeName), "after", r.clock.Since(start))
				r.syncStatus(ctx)
				fastC = nil
			case holding:
				holdWait = min(2*holdWait, fastReadyInterval)
				fast.Reset(holdWait)
			case r.fastReady(ctx, start):
				fastC = nil
			default:
				fast.Reset(fastReadyInterval)
			}
		}
	}
}

// apiShowsReady reports whether the Node as last seen is Ready.
func (r *Reporter) apiShowsReady() bool {
	node := r.cachedNode()
	if node == nil {
		return false
	}
	ready := findCondition(node, v1.NodeReady)
	return ready != nil && ready.Status == v1.ConditionTrue
}

// wouldBeReady evaluates the setters without effects (no events, no API
// call) and reports whether they make the Node Ready.
func (r *Reporter) wouldBeReady(ctx context.Context) bool {
	node := r.cachedNode()
	if node == nil {
		return false
	}
	trial, _ := r.updateNode(withDryRun(ctx), node)
	ready := findCondition(trial, v1.NodeReady)
	return ready != nil && ready.Status == v1.ConditionTrue
}

// syncStatus is one status cycle: up to updateRetries tries.
func (r *Reporter) syncStatus(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if n := r.node.WatchErrors(); n != r.seenWatchErrors {
		r.seenWatchErrors, r.readAPI, r.apiRV = n, true, ""
	} else if r.readAPI && r.apiRV != "" {
		if node, ok := r.node.Node(); ok && node.ResourceVersion == r.apiRV {
			r.readAPI = false // the watch has caught up
		}
	}
	for try := range updateRetries {
		patched, err := r.tryUpdate(ctx, try)
		if err == nil {
			if patched {
				r.metrics.cycles.WithLabelValues(cyclePatched).Inc()
			} else {
				r.metrics.cycles.WithLabelValues(cycleUnchanged).Inc()
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if try > 0 && r.opts.OnRepeatedFailure != nil {
			r.opts.OnRepeatedFailure()
		}
		logger.Error(err, "Error updating node status, will retry", "node", klog.KRef("", r.opts.NodeName), "try", try)
	}
	r.metrics.cycles.WithLabelValues(cycleFailed).Inc()
	r.readAPI, r.apiRV = true, ""
	logger.Error(nil, "Unable to update node status: retries exhausted", "node", klog.KRef("", r.opts.NodeName), "retries", updateRetries)
}

// tryUpdate reads the Node (try 0 from the informer unless readAPI, later
// tries from the API), runs the setters and patches when the status changed
// or the report period elapsed. It reports whether it patched.
func (r *Reporter) tryUpdate(ctx context.Context, try int) (bool, error) {
	fromCache := try == 0 && !r.readAPI
	original, err := r.readNode(ctx, fromCache)
	if err != nil {
		return false, err
	}
	if !fromCache {
		r.apiRV = original.ResourceVersion
	}
	node, changed := r.updateNode(ctx, original)
	due := r.clock.Since(r.lastReport) >= r.opts.ReportFrequency+r.reportDelay
	if !changed && !due {
		return false, nil
	}
	reason := patchReasonReport
	if changed || r.lastReport.IsZero() {
		// Spread the next forced report of many nodes, as the kubelet does.
		r.reportDelay = time.Duration(float64(r.opts.ReportFrequency) * (r.jitter() - 0.5))
	} else {
		r.reportDelay = 0
	}
	if changed {
		reason = patchReasonChanged
	}
	return true, r.patch(ctx, original, node, reason)
}

// readNode returns the Node as last seen. fromCache reads the informer's
// copy, unless it has not yet seen this reporter's last patch (then the
// patch's answer is newer) or does not have the Node yet (then, before the
// first patch, registering's answer, else it GETs).
// The returned Node is shared: do not modify it.
func (r *Reporter) readNode(ctx context.Context, fromCache bool) (*v1.Node, error) {
	if fromCache {
		if node := r.cachedNode(); node != nil {
			return node, nil
		}
		// The first cycle right after registering, before the watch
		// delivered the Node: registering's answer is the Node the
		// GET would return.
		if node := r.node.registeredNode.Load(); node != nil && r.lastPatched == nil {
			return node, nil
		}
	}
	node, err := r.opts.Client.CoreV1().Nodes().Get(ctx, r.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", r.opts.NodeName, err)
	}
	return node, nil
}

// cachedNode is the Node as the informer has it, or the answer to the last
// patch when the informer has not caught up with it yet; before the
// informer's first list, the last patch's or registering's answer; nil when
// the informer has listed and does not have the Node. The returned Node is
// shared.
func (r *Reporter) cachedNode() *v1.Node {
	node, ok := r.node.Node()
	if !ok {
		if r.node.HasSynced() {
			return nil
		}
		// The watch has not listed yet (an API server slow to answer
		// its first list delays it by seconds): the newest Node the API
		// server answered, the last patch's or registering's.
		if r.lastPatched != nil {
			return r.lastPatched
		}
		return r.node.registeredNode.Load()
	}
	if r.lastPatched != nil && r.patchedFromRV != "" && node.ResourceVersion == r.patchedFromRV {
		return r.lastPatched
	}
	return node
}

// updateNode returns a copy of original with the os/arch labels the kubelet
// enforces and every setter applied, and whether it differs from original
// in anything but heartbeat times.
func (r *Reporter) updateNode(ctx context.Context, original *v1.Node) (*v1.Node, bool) {
	node := original.DeepCopy()
	if node.Labels[v1.LabelOSStable] != goruntime.GOOS || node.Labels[v1.LabelArchStable] != goruntime.GOARCH {
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[v1.LabelOSStable] = goruntime.GOOS
		node.Labels[v1.LabelArchStable] = goruntime.GOARCH
	}
	r.runSetters(ctx, node)
	return node, nodeChanged(original, node)
}

// runSetters applies every setter in order, logging their errors.
func (r *Reporter) runSetters(ctx context.Context, node *v1.Node) {
	logger := klog.FromContext(ctx)
	for _, s := range r.setters {
		if err := s.Set(ctx, node); err != nil {
			if IsDryRun(ctx) {
				logger.V(4).Info("Setter failed during a trial evaluation", "node", klog.KObj(node), "setter", s.Name, "err", err)
				continue
			}
			logger.Error(err, "Failed to set some node status fields", "node", klog.KObj(node), "setter", s.Name)
		}
	}
}

// patch sends the status patch of a cycle and records the report.
func (r *Reporter) patch(ctx context.Context, original, node *v1.Node, reason string) error {
	updated, err := r.sendPatch(ctx, r.opts.Client, original, node, reason)
	if err != nil {
		return err
	}
	r.lastReport = r.clock.Now()
	r.lastPatched = updated
	r.patchedFromRV = original.ResourceVersion
	if r.readAPI {
		r.apiRV = updated.ResourceVersion
	}
	return nil
}

// sendPatch PATCHes the status subresource through client with the
// difference from original to node and returns the API's answer.
func (r *Reporter) sendPatch(ctx context.Context, client kubernetes.Interface, original, node *v1.Node, reason string) (*v1.Node, error) {
	data, err := statusPatch(original, node)
	if err != nil {
		return nil, err
	}
	r.metrics.patches.WithLabelValues(reason).Inc()
	r.metrics.patchBytes.WithLabelValues(reason).Add(float64(len(data)))
	updated, err := client.CoreV1().Nodes().Patch(ctx, r.opts.NodeName, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	if err != nil {
		r.metrics.patchErrors.Inc()
		return nil, fmt.Errorf("patch status of node %s: %w", r.opts.NodeName, err)
	}
	klog.FromContext(ctx).V(4).Info("Patched node status", "node", klog.KObj(updated), "reason", reason, "bytes", len(data))
	return updated, nil
}

// fastReady is one round of the fast startup loop. It reports whether the
// loop is over: the node is Ready, it was just patched Ready, or
// fastReadyTimeout passed. It calls the API only to patch.
func (r *Reporter) fastReady(ctx context.Context, start time.Time) bool {
	logger := klog.FromContext(ctx)
	if r.clock.Since(start) >= fastReadyTimeout {
		logger.Info("Node did not become ready in time after startup; status updates continue at the normal period", "node", klog.KRef("", r.opts.NodeName), "timeout", fastReadyTimeout)
		return true
	}
	original := r.cachedNode()
	if original == nil {
		return false
	}
	if ready := findCondition(original, v1.NodeReady); ready != nil && ready.Status == v1.ConditionTrue {
		return true
	}
	trial, changed := r.updateNode(withDryRun(ctx), original)
	if ready := findCondition(trial, v1.NodeReady); !changed || ready == nil || ready.Status != v1.ConditionTrue {
		return false
	}
	// The node turns Ready now: evaluate for real (events) and patch.
	logger.Info("Fast updating node status as it just became ready", "node", klog.KObj(original))
	node, _ := r.updateNode(ctx, original)
	if err := r.patch(ctx, original, node, patchReasonReady); err != nil {
		logger.Error(err, "Error updating node status, will retry with a full status update", "node", klog.KObj(original))
		r.syncStatus(ctx)
	}
	return true
}
