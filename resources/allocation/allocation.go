// Package allocation keeps the resources the node allocated to each
// admitted pod, for in-place pod resize (InPlacePodVerticalScaling, GA
// since Kubernetes 1.35), as the kubelet's allocation manager: a pod's
// spec says what its containers ask for, the allocation what the node
// agreed to give them. They differ while a resize is pending (it does not
// fit yet); the runtime actuates the allocation, never the spec.
//
// The allocations are checkpointed in <root-dir>/allocated_pods_state in
// the kubelet's format (the JSON of {data, checksum}, data the JSON of
// {"entries": {<pod UID>: {ContainerResources, PodLevelResources}}}, the
// checksum the kubelet checkpoint manager's FNV-32a of the data's spew
// dump), so an agent that replaces a kubelet on a node, or the other way
// round, keeps the resources running pods were given.
//
// Whether a resize fits is the pod controller's admission (pods.Controller
// with Options.Allocations); Manager only records and applies allocations.
package allocation

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/internal/atomicfile"
	kubeletchecksum "github.com/nodekit/nodekit/internal/checksum"
)

// CheckpointFile is the checkpoint's name in the root directory, the
// kubelet's.
const CheckpointFile = "allocated_pods_state"

// Options configures a Manager.
type Options struct {
	// RootDir is the agent's root directory (kubelet --root-dir); the
	// checkpoint is CheckpointFile in it. Empty keeps the allocations in
	// memory only.
	RootDir string
}

// podInfo is one pod's allocation, as the kubelet's state.PodResourceInfo.
type podInfo struct {
	ContainerResources map[string]v1.ResourceRequirements
	PodLevelResources  *v1.ResourceRequirements
	// EmptyDirVolumeLimits is kept for the kubelet's format; memory-backed
	// volume resize (alpha) is not done.
	EmptyDirVolumeLimits map[string]*resource.Quantity
}

type checkpointInfo struct {
	Entries map[types.UID]podInfo `json:"entries,omitempty"`
}

type checkpoint struct {
	Data     string `json:"data"`
	Checksum uint64 `json:"checksum"`
}

// Manager records the resources allocated to pods. Its methods are safe for
// concurrent use. Use New.
type Manager struct {
	path string

	mu      sync.Mutex
	entries map[types.UID]podInfo
	// encoded are entries' members in the checkpoint's JSON ("<uid>":
	// {...}), made when a write first needs them and dropped when the
	// entry changes: a burst's writes encode each pod once, not once per
	// write (see checkpointDataLocked).
	encoded map[types.UID][]byte
	loaded  bool
	// version counts the changes of entries; stored is the version the
	// checkpoint on disk holds (both under mu).
	version, stored uint64

	// storeMu is held while the checkpoint is written: a caller that
	// waited for it finds its change stored by the writer before it, if
	// that writer saw it (group commit).
	storeMu sync.Mutex
}

// New returns a Manager; it does no I/O (the checkpoint is read on first
// use, and a corrupt one is reported by every method until it is removed).
func New(opts Options) *Manager {
	m := &Manager{entries: map[types.UID]podInfo{}, encoded: map[types.UID][]byte{}}
	if opts.RootDir != "" {
		m.path = filepath.Join(opts.RootDir, CheckpointFile)
	}
	return m
}

// checksum is the kubelet checkpoint manager's checksum of data.
func checksum(data string) uint64 { return uint64(kubeletchecksum.New(data)) }

// loadLocked reads the checkpoint once. A missing file is an empty state; a
// corrupt one is an error (the kubelet refuses to start on it too), and is
// reported every time until it is removed.
func (m *Manager) loadLocked() error {
	if m.loaded || m.path == "" {
		m.loaded = true
		return nil
	}
	blob, err := os.ReadFile(m.path)
	if errors.Is(err, os.ErrNotExist) {
		m.loaded = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pod allocation checkpoint %s: %w", m.path, err)
	}
	var cp checkpoint
	if err := json.Unmarshal(blob, &cp); err != nil {
		return fmt.Errorf("parse pod allocation checkpoint %s: %w", m.path, err)
	}
	if sum := checksum(cp.Data); sum != cp.Checksum {
		return fmt.Errorf("pod allocation checkpoint %s is corrupt: checksum %d, expected %d", m.path, sum, cp.Checksum)
	}
	var info checkpointInfo
	if err := json.Unmarshal([]byte(cp.Data), &info); err != nil {
		return fmt.Errorf("parse pod allocation checkpoint %s: %w", m.path, err)
	}
	for uid, e := range info.Entries {
		m.entries[uid] = e
	}
	m.loaded = true
	return nil
}

