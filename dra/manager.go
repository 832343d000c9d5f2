package dra

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/ticks"
)

// Defaults of Options, the kubelet's.
const (
	// DefaultReconcilePeriod is how often claims of pods that are no
	// longer active are unprepared.
	DefaultReconcilePeriod = 60 * time.Second
	// DefaultWipingDelay is how long a driver may have no connected
	// plugin before its ResourceSlices of the node are deleted.
	DefaultWipingDelay = 30 * time.Second
	// DefaultClientCallTimeout bounds each call to a plugin that did not
	// register with a timeout of its own.
	DefaultClientCallTimeout = 45 * time.Second
)

// FailedPrepareDynamicResources is the reason of the Warning event the
// kubelet records on a pod whose claims could not be prepared (the message
// is "Failed to prepare dynamic resources: " and PrepareResources' error).
const FailedPrepareDynamicResources = "FailedPrepareDynamicResources"

// Options configures a Manager.
type Options struct {
	// Client reads the pods' ResourceClaims and deletes the node's
	// ResourceSlices of drivers that went away. nil (a standalone node):
	// a pod with claims cannot be prepared and no slice is deleted.
	Client kubernetes.Interface
	// NodeName selects the node's ResourceSlices.
	NodeName string
	// StateDir is the directory of the claim checkpoint (CheckpointFile):
	// the kubelet's root directory. Required.
	StateDir string
	// ActivePods lists the pods that may still use their claims;
	// SourcesReady tells when that list is complete (every pod source
	// has been handled). Claims of pods no longer active are unprepared
	// every ReconcilePeriod once SourcesReady is true. nil: no such
	// reconciliation (claims are unprepared by UnprepareResources only).
	ActivePods   func() []*v1.Pod
	SourcesReady func() bool
	// Registerer registers the kubelet's DRA metrics
	// (dra_operations_duration_seconds, dra_grpc_operations_duration_seconds,
	// dra_resource_claims_in_use, dra_node_prepare_skips_total,
	// dra_node_unprepare_skips_total); nil registers nothing.
	Registerer prometheus.Registerer
	// ReconcilePeriod, WipingDelay and ClientCallTimeout default to
	// DefaultReconcilePeriod, DefaultWipingDelay and
	// DefaultClientCallTimeout.
	ReconcilePeriod   time.Duration
	WipingDelay       time.Duration
	ClientCallTimeout time.Duration
	// Clock times ReconcilePeriod and WipingDelay; nil is the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// Align moves the reconcile rounds to the node's shared ticks
	// (package ticks; nil waits ReconcilePeriod exactly).
	Align ticks.Align
}

// claimInfo is a claim in the cache: its checkpointed state, whether it
// was prepared since the Manager started (a claim read from the
// checkpoint is prepared again when a pod's sandbox is created), and
// whether its unprepare has begun (no new pod may join it then).
type claimInfo struct {
	claimState
	prepared    bool
	unpreparing bool
}

func (c *claimInfo) hasPod(uid types.UID) bool {
	_, ok := c.PodUIDs[string(uid)]
	return ok
}

// Manager prepares the ResourceClaims of the node's pods with their DRA
// drivers' kubelet plugins, as the kubelet's DRA manager. It is the
// pluginmanager.Handler of DRAPlugin plugins. Safe for concurrent use.
type Manager struct {
	opts    Options
	path    string
	metrics *metrics
	reg     *registry
	stop    context.CancelFunc

	loadOnce sync.Once
	loadErr  error

	logMu   sync.Mutex
	baseLog logr.Logger

	// mu guards claims, by namespace/name, and unsynced: the last write
	// of the checkpoint failed, so it may not hold what claims do.
	mu       sync.RWMutex
	claims   map[string]*claimInfo
	unsynced bool

	health        healthCache
	healthUpdates chan types.UID
}

