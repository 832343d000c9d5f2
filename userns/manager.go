package userns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/atomicfile"
	"github.com/nodekit/nodekit/ticks"
)

const (
	// DefaultIDsPerPod is how many user and group IDs each pod's user
	// namespace maps (the kubelet's userNamespaces.idsPerPod default);
	// IDsPerPod must be a multiple of it.
	DefaultIDsPerPod = 65536
	// MappingsFile is the file in a pod's directory
	// (<root-dir>/pods/<uid>/userns) that keeps the pod's mappings, in the
	// kubelet's JSON format, so that a restarted agent, or one that takes
	// the node over from a kubelet, gives the pod the same IDs.
	MappingsFile = "userns"
	// DefaultCleanupPeriod is how often Run releases the mappings of pods
	// the agent no longer knows (the kubelet's housekeeping period).
	DefaultCleanupPeriod = 2 * time.Second
)

// Options configures a Manager. PodsDir and Handlers are required.
type Options struct {
	// PodsDir is the directory of the pods' directories
	// (<root-dir>/pods); each pod with a user namespace has its
	// MappingsFile there.
	PodsDir string
	// IDsPerPod is the number of IDs of each pod's user namespace (the
	// kubelet's userNamespaces.idsPerPod): a multiple of DefaultIDsPerPod
	// up to 2^32-1; 0 means DefaultIDsPerPod.
	IDsPerPod int64
	// MaxPods is the node's maxPods: the node's ID range must hold that
	// many pods' ranges, or New fails as the kubelet fails to start.
	MaxPods int
	// Mappings returns the first ID and the number of IDs of the range the
	// node gives out to pods, for idsPerPod IDs a pod; nil means
	// KubeletMappings (the kubelet user's subordinate IDs, or every ID from
	// idsPerPod up).
	Mappings func(ctx context.Context, idsPerPod uint32) (first, length uint32, err error)
	// Handlers returns the runtime handlers the runtime reports in its CRI
	// Status, as last heard (runtime.StatusPoller.Handlers fits); a pod
	// with hostUsers: false is refused unless its handler says it supports
	// user namespaces. Its error is ignored: the handlers last heard
	// count, and none means no support, as the kubelet's runtime state.
	Handlers func(ctx context.Context) ([]*runtimeapi.RuntimeHandler, error)
	// PodKnown reports whether the agent still knows pod uid (to run, or
	// stopping, or with containers in the runtime); Run releases the
	// mappings of the pods it does not know. nil disables that cleanup.
	PodKnown func(uid types.UID) bool
	// SourcesReady reports whether every pod source has reported
	// (pods.Store.SourcesReady); until then Run releases nothing. nil
	// means ready.
	SourcesReady func() bool
	// CleanupPeriod paces Run (default DefaultCleanupPeriod); Clock
	// drives it (default the real clock) and Align moves its rounds to the
	// node's shared ticks (package ticks; nil waits the period exactly).
	CleanupPeriod time.Duration
	Clock         clock.Clock
	Align         ticks.Align
	// intn picks a random int in [0, n): where the search for a free
	// range starts (default math/rand/v2's IntN).
	intn func(n int) int
}

// Manager gives each pod with hostUsers: false a range of host user and
// group IDs of its own, as the kubelet's user namespace manager: ranges of
// IDsPerPod IDs, picked at random among the free ones of the node's range,
// written to the pod's MappingsFile before its sandbox is created and read
// back from there (so an agent restarted, or taking over from a kubelet,
// keeps every pod's mappings), released when the pod stops or is found
// unknown. Its methods are safe for concurrent use.
type Manager struct {
	opts Options
	// perPod is the IDs of one range; first is the index of the node's
	// first range (its first ID / perPod), slots the number of ranges.
	perPod       uint32
	first, slots int

	mu     sync.Mutex
	usedBy map[types.UID]uint32 // pod → the first host ID of its range
	used   map[int]types.UID    // range index (from 0) → pod
	// allocated receives a value (one slot) when a range is recorded, for
	// Run to start its rounds again.
	allocated chan struct{}
}

// userNamespace is the MappingsFile's content, the kubelet's format.
type userNamespace struct {
	UIDMappings []idMapping `json:"uidMappings"`
	GIDMappings []idMapping `json:"gidMappings"`
}

type idMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// New returns a Manager over the node's ID range (Options.Mappings),
// checked as the kubelet checks it, with the mappings of the pods whose
// directories hold a MappingsFile recorded: a file that cannot be parsed,
// or that claims a range outside the node's or another pod's, fails New, as
// it fails the kubelet's start. It writes nothing.
func New(ctx context.Context, opts Options) (*Manager, error) {
	if opts.PodsDir == "" {
		return nil, errors.New("user namespaces: the pods directory is required")
	}
	if opts.Handlers == nil {
		return nil, errors.New("user namespaces: the runtime handlers func is required")
	}
	if opts.IDsPerPod == 0 {
		opts.IDsPerPod = DefaultIDsPerPod
	}
	if err := ValidateIDsPerPod(opts.IDsPerPod); err != nil {
		return nil, err
	}
	if opts.Mappings == nil {
		opts.Mappings = KubeletMappings
	}
	if opts.CleanupPeriod <= 0 {
		opts.CleanupPeriod = DefaultCleanupPeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.intn == nil {
		opts.intn = rand.IntN
	}
	perPod := uint32(opts.IDsPerPod)
	firstID, length, err := opts.Mappings(ctx, perPod)
	if err != nil {
		return nil, fmt.Errorf("kubelet mappings: %w", err)
	}
	switch {
	case firstID%perPod != 0:
		return nil, fmt.Errorf("kubelet user assigned ID %v is not a multiple of %v", firstID, perPod)
	case firstID < perPod:
		// ID 0 is never mapped: that would circumvent the isolation.
		return nil, fmt.Errorf("kubelet user assigned ID %v must be greater or equal to %v", firstID, perPod)
	case length%perPod != 0:
		return nil, fmt.Errorf("kubelet user assigned IDs length %v is not a multiple of %v", length, perPod)
	case length/perPod < uint32(max(opts.MaxPods, 0)):
		return nil, fmt.Errorf("kubelet user assigned IDs are not enough to support %v pods", opts.MaxPods)
	}
	m := &Manager{
		opts:      opts,
		perPod:    perPod,
		first:     int(firstID / perPod),
		slots:     int(length / perPod),
		usedBy:    map[types.UID]uint32{},
		used:      map[int]types.UID{},
		allocated: make(chan struct{}, 1),
	}
	klog.FromContext(ctx).V(5).Info("User namespace manager mapping", "offset", m.first, "length", m.slots, "idsPerPod", perPod)
	entries, err := os.ReadDir(opts.PodsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read pods from disk: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		uid := types.UID(e.Name())
		content, err := m.readFile(uid)
		if err != nil {
			return nil, fmt.Errorf("record pod mappings for existing pod %q: %w", uid, err)
		}
		if len(content) == 0 {
			continue
		}
		if _, err := m.parseAndRecord(uid, content); err != nil {
			return nil, fmt.Errorf("record pod mappings for existing pod %q: %w", uid, err)
		}
	}
	return m, nil
}

// ValidateIDsPerPod checks userNamespaces.idsPerPod with the kubelet's
// rules and messages.
func ValidateIDsPerPod(n int64) error {
	switch {
	case n < DefaultIDsPerPod:
		return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must not be less than %d", DefaultIDsPerPod)
	case n%DefaultIDsPerPod != 0:
		return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must be a multiple of %d", DefaultIDsPerPod)
	case n > (1<<32)-1:
		return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must not be more than %d", int64((1<<32)-1))
	}
	return nil
}

// PodUserNamespace returns the user namespace of pod's sandbox and
// containers on runtime handler handler ("" for the default), as the
// kubelet's GetOrCreateUserNamespaceMappings: the node's (mode NODE) unless
// the pod sets hostUsers: false; then one of its own (mode POD) mapping
// container IDs 0 to IDsPerPod-1 to the pod's host range, read from its
// MappingsFile, or allocated and written there first. A handler that does
// not support user namespaces (or a runtime that reports no handlers, as
// containerd 1.6) fails it with the kubelet's message, as does a node whose
// range is exhausted.
func (m *Manager) PodUserNamespace(ctx context.Context, pod *v1.Pod, handler string) (*runtimeapi.UserNamespace, error) {
	if pod == nil || pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
	}
	if ok, err := m.handlerSupports(ctx, handler); err != nil || !ok {
		msg := "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
		if handler != "" {
			msg = fmt.Sprintf("can't set `spec.hostUsers: false`, RuntimeClass handler %q does not support user namespaces", handler)
		}
		if err != nil {
			return nil, fmt.Errorf("%v: %w", msg, err)
		}
		return nil, errors.New(msg)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	content, err := m.readFile(pod.UID)
	if err != nil {
		return nil, err
	}
	var ns userNamespace
	if len(content) > 0 {
		if ns, err = m.parseAndRecord(pod.UID, content); err != nil {
			return nil, fmt.Errorf("user namespace: %w", err)
		}
	} else if ns, err = m.create(ctx, pod.UID); err != nil {
		return nil, fmt.Errorf("create user namespace: %w", err)
	}
	out := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}
	for _, u := range ns.UIDMappings {
		out.Uids = append(out.Uids, &runtimeapi.IDMapping{HostId: u.HostID, ContainerId: u.ContainerID, Length: u.Length})
	}
	for _, g := range ns.GIDMappings {
		out.Gids = append(out.Gids, &runtimeapi.IDMapping{HostId: g.HostID, ContainerId: g.ContainerID, Length: g.Length})
	}
	return out, nil
}