// changedLocked records a change of entries (mu held); Flush stores it.
func (m *Manager) changedLocked() { m.version++ }

// Flush returns once the checkpoint on disk holds every allocation change
// made before the call (Record, RemovePod), or the error of writing it.
// Concurrent calls share writes: a caller that waits while the checkpoint
// is being written finds its change stored by the next write, which holds
// every change made until it started, so that N pods recorded together
// cost about two writes, not N. The checkpoint is written atomically (a
// temporary file, synced, renamed over the old one).
func (m *Manager) Flush() error {
	m.mu.Lock()
	want := m.version
	m.mu.Unlock()
	m.storeMu.Lock()
	defer m.storeMu.Unlock()
	m.mu.Lock()
	if m.stored >= want || m.path == "" {
		m.mu.Unlock()
		return nil
	}
	version := m.version
	data, err := m.checkpointDataLocked()
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("marshal pod allocation checkpoint: %w", err)
	}
	blob, err := json.Marshal(checkpoint{Data: string(data), Checksum: checksum(string(data))})
	if err != nil {
		return fmt.Errorf("marshal pod allocation checkpoint: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(m.path), 0o750); err != nil {
		return fmt.Errorf("write pod allocation checkpoint %s: %w", m.path, err)
	}
	if err := atomicfile.Write(m.path, blob); err != nil {
		return fmt.Errorf("write pod allocation checkpoint %s: %w", m.path, err)
	}
	m.mu.Lock()
	m.stored = version
	m.mu.Unlock()
	return nil
}

// checkpointDataLocked is json.Marshal(checkpointInfo{Entries: m.entries}),
// byte for byte, joined from each entry's encoding (mu held): encoding/json
// writes a map's members sorted by key, each as its key's and its value's
// own encoding.
func (m *Manager) checkpointDataLocked() ([]byte, error) {
	if len(m.entries) == 0 {
		return []byte("{}"), nil
	}
	uids := make([]types.UID, 0, len(m.entries))
	size := len(`{"entries":{}}`)
	for uid, info := range m.entries {
		uids = append(uids, uid)
		member, ok := m.encoded[uid]
		if !ok {
			key, err := json.Marshal(string(uid))
			if err != nil {
				return nil, err
			}
			value, err := json.Marshal(info)
			if err != nil {
				return nil, err
			}
			member = append(append(key, ':'), value...)
			m.encoded[uid] = member
		}
		size += len(member) + 1
	}
	slices.Sort(uids)
	data := make([]byte, 0, size)
	data = append(data, `{"entries":{`...)
	for i, uid := range uids {
		if i > 0 {
			data = append(data, ',')
		}
		data = append(data, m.encoded[uid]...)
	}
	return append(data, "}}"...), nil
}

// infoFor is the allocation pod's spec asks for.
func infoFor(pod *v1.Pod) podInfo {
	info := podInfo{ContainerResources: map[string]v1.ResourceRequirements{}}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			info.ContainerResources[list[i].Name] = *list[i].Resources.DeepCopy()
		}
	}
	if pod.Spec.Resources != nil {
		info.PodLevelResources = pod.Spec.Resources.DeepCopy()
	}
	return info
}

// AllocatedPod returns pod with the resources allocated to it in place of
// those its spec asks for, and whether they differ (a resize the node has
// not allocated). A pod without an allocation is returned as it is, not
// differing. pod is not modified; the result shares no memory with it when
// they differ.
func (m *Manager) AllocatedPod(pod *v1.Pod) (*v1.Pod, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.loadLocked(); err != nil {
		return pod, false, err
	}
	info, ok := m.entries[pod.UID]
	if !ok {
		return pod, false, nil
	}
	out, changed := applyInfo(pod, info)
	return out, changed, nil
}