// New returns a Manager for opts, applying defaults. It does no I/O: the
// checkpoint is read by Run, or by the first call that needs it.
func New(opts Options) (*Manager, error) {
	if opts.StateDir == "" {
		return nil, errors.New("DRA manager: the state directory is required")
	}
	if opts.ReconcilePeriod <= 0 {
		opts.ReconcilePeriod = DefaultReconcilePeriod
	}
	if opts.WipingDelay <= 0 {
		opts.WipingDelay = DefaultWipingDelay
	}
	if opts.ClientCallTimeout <= 0 {
		opts.ClientCallTimeout = DefaultClientCallTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	m := &Manager{opts: opts, path: filepath.Join(opts.StateDir, CheckpointFile), claims: map[string]*claimInfo{}, baseLog: klog.Background(),
		health: healthCache{path: filepath.Join(opts.StateDir, HealthCheckpointFile)}, healthUpdates: make(chan types.UID, healthUpdatesBuffer)}
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.reg = &registry{ctx: ctx, m: m, plugins: map[string][]*plugin{}, wipes: map[string]clock.Timer{}}
	m.metrics = newMetrics(m, opts.Registerer)
	return m, nil
}

// logger returns ctx's logger, or the one Run was given.
func (m *Manager) logger(ctx context.Context) logr.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l.WithName("dra-manager")
	}
	m.logMu.Lock()
	defer m.logMu.Unlock()
	return m.baseLog.WithName("dra-manager")
}

// load reads the checkpoints once: the devices' health (a health
// checkpoint that cannot be read is logged, and the health starts empty,
// as the kubelet's) and the claims.
func (m *Manager) load() error {
	m.loadOnce.Do(func() {
		if err := m.health.load(); err != nil {
			m.logger(context.Background()).Error(err, "Failed to load health checkpoint, proceeding with empty cache")
		}
		states, err := readCheckpoint(m.path)
		if err != nil {
			m.loadErr = fmt.Errorf("DRA manager: read the claim checkpoint %s (drain the node and remove it): %w", m.path, err)
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, s := range states {
			if s.PodUIDs == nil {
				s.PodUIDs = map[string]struct{}{}
			}
			m.claims[s.Namespace+"/"+s.ClaimName] = &claimInfo{claimState: s}
		}
	})
	return m.loadErr
}

// Run reads the claim checkpoint, deletes the node's ResourceSlices (no
// driver is usable before its plugin registers again, as the kubelet does
// at start), and unprepares the claims of pods no longer active every
// ReconcilePeriod, until ctx is done; then it closes the plugins'
// connections. It fails only when the checkpoint cannot be read.
func (m *Manager) Run(ctx context.Context) error {
	m.logMu.Lock()
	m.baseLog = klog.FromContext(ctx)
	m.logMu.Unlock()
	defer m.stop()
	defer m.reg.closeAll()
	if err := m.load(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.wipeResourceSlices(ctx, "")
	}()
	t := m.opts.Clock.NewTimer(m.opts.Align.Wait(m.opts.ReconcilePeriod))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			m.reconcile(ctx)
			t.Reset(m.opts.Align.Wait(m.opts.ReconcilePeriod))
		}
	}
}

// reconcile unprepares the claims of pods that are no longer active.
func (m *Manager) reconcile(ctx context.Context) {
	if m.opts.ActivePods == nil || m.opts.SourcesReady == nil || !m.opts.SourcesReady() {
		return
	}
	active := map[string]bool{}
	for _, p := range m.opts.ActivePods() {
		active[string(p.UID)] = true
	}
	type podClaims struct {
		namespace string
		names     []string
	}
	inactive := map[types.UID]*podClaims{}
	m.mu.RLock()
	for _, c := range m.claims {
		for uid := range c.PodUIDs {
			if active[uid] {
				continue
			}
			pc := inactive[types.UID(uid)]
			if pc == nil {
				pc = &podClaims{namespace: c.Namespace}
				inactive[types.UID(uid)] = pc
			}
			pc.names = append(pc.names, c.ClaimName)
		}
	}
	m.mu.RUnlock()
	for uid, pc := range inactive {
		if err := m.unprepare(ctx, uid, pc.namespace, pc.names); err != nil {
			m.logger(ctx).Info("Unpreparing pod resources in reconcile loop failed, will retry", "podUID", uid, "err", err)
		}
	}
}

