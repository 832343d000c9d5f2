package eviction

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// errMemcgUnsupported says the kernel has no memcg threshold notification
// (cgroup v2 has no cgroup.event_control).
var errMemcgUnsupported = errors.New("memcg threshold notification is not supported (needs the cgroup v1 memory controller)")

// memcgWaiter is one armed memcg threshold. Wait blocks until the
// cgroup's usage crosses the threshold (either way) and returns nil, or
// returns an error once Close was called.
type memcgWaiter interface {
	Wait() error
	Close() error
}

// memcgNotifiers are the armed thresholds, one per memory eviction
// threshold, re-armed from fresh stats every notifierRefreshInterval. A
// crossing starts a pass at once through Manager.trigger.
type memcgNotifiers struct {
	open     func(dir string, usageThreshold int64) (memcgWaiter, error)
	disabled bool
	last     time.Time
	armed    map[int]memcgWaiter // by threshold index
	wg       sync.WaitGroup
}

// closeAll disarms every threshold and waits for their goroutines. It is
// safe on a nil receiver.
func (n *memcgNotifiers) closeAll() {
	if n == nil {
		return
	}
	for i, w := range n.armed {
		_ = w.Close()
		delete(n.armed, i)
	}
	n.wg.Wait()
}

// memcgUsageThreshold is the memory.usage_in_bytes value at which the
// working set reaches the eviction threshold, as the kubelet arms it:
// capacity − threshold + inactive file pages (usage − working set).
func memcgUsageThreshold(v ThresholdValue, ms *statsapi.MemoryStats) (int64, error) {
	if ms == nil || ms.UsageBytes == nil || ms.WorkingSetBytes == nil || ms.AvailableBytes == nil {
		return 0, fmt.Errorf("summary was incomplete: memory stats need usage, working set and available bytes")
	}
	inactiveFile := int64(*ms.UsageBytes) - int64(*ms.WorkingSetBytes)
	capacity := int64(*ms.AvailableBytes + *ms.WorkingSetBytes)
	return capacity - v.Amount(capacity) + inactiveFile, nil
}

// refreshMemcg (re-)arms a memcg threshold for every memory eviction
// threshold, at most every notifierRefreshInterval.
func (m *Manager) refreshMemcg(ctx context.Context, summary *statsapi.Summary) {
	if m.memcg == nil {
		m.memcg = &memcgNotifiers{open: openMemcgThreshold, armed: map[int]memcgWaiter{}}
	}
	n := m.memcg
	if n.disabled || (!n.last.IsZero() && m.clock.Since(n.last) <= notifierRefreshInterval) {
		return
	}
	n.last = m.clock.Now()
	logger := klog.FromContext(ctx)
	for i := range m.thresholds {
		t := &m.thresholds[i]
		if !isMemorySignal(t.Signal) {
			continue
		}
		ms, dir := summary.Node.Memory, m.opts.MemoryCgroupDir
		if t.Signal == SignalAllocatableMemoryAvailable {
			ms, dir = nil, filepath.Join(dir, m.opts.PodCgroupRoot)
			for j := range summary.Node.SystemContainers {
				if summary.Node.SystemContainers[j].Name == statsapi.SystemContainerPods {
					ms = summary.Node.SystemContainers[j].Memory
				}
			}
		}
		usage, err := memcgUsageThreshold(t.Value, ms)
		if err != nil {
			logger.Info("Eviction manager: failed to update memcg notifier", "threshold", t.Threshold.String(), "err", err)
			continue
		}
		if old, ok := n.armed[i]; ok {
			_ = old.Close()
			delete(n.armed, i)
		}
		w, err := n.open(dir, usage)
		if errors.Is(err, errMemcgUnsupported) {
			logger.Info("Eviction manager: kernel memcg notification is unavailable; memory thresholds are checked every interval", "err", err)
			n.disabled = true
			return
		}
		if err != nil {
			logger.Info("Eviction manager: failed to arm memcg notifier", "threshold", t.Threshold.String(), "cgroup", dir, "err", err)
			continue
		}
		logger.V(3).Info("Eviction manager: memcg notifier armed", "threshold", t.Threshold.String(), "cgroup", dir, "usageBytes", usage)
		n.armed[i] = w
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for w.Wait() == nil {
				select {
				case m.trigger <- struct{}{}:
				default:
				}
			}
		}()
	}
}