// handlerSupports reports whether runtime handler name supports user
// namespaces, as the kubelet's HandlerSupportsUserNamespaces: no handlers
// at all is no support; a handler not among them is an error.
func (m *Manager) handlerSupports(ctx context.Context, name string) (bool, error) {
	handlers, _ := m.opts.Handlers(ctx)
	if len(handlers) == 0 {
		return false, nil
	}
	for _, h := range handlers {
		if h.GetName() == name {
			return h.GetFeatures().GetUserNamespaces(), nil
		}
	}
	return false, fmt.Errorf("the handler %q is not known", name)
}

// Release frees pod uid's range and removes its MappingsFile, once its
// containers are stopped, as the kubelet does when a pod terminates. A pod
// without a range is a no-op.
func (m *Manager) Release(ctx context.Context, uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked(ctx, uid)
}

// Allocated returns the first host ID of pod uid's range, and whether it
// has one.
func (m *Manager) Allocated(uid types.UID) (uint32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	first, ok := m.usedBy[uid]
	return first, ok
}

// CleanupOrphans releases the range of every pod Options.PodKnown does not
// know (it stopped while the agent was down, or its directory was cleaned
// up as an orphan's), as the kubelet's housekeeping. Without PodKnown it
// does nothing.
func (m *Manager) CleanupOrphans(ctx context.Context) {
	if m.opts.PodKnown == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.usedBy {
		if !m.opts.PodKnown(uid) {
			klog.FromContext(ctx).V(5).Info("Clean up orphaned pod user namespace allocation", "podUID", uid)
			m.releaseLocked(ctx, uid)
		}
	}
}

// Run calls CleanupOrphans every CleanupPeriod once the pod sources are
// ready, until ctx is done; it returns nil then. After a round that left
// no range allocated there is nothing to release: Run waits for the next
// allocation without waking, then goes on from the tick after it (the
// kubelet's housekeeping, of which this is part, looks every 2 s whatever
// it holds; nothing it does on a node without user namespaces shows).
// Without PodKnown there are no orphans to find: Run returns nil at once.
func (m *Manager) Run(ctx context.Context) error {
	if m.opts.PodKnown == nil {
		return nil
	}
	t := m.opts.Clock.NewTimer(m.opts.Align.Wait(m.opts.CleanupPeriod))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if m.opts.SourcesReady == nil || m.opts.SourcesReady() {
			m.CleanupOrphans(ctx)
		}
		if !m.waitAllocated(ctx) {
			return nil
		}
		t.Reset(m.opts.Align.Wait(m.opts.CleanupPeriod))
	}
}

// waitAllocated returns true once any range is allocated (at once if one
// is), false if ctx is done first.
func (m *Manager) waitAllocated(ctx context.Context) bool {
	for {
		m.mu.Lock()
		n := len(m.usedBy)
		m.mu.Unlock()
		if n > 0 {
			return true
		}
		// A range recorded since the count is in the slot: a value from
		// before it only makes the loop count again.
		select {
		case <-ctx.Done():
			return false
		case <-m.allocated:
		}
	}
}

func (m *Manager) podDir(uid types.UID) string { return filepath.Join(m.opts.PodsDir, string(uid)) }