// syncLocked writes the cache to the checkpoint and records in unsynced
// whether that failed; m.mu held.
func (m *Manager) syncLocked() error {
	states := make([]claimState, 0, len(m.claims))
	for _, c := range m.claims {
		states = append(states, c.claimState)
	}
	if err := writeCheckpoint(m.path, states); err != nil {
		m.unsynced = true
		return fmt.Errorf("checkpoint ResourceClaim state: %w", err)
	}
	m.unsynced = false
	return nil
}

// claimRef is a ResourceClaim a pod uses; owned: made from a template for
// the pod, which must own it.
type claimRef struct {
	name  string
	owned bool
}

// podClaims returns the ResourceClaims pod uses: those of
// spec.resourceClaims that exist (a template's claim named in the pod's
// status) and the claim of its DRA-backed extended resources. With
// lenient, a claim whose name cannot be known (a template's claim not
// created yet) is left out instead of failing.
func podClaims(pod *v1.Pod, lenient bool) ([]claimRef, error) {
	var refs []claimRef
	for i := range pod.Spec.ResourceClaims {
		name, owned, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil && !lenient {
			return nil, err
		}
		if err == nil && name != nil {
			refs = append(refs, claimRef{name: *name, owned: owned})
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		refs = append(refs, claimRef{name: s.ResourceClaimName})
	}
	return refs, nil
}

// newClaimInfo returns the cache entry of an allocated claim, with the
// drivers of its allocation.
func newClaimInfo(claim *resourceapi.ResourceClaim) (*claimInfo, error) {
	if claim.Status.Allocation == nil {
		return nil, errors.New("not allocated")
	}
	drivers := map[string]driverState{}
	total := map[string]int{}
	skips := map[string]map[resourceapi.SkipNodeOperation]int{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		drivers[r.Driver] = driverState{}
		total[r.Driver]++
		if skips[r.Driver] == nil {
			skips[r.Driver] = map[resourceapi.SkipNodeOperation]int{}
		}
		if slices.Contains(r.SkipNodeOperations, resourceapi.SkipNodeOperationAll) {
			skips[r.Driver][resourceapi.SkipNodeOperationAll]++
			continue
		}
		for _, op := range r.SkipNodeOperations {
			skips[r.Driver][op]++
		}
	}
	// A driver all of whose results skip an operation would have it
	// skipped: that needs the DRAOptionalNodeOperations gate (alpha, off
	// in the kubelet v1.37), so the kubelet refuses the claim. Results
	// that skip only some of a driver's operations change nothing.
	for driver, ops := range skips {
		all := ops[resourceapi.SkipNodeOperationAll]
		for op, n := range ops {
			if op != resourceapi.SkipNodeOperationAll {
				n += all
			}
			if n == total[driver] {
				return nil, errors.New("DRAOptionalNodeOperations feature gate is disabled on kubelet")
			}
		}
	}
	return &claimInfo{claimState: claimState{
		ClaimUID: claim.UID, ClaimName: claim.Name, Namespace: claim.Namespace,
		PodUIDs: map[string]struct{}{}, DriverState: drivers,
	}}, nil
}

// PrepareResources prepares the ResourceClaims of pod before its sandbox
// is created, as the kubelet: each claim (spec.resourceClaims, and the
// claim of DRA-backed extended resources) is read from the API server and
// must be allocated and reserved for the pod (and owned by it when made
// from a template), and each driver of the allocation must have a
// registered plugin; only then is the pod added to the claim cache and
// checkpointed, and NodePrepareResources called once per claim not yet
// prepared, batched by driver. A claim other pods already prepared is
// shared. The CDI devices the drivers return are checkpointed with the
// claim. The error ("prepare dynamic resources: ...") is the kubelet's;
// the caller records it as a FailedPrepareDynamicResources event and
// retries.
func (m *Manager) PrepareResources(ctx context.Context, pod *v1.Pod) error {
	start := time.Now()
	err := m.prepare(ctx, pod)
	m.metrics.operation("PrepareResources", start, err)
	if err != nil {
		return fmt.Errorf("prepare dynamic resources: %w", err)
	}
	return nil
}

func (m *Manager) prepare(ctx context.Context, pod *v1.Pod) error {
	refs, err := podClaims(pod, false)
	if err != nil || len(refs) == 0 {
		return err
	}
	if err := m.load(); err != nil {
		return err
	}
	logger := m.logger(ctx).WithValues("pod", klog.KObj(pod))
	if m.opts.Client == nil {
		return fmt.Errorf("ResourceClaim %s: the node has no API server to read it from", refs[0].name)
	}
	// Validate everything before touching the cache, so that a pod that
	// fails here can be deleted without an unprepare (its driver may
	// never have been on the node).
	type item struct {
		claim   *resourceapi.ResourceClaim
		info    *claimInfo
		plugins map[string]*plugin
	}
	items := make([]item, 0, len(refs))
	for _, ref := range refs {
		name := ref.name
		claim, err := m.opts.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("fetch ResourceClaim %s: %w", name, err)
		}
		if ref.owned {
			if err := resourceclaim.IsForPod(pod, claim, false); err != nil {
				return err
			}
		}
		if !resourceclaim.IsReservedForPod(pod, claim, false) {
			return fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, name, claim.UID)
		}
		info, err := newClaimInfo(claim)
		if err != nil {
			return fmt.Errorf("ResourceClaim %s: %w", claim.Name, err)
		}
		it := item{claim: claim, info: info, plugins: map[string]*plugin{}}
		for driver := range info.DriverState {
			p, err := m.reg.get(driver)
			if err != nil {
				return err
			}
			it.plugins[driver] = p
		}
		items = append(items, it)
	}

	type batch struct {
		plugin *plugin
		claims []*drapb.Claim
	}
	batches := map[*plugin]*batch{}
	toPrepare := map[types.UID]*resourceapi.ResourceClaim{}
	m.mu.Lock()
	for _, it := range items {
		key := it.claim.Namespace + "/" + it.claim.Name
		info, ok := m.claims[key]
		if !ok {
			info = it.info
			m.claims[key] = info
		} else {
			if info.ClaimUID != it.claim.UID {
				m.mu.Unlock()
				return fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists (previous pod force-deleted?!)", it.claim.Name, info.ClaimUID)
			}
			if info.unpreparing {
				m.mu.Unlock()
				return fmt.Errorf("ResourceClaim %s is being unprepared", it.claim.Name)
			}
		}
		info.PodUIDs[string(pod.UID)] = struct{}{}
		// Checkpointed before any driver call: a pod deleted before its
		// prepare succeeded is unprepared by the reconciliation.
		if err := m.syncLocked(); err != nil {
			m.mu.Unlock()
			return err
		}
		if info.prepared {
			logger.V(5).Info("Resources already prepared", "claim", klog.KObj(it.claim))
			continue
		}
		toPrepare[info.ClaimUID] = it.claim
		c := &drapb.Claim{Namespace: info.Namespace, Uid: string(info.ClaimUID), Name: info.ClaimName}
		for driver, ds := range info.DriverState {
			if ds.skips(resourceapi.SkipNodeOperationNodePrepareResources) {
				m.metrics.prepareSkips.WithLabelValues(driver).Inc()
				continue
			}
			p := it.plugins[driver]
			b := batches[p]
			if b == nil {
				b = &batch{plugin: p}
				batches[p] = b
			}
			b.claims = append(b.claims, c)
		}
	}
	m.mu.Unlock()

	for _, b := range batches {
		resp, err := b.plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: b.claims})
		if err != nil {
			return fmt.Errorf("NodePrepareResources: %w", err)
		}
		for uid, result := range resp.Claims {
			req := lookupClaim(b.claims, uid)
			if req == nil {
				return fmt.Errorf("NodePrepareResources returned result for unknown claim UID %s", uid)
			}
			if result.GetError() != "" {
				return fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", req.Name, result.Error)
			}
			m.mu.Lock()
			info, ok := m.claims[req.Namespace+"/"+req.Name]
			if !ok {
				m.mu.Unlock()
				return fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", req.Name, req.Namespace)
			}
			// The driver's answer replaces what an earlier, partly failed
			// prepare recorded.
			ds := info.DriverState[b.plugin.driver]
			ds.Devices = nil
			for _, d := range result.GetDevices() {
				ds.Devices = append(ds.Devices, device{PoolName: d.PoolName, DeviceName: d.DeviceName,
					ShareID: (*types.UID)(d.ShareId), RequestNames: d.RequestNames, CDIDeviceIDs: d.CdiDeviceIds})
			}
			info.DriverState[b.plugin.driver] = ds
			m.mu.Unlock()
		}
		if n := len(b.claims) - len(resp.Claims); n != 0 {
			return fmt.Errorf("NodePrepareResources skipped %d ResourceClaims", n)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	for _, claim := range toPrepare {
		info, ok := m.claims[claim.Namespace+"/"+claim.Name]
		if !ok {
			return fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", claim.Name, claim.Namespace)
		}
		info.prepared = true
	}
	return m.syncLocked()
}