// applyInfo returns pod with info's resources, copied only when they
// differ.
func applyInfo(pod *v1.Pod, info podInfo) (*v1.Pod, bool) {
	var out *v1.Pod
	clone := func() {
		if out == nil {
			out = pod.DeepCopy()
		}
	}
	for _, init := range []bool{true, false} {
		list := pod.Spec.Containers
		if init {
			list = pod.Spec.InitContainers
		}
		for i := range list {
			r, ok := info.ContainerResources[list[i].Name]
			if !ok || resourcesEqual(&r, &list[i].Resources) {
				continue
			}
			clone()
			target := out.Spec.Containers
			if init {
				target = out.Spec.InitContainers
			}
			target[i].Resources = *r.DeepCopy()
		}
	}
	if info.PodLevelResources != nil && pod.Spec.Resources != nil && !resourcesEqual(info.PodLevelResources, pod.Spec.Resources) {
		clone()
		out.Spec.Resources = info.PodLevelResources.DeepCopy()
	}
	if out == nil {
		return pod, false
	}
	return out, true
}

// resourcesEqual compares requests and limits by value.
func resourcesEqual(a, b *v1.ResourceRequirements) bool {
	return equality.Semantic.DeepEqual(a.Requests, b.Requests) && equality.Semantic.DeepEqual(a.Limits, b.Limits)
}

// SetAllocated records the resources pod's spec asks for as its allocation
// (at admission, and when a resize is accepted) and writes the checkpoint:
// Record, then Flush.
func (m *Manager) SetAllocated(pod *v1.Pod) error {
	if err := m.Record(pod); err != nil {
		return err
	}
	if err := m.Flush(); err != nil {
		return fmt.Errorf("allocate resources of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// Record records the resources pod's spec asks for as its allocation in
// memory only: AllocatedPod and Allocated see it at once, the checkpoint
// once Flush (or a later SetAllocated, RemovePod) has written it. An
// admission that records many pods at once (a burst) does not wait for
// the disk once per pod: each pod's worker calls Flush before the runtime
// acts on the allocation, and the workers share the writes. It fails only
// when the checkpoint cannot be read.
func (m *Manager) Record(pod *v1.Pod) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.loadLocked(); err != nil {
		return err
	}
	info := infoFor(pod)
	if old, ok := m.entries[pod.UID]; ok && equality.Semantic.DeepEqual(old, info) {
		return nil
	}
	m.entries[pod.UID] = info
	delete(m.encoded, pod.UID)
	m.changedLocked()
	return nil
}

// Allocated reports whether the pod with uid has an allocation.
func (m *Manager) Allocated(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.loadLocked(); err != nil {
		return false
	}
	_, ok := m.entries[uid]
	return ok
}

// RemovePod forgets the allocation of the pod with uid.
func (m *Manager) RemovePod(uid types.UID) error {
	m.mu.Lock()
	if err := m.loadLocked(); err != nil {
		m.mu.Unlock()
		return err
	}
	if _, ok := m.entries[uid]; !ok {
		m.mu.Unlock()
		return nil
	}
	delete(m.entries, uid)
	delete(m.encoded, uid)
	m.changedLocked()
	m.mu.Unlock()
	if err := m.Flush(); err != nil {
		return fmt.Errorf("remove allocation of pod %s: %w", uid, err)
	}
	return nil
}

// RemoveOrphans forgets the allocations of every pod keep does not report
// as known (pods removed while the agent was down). keep is called without
// the Manager's lock held, so it may take locks of its own.
func (m *Manager) RemoveOrphans(keep func(types.UID) bool) error {
	m.mu.Lock()
	if err := m.loadLocked(); err != nil {
		m.mu.Unlock()
		return err
	}
	uids := make([]types.UID, 0, len(m.entries))
	for uid := range m.entries {
		uids = append(uids, uid)
	}
	m.mu.Unlock()
	var drop []types.UID
	for _, uid := range uids {
		if !keep(uid) {
			drop = append(drop, uid)
		}
	}
	if len(drop) == 0 {
		return nil
	}
	m.mu.Lock()
	for _, uid := range drop {
		delete(m.entries, uid)
		delete(m.encoded, uid)
	}
	m.changedLocked()
	m.mu.Unlock()
	return m.Flush()
}
