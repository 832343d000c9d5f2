package stats

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Provider computes the kubelet's stats summary for the node and its pods
// from procfs, statfs, the cgroup tree and the CRI. It samples on demand:
// nothing runs in the background, and a summary is computed only when one
// is asked for and the cached one is older than Options.MaxAge. All
// methods are safe for concurrent use; concurrent callers share one
// computation.
type Provider struct {
	opts   Options
	clock  clock.Clock
	cg     *cgroupFS
	start  time.Time // creation, the "kubelet" system container's start
	noSbox atomic.Bool

	// round is a one-slot semaphore held while a summary is computed; the
	// fields below it are used only while holding it.
	round chan struct{}
	r     reader
	rates cpuRates
	mem   memInfo
	boot  time.Time
	// podCgroups are the pod cgroup paths by UID, kept across rounds.
	podCgroups map[types.UID]string
	// fsErrs are the runtime filesystems whose capacity could not be read,
	// with the error last logged for each (see round.addCapacity).
	fsErrs map[string]string

	mu     sync.Mutex // guards full and cpuMem
	full   *snapshot
	cpuMem *snapshot
}

// snapshot is one computed summary with what the metrics collectors need
// beyond it.
type snapshot struct {
	at      time.Time
	summary *statsapi.Summary
	// pods is parallel to summary.Pods.
	pods []podInfo
	// fs is the node's filesystems (nodefs first), for the root
	// container's cAdvisor filesystem metrics; nil for a CPU and memory
	// snapshot.
	fs []pathFs
}

// podInfo identifies a summary pod's sandbox and containers in the runtime.
type podInfo struct {
	sandboxID string
	// cgroup is the pod cgroup's path when the round read it.
	cgroup string
	// containers is parallel to PodStats.Containers.
	containers []containerInfo
}

type containerInfo struct {
	id, image string
	// cgroup is the container cgroup's path when the round found it.
	cgroup string
}

// pathFs is the statfs of the filesystem holding path.
type pathFs struct {
	path string
	info fsInfo
	time time.Time
}

// fsInfo is one statfs of a filesystem, in bytes and inodes, with the
// device number that identifies the filesystem.
type fsInfo struct {
	device                    uint64
	capacity, available, used uint64
	inodes, inodesFree        uint64
}

// New returns a Provider for o with defaults applied. It validates o and
// does no I/O: the cgroup layout and the host's memory are read with the
// first summary.
func New(o Options) (*Provider, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Provider{
		opts:   o,
		clock:  o.Clock,
		cg:     &cgroupFS{root: o.CgroupRoot, version: o.CgroupVersion},
		start:  o.Clock.Now(),
		round:  make(chan struct{}, 1),
		fsErrs: map[string]string{},
	}, nil
}

// Summary returns the stats summary the kubelet serves on /stats/summary:
// the node (CPU, memory, network, nodefs, image and container filesystems,
// rlimit, system containers) and every pod the runtime runs (CPU, memory,
// network, processes, containers with their rootfs and logs, volumes,
// ephemeral storage). It may return a summary computed up to
// Options.MaxAge ago. It blocks while one is computed (CRI calls, file
// reads), and returns early with ctx's error when ctx is done meanwhile.
// The returned summary is shared by every caller and must not be modified.
// It fails when the node's own stats, the image filesystem or the pod list
// cannot be read; a pod or container whose stats are missing is reported
// with what is known.
func (p *Provider) Summary(ctx context.Context) (*statsapi.Summary, error) {
	s, err := p.get(ctx, true)
	if err != nil {
		return nil, err
	}
	return s.summary, nil
}

// FreshSummary is Summary computed after the call began: it never returns a
// summary sampled earlier, and shares only a computation that starts after
// it was called. The eviction manager reads it, as the kubelet's asks its
// summary provider to update the stats first: a pass started early by a
// memcg notification, or right after an eviction, must see the node as it
// is now. Blocking, sharing and errors are as for Summary; the result is
// cached for the other callers.
func (p *Provider) FreshSummary(ctx context.Context) (*statsapi.Summary, error) {
	s, err := p.getAfter(ctx, true, p.clock.Now())
	if err != nil {
		return nil, err
	}
	return s.summary, nil
}