func lookupClaim(claims []*drapb.Claim, uid string) *drapb.Claim {
	for _, c := range claims {
		if c.Uid == uid {
			return c
		}
	}
	return nil
}

// UnprepareResources releases pod's claims once its containers have
// stopped, as the kubelet before it reports the pod's final status: the
// pod is removed from each claim (the claims are the cache's for the pod,
// else, after a checkpoint was lost, its spec's), and a claim no other pod
// uses is unprepared with NodeUnprepareResources (batched by driver), then
// dropped from the cache and the checkpoint. It may be called again for
// the same pod. The error starts "unprepare dynamic resources: ".
func (m *Manager) UnprepareResources(ctx context.Context, pod *v1.Pod) error {
	start := time.Now()
	err := m.unprepareForPod(ctx, pod)
	m.metrics.operation("UnprepareResources", start, err)
	if err != nil {
		return fmt.Errorf("unprepare dynamic resources: %w", err)
	}
	return nil
}

func (m *Manager) unprepareForPod(ctx context.Context, pod *v1.Pod) error {
	if err := m.load(); err != nil {
		return err
	}
	var names []string
	m.mu.RLock()
	for _, c := range m.claims {
		if c.hasPod(pod.UID) {
			names = append(names, c.ClaimName)
		}
	}
	m.mu.RUnlock()
	if len(names) == 0 {
		// The checkpoint may have been lost: the claims of the spec. One
		// whose name is not known (a template's claim never created) was
		// never prepared; the kubelet fails here, and the pod never
		// finishes terminating.
		refs, _ := podClaims(pod, true)
		for _, r := range refs {
			names = append(names, r.name)
		}
	}
	return m.unprepare(ctx, pod.UID, pod.Namespace, names)
}