// readFile returns pod uid's MappingsFile, empty when it has none.
func (m *Manager) readFile(uid types.UID) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(m.podDir(uid), MappingsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// writeFile writes pod uid's MappingsFile atomically and durably (the pod
// directory synced after the rename), creating the directory if needed.
func (m *Manager) writeFile(uid types.UID, ns userNamespace) error {
	data, err := json.Marshal(ns)
	if err != nil {
		return err
	}
	dir := m.podDir(uid)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, MappingsFile), data); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// parseAndRecord checks a MappingsFile's content as the kubelet does (one
// mapping, the same for users and groups, from container ID 0) and
// records its range for pod uid. m.mu is held (or m is being built).
func (m *Manager) parseAndRecord(uid types.UID, content []byte) (userNamespace, error) {
	var ns userNamespace
	if err := json.Unmarshal(content, &ns); err != nil {
		return ns, fmt.Errorf("invalid user namespace mappings file: %w", err)
	}
	switch {
	case len(ns.UIDMappings) != 1:
		return ns, errors.New("invalid user namespace configuration: no more than one mapping allowed.")
	case len(ns.UIDMappings) != len(ns.GIDMappings):
		return ns, errors.New("invalid user namespace configuration: GID and UID mappings should be identical.")
	case ns.UIDMappings[0] != ns.GIDMappings[0]:
		return ns, errors.New("invalid user namespace configuration: GID and UID mapping should be identical")
	case ns.UIDMappings[0].ContainerID != 0:
		return ns, errors.New("invalid user namespace configuration: UID 0 must be mapped")
	}
	return ns, m.record(uid, ns.UIDMappings[0].HostID, ns.UIDMappings[0].Length)
}

// record gives pod uid the range starting at host ID from.
func (m *Manager) record(uid types.UID, from, length uint32) error {
	if length != m.perPod {
		return fmt.Errorf("wrong user namespace length %v", length)
	}
	if from%m.perPod != 0 {
		return fmt.Errorf("wrong user namespace offset specified %v", from)
	}
	prev, found := m.usedBy[uid]
	if found {
		if prev != from {
			return fmt.Errorf("different user namespace range already used by pod %q", uid)
		}
		return nil
	}
	index := int(from/m.perPod) - m.first
	if index < 0 || index >= m.slots {
		return fmt.Errorf("id %v is out of range", from)
	}
	if _, taken := m.used[index]; taken {
		return fmt.Errorf("range picked for pod %q already taken", uid)
	}
	m.assignLocked(index, uid, from)
	return nil
}

// create allocates a free range for pod uid and writes its MappingsFile;
// a failed write frees the range again. m.mu is held.
func (m *Manager) create(ctx context.Context, uid types.UID) (userNamespace, error) {
	if len(m.used) >= m.slots {
		return userNamespace{}, errors.New("could not find an empty slot to allocate a user namespace")
	}
	start := m.opts.intn(m.slots)
	index := -1
	for i := range m.slots {
		if _, taken := m.used[(start+i)%m.slots]; !taken {
			index = (start + i) % m.slots
			break
		}
	}
	from := uint32(index+m.first) * m.perPod
	m.assignLocked(index, uid, from)
	klog.FromContext(ctx).V(5).Info("New pod user namespace allocation", "podUID", uid, "hostID", from)
	mapping := []idMapping{{HostID: from, ContainerID: 0, Length: m.perPod}}
	ns := userNamespace{UIDMappings: mapping, GIDMappings: mapping}
	if err := m.writeFile(uid, ns); err != nil {
		m.releaseLocked(ctx, uid)
		return userNamespace{}, err
	}
	return ns, nil
}

// assignLocked gives pod uid the range at index, starting at host ID
// from, and tells Run that a range is allocated. m.mu is held (or m is
// being built).
func (m *Manager) assignLocked(index int, uid types.UID, from uint32) {
	m.used[index] = uid
	m.usedBy[uid] = from
	select {
	case m.allocated <- struct{}{}:
	default:
	}
}

// releaseLocked frees pod uid's range and removes its MappingsFile.
func (m *Manager) releaseLocked(ctx context.Context, uid types.UID) {
	from, ok := m.usedBy[uid]
	if !ok {
		return
	}
	klog.FromContext(ctx).V(5).Info("Releasing pod user namespace allocation", "podUID", uid)
	delete(m.usedBy, uid)
	delete(m.used, int(from/m.perPod)-m.first)
	_ = os.Remove(filepath.Join(m.podDir(uid), MappingsFile))
}