// CPUAndMemory returns a summary with the CPU and memory (and swap) stats
// of the node, its system containers, pods and containers, as the
// kubelet's GetCPUAndMemoryStats, for /metrics/resource. It skips the
// filesystems, network, volumes and processes, so it is cheaper than
// Summary, whose cached summary it returns instead when that is fresh
// (then the other fields are filled too). Blocking, sharing and errors are
// as for Summary.
func (p *Provider) CPUAndMemory(ctx context.Context) (*statsapi.Summary, error) {
	s, err := p.get(ctx, false)
	if err != nil {
		return nil, err
	}
	return s.summary, nil
}

// get returns a fresh enough snapshot, computing one if needed.
func (p *Provider) get(ctx context.Context, full bool) (*snapshot, error) {
	return p.getAfter(ctx, full, time.Time{})
}

// getAfter is get for a snapshot sampled at notBefore or later.
func (p *Provider) getAfter(ctx context.Context, full bool, notBefore time.Time) (*snapshot, error) {
	if s := p.cached(full, notBefore); s != nil {
		return s, nil
	}
	select {
	case p.round <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("stats summary: %w", ctx.Err())
	}
	defer func() { <-p.round }()
	defer p.r.release()
	// Another caller may have computed it while this one waited.
	if s := p.cached(full, notBefore); s != nil {
		return s, nil
	}
	s, err := p.compute(ctx, full)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if full {
		p.full = s
	} else {
		p.cpuMem = s
	}
	p.mu.Unlock()
	return s, nil
}

// cached returns the cached snapshot that serves a full (or a CPU and
// memory) request, nil if none is fresh or none was sampled at notBefore
// or later.
func (p *Provider) cached(full bool, notBefore time.Time) *snapshot {
	if p.opts.MaxAge < 0 {
		return nil
	}
	now := p.clock.Now()
	fresh := func(s *snapshot) bool {
		return s != nil && now.Sub(s.at) < p.opts.MaxAge && !now.Before(s.at) && !s.at.Before(notBefore)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case fresh(p.full):
		return p.full
	case !full && fresh(p.cpuMem):
		return p.cpuMem
	}
	return nil
}

// compute takes one sample of everything. The caller holds the round.
func (p *Provider) compute(ctx context.Context, full bool) (*snapshot, error) {
	now := p.clock.Now()
	if err := p.readHost(); err != nil {
		return nil, err
	}
	p.rates.begin()
	r := &round{p: p, ctx: ctx, now: now, full: full, fs: map[string]*fsResult{}, podsSeen: map[types.UID]bool{}}
	node, err := r.node()
	if err != nil {
		return nil, err
	}
	pods, infos, err := r.pods()
	if err != nil {
		return nil, err
	}
	p.rates.prune(now)
	s := &snapshot{at: now, summary: &statsapi.Summary{Node: *node, Pods: pods}, pods: infos}
	if full {
		s.fs = r.nodeFilesystems()
	}
	return s, nil
}

// readHost reads the host's memory and swap (MemTotal is the root
// cgroup's limit; the root's swap use on cgroup v2 is SwapTotal −
// SwapFree), every round, and the boot time, once.
func (p *Provider) readHost() error {
	mem, err := p.r.readMemInfo(filepath.Join(p.opts.ProcRoot, "meminfo"))
	if err != nil {
		return fmt.Errorf("stats summary: read host memory: %w", err)
	}
	p.mem = mem
	if p.boot.IsZero() {
		if p.boot, err = p.r.readBootTime(filepath.Join(p.opts.ProcRoot, "stat")); err != nil {
			return fmt.Errorf("stats summary: read boot time: %w", err)
		}
	}
	return nil
}

// metaTime converts t for the API, as metav1.NewTime.
func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }

// u64 returns a pointer to a copy of v.
func u64(v uint64) *uint64 { return &v }