func (m *Manager) unprepare(ctx context.Context, podUID types.UID, namespace string, names []string) error {
	batches := map[string][]*drapb.Claim{}
	done := map[string]bool{}
	left := false // the pod left a claim other pods still use
	m.mu.Lock()
	for _, name := range names {
		info, ok := m.claims[namespace+"/"+name]
		if !ok || !info.hasPod(podUID) {
			continue
		}
		if len(info.PodUIDs) > 1 {
			// Checkpointed with the unprepare's end: a restart before
			// it calls this again.
			delete(info.PodUIDs, string(podUID))
			left = true
			continue
		}
		done[name] = true
		info.unpreparing = true
		c := &drapb.Claim{Namespace: info.Namespace, Uid: string(info.ClaimUID), Name: info.ClaimName}
		for driver, ds := range info.DriverState {
			if ds.skips(resourceapi.SkipNodeOperationNodeUnprepareResources) {
				m.metrics.unprepSkips.WithLabelValues(driver).Inc()
				continue
			}
			batches[driver] = append(batches[driver], c)
		}
	}
	m.mu.Unlock()

	drivers := make([]string, 0, len(batches))
	for d := range batches {
		drivers = append(drivers, d)
	}
	slices.Sort(drivers)
	for _, driver := range drivers {
		claims := batches[driver]
		p, err := m.reg.get(driver)
		if err != nil {
			return err
		}
		resp, err := p.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
		if err != nil {
			return fmt.Errorf("NodeUnprepareResources: %w", err)
		}
		for uid, result := range resp.Claims {
			req := lookupClaim(claims, uid)
			if req == nil {
				return fmt.Errorf("NodeUnprepareResources returned result for unknown claim UID %s", uid)
			}
			if result.GetError() != "" {
				return fmt.Errorf("NodeUnprepareResources failed for ResourceClaim %s: %s", req.Name, result.Error)
			}
		}
		if n := len(claims) - len(resp.Claims); n != 0 {
			return fmt.Errorf("NodeUnprepareResources skipped %d ResourceClaims", n)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if len(done) == 0 && !left && !m.unsynced {
		// No claim of the cache lists the pod (most pods have none): the
		// checkpoint already says what rewriting it would (the kubelet
		// rewrites it for every pod that terminates).
		return nil
	}
	for name := range done {
		delete(m.claims, namespace+"/"+name)
	}
	return m.syncLocked()
}

// PodMightNeedToUnprepareResources tells whether a claim in the cache
// still lists the pod: its final status must wait for UnprepareResources.
func (m *Manager) PodMightNeedToUnprepareResources(uid types.UID) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, c := range m.claims {
		if c.hasPod(uid) {
			return true
		}
	}
	return false
}

// CDIDevices returns the CDI devices container c of pod gets from its
// prepared claims, as the kubelet's GetResources: for each claim the
// container names (all the claim's devices, or those of the named
// request), and those of the DRA-backed extended resources the container
// requests. A claim of the container that is not in the cache is an
// error (its pod was not prepared).
func (m *Manager) CDIDevices(pod *v1.Pod, c *v1.Container) ([]*runtimeapi.CDIDevice, error) {
	requests := map[string][]string{}
	var order []string
	add := func(claim string, reqs ...string) {
		if _, ok := requests[claim]; !ok {
			order = append(order, claim)
		}
		requests[claim] = append(requests[claim], reqs...)
	}
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		var reqs []string
		uses := false
		for _, cc := range c.Resources.Claims {
			if cc.Name == pc.Name {
				uses = true
				reqs = append(reqs, cc.Request)
			}
		}
		if !uses {
			continue
		}
		name, _, err := resourceclaim.Name(pod, pc)
		if err != nil {
			return nil, err
		}
		if name != nil {
			add(*name, reqs...)
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		for _, rm := range s.RequestMappings {
			if q, ok := c.Resources.Requests[v1.ResourceName(rm.ResourceName)]; ok && rm.ContainerName == c.Name && !q.IsZero() {
				add(s.ResourceClaimName, rm.RequestName)
			}
		}
	}
	if len(order) == 0 {
		return nil, nil
	}
	if err := m.load(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*runtimeapi.CDIDevice
	for _, name := range order {
		info, ok := m.claims[pod.Namespace+"/"+name]
		if !ok {
			return nil, fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", name, pod.Namespace)
		}
		for _, req := range requests[name] {
			out = append(out, info.cdiDevices(req)...)
		}
	}
	return out, nil
}

// cdiDevices returns the claim's CDI devices for request (all when empty),
// drivers in name order.
func (c *claimInfo) cdiDevices(request string) []*runtimeapi.CDIDevice {
	drivers := make([]string, 0, len(c.DriverState))
	for d := range c.DriverState {
		drivers = append(drivers, d)
	}
	slices.Sort(drivers)
	var out []*runtimeapi.CDIDevice
	for _, d := range drivers {
		for _, dev := range c.DriverState[d].Devices {
			if request == "" || len(dev.RequestNames) == 0 || slices.Contains(dev.RequestNames, request) {
				for _, id := range dev.CDIDeviceIDs {
					out = append(out, &runtimeapi.CDIDevice{Name: id})
				}
			}
		}
	}
	return out
}

// ApplyContainerConfig adds the CDI devices of container c (CDIDevices)
// to its CRI config, before those a device plugin adds, as the kubelet.
func (m *Manager) ApplyContainerConfig(_ context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	devs, err := m.CDIDevices(pod, c)
	if err != nil {
		return err
	}
	cfg.CDIDevices = append(devs, cfg.CDIDevices...)
	return nil
}

// claimsInUse counts the prepared claims by driver, and all of them under
// anyDriver.
func (m *Manager) claimsInUse() map[string]int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	counts := map[string]int{}
	total := 0
	for _, c := range m.claims {
		if !c.prepared {
			continue
		}
		total++
		for d := range c.DriverState {
			counts[d]++
		}
	}
	counts[anyDriver] = total
	return counts
}
