package stats

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// round is one computation of a summary. Its maps memoize what several
// parts of the summary share (one statfs per filesystem, one listing of the
// pod cgroups).
type round struct {
	p    *Provider
	ctx  context.Context
	now  time.Time
	full bool

	fs         map[string]*fsResult // statfs by path
	nodefs     *fsResult
	imagefsDir string

	// podsSeen are the pods whose cgroup was looked up this round;
	// podCgroupsListed says the pod cgroups were listed this round.
	podsSeen         map[types.UID]bool
	podCgroupsListed bool
}

type fsResult struct {
	info fsInfo
	err  error
}

func (r *round) log() klog.Logger { return klog.FromContext(r.ctx) }

// statfs returns the statfs of path, once per round.
func (r *round) statfs(path string) (fsInfo, error) {
	if res, ok := r.fs[path]; ok {
		return res.info, res.err
	}
	info, err := statfs(path)
	r.fs[path] = &fsResult{info: info, err: err}
	return info, err
}

// node returns the node's stats.
func (r *round) node() (*statsapi.NodeStats, error) {
	p := r.p
	root, err := p.cg.read(&p.r, "/", p.mem, r.now)
	if err != nil {
		return nil, fmt.Errorf("stats summary: root cgroup: %w", err)
	}
	cs := r.cgroupStats("/", root)
	ns := &statsapi.NodeStats{
		NodeName:         p.opts.NodeName,
		StartTime:        metaTime(p.boot),
		CPU:              cs.CPU,
		Memory:           cs.Memory,
		Swap:             cs.Swap,
		SystemContainers: r.systemContainers(),
	}
	if !r.full {
		return ns, nil
	}
	// The host's network namespace is the one of process 1, as cAdvisor
	// reads it.
	if ns.Network, err = p.r.readNetDev(filepath.Join(p.opts.ProcRoot, "1", "net", "dev"), true, r.now); err != nil {
		r.log().V(2).Info("Cannot read the node's network stats", "err", err)
	}
	nodefs, err := r.statfs(p.opts.RootDir)
	if err != nil {
		return nil, fmt.Errorf("stats summary: filesystem of root directory %s: %w", p.opts.RootDir, err)
	}
	r.nodefs = &fsResult{info: nodefs}
	ns.Fs = fsStats(nodefs, r.now)
	ns.Fs.UsedBytes = u64(nodefs.used)
	ns.Fs.InodesUsed = u64(nodefs.inodes - min(nodefs.inodesFree, nodefs.inodes))
	if ns.Runtime, err = r.runtimeFs(); err != nil {
		return nil, err
	}
	ns.Rlimit = &statsapi.RlimitStats{Time: metaTime(r.now)}
	ns.Rlimit.MaxPID, ns.Rlimit.NumOfRunningProcesses = p.r.readRlimit(p.opts.ProcRoot)
	return ns, nil
}

// fsStats returns the capacity part of a filesystem's stats.
func fsStats(info fsInfo, t time.Time) *statsapi.FsStats {
	return &statsapi.FsStats{
		Time:           metaTime(t),
		AvailableBytes: u64(info.available),
		CapacityBytes:  u64(info.capacity),
		Inodes:         u64(info.inodes),
		InodesFree:     u64(info.inodesFree),
	}
}

// cgroupStats converts a cgroup sample to container stats (CPU, memory,
// swap) as the kubelet converts cAdvisor's: usageNanoCores is 0 until two
// samples exist, availableBytes is the limit less the working set when a
// limit is set.
func (r *round) cgroupStats(literal string, s cgroupSample) statsapi.ContainerStats {
	t := metaTime(s.time)
	rate, _ := r.p.rates.update(cgroupSeries+literal, s.time, s.cpu)
	mem := &statsapi.MemoryStats{
		Time:            t,
		UsageBytes:      u64(s.usage),
		WorkingSetBytes: u64(s.workingSet),
		RSSBytes:        u64(s.rss),
		PageFaults:      u64(s.pgfault),
		MajorPageFaults: u64(s.pgmajfault),
	}
	if s.limit <= maxMemorySize {
		mem.AvailableBytes = u64(s.limit - min(s.workingSet, s.limit))
	}
	swap := &statsapi.SwapStats{Time: t, SwapUsageBytes: u64(s.swap)}
	if s.swapLimit <= maxMemorySize {
		swap.SwapAvailableBytes = u64(s.swapLimit - min(s.swap, s.swapLimit))
	}
	return statsapi.ContainerStats{
		CPU:    &statsapi.CPUStats{Time: t, UsageNanoCores: u64(rate), UsageCoreNanoSeconds: u64(s.cpu)},
		Memory: mem,
		Swap:   swap,
	}
}

// kubepodsCgroup returns the path of the kubepods cgroup, "" without
// Options.Cgroups.
func (r *round) kubepodsCgroup() string {
	c := r.p.opts.Cgroups
	if c == nil {
		return ""
	}
	return c.Driver().Literal(c.QOSCgroups().Guaranteed)
}

// systemContainers returns the system containers whose cgroup is known
// and readable, in the order kubelet, runtime, misc, pods.
func (r *round) systemContainers() []statsapi.ContainerStats {
	p := r.p
	list := []struct {
		name, cgroup string
		start        time.Time
	}{
		{statsapi.SystemContainerKubelet, p.opts.SystemCgroups.Kubelet, p.start},
		{statsapi.SystemContainerRuntime, p.opts.SystemCgroups.Runtime, time.Time{}},
		{statsapi.SystemContainerMisc, p.opts.SystemCgroups.Misc, time.Time{}},
		{statsapi.SystemContainerPods, r.kubepodsCgroup(), time.Time{}},
	}
	var out []statsapi.ContainerStats
	for _, sc := range list {
		if sc.cgroup == "" {
			continue
		}
		s, err := p.cg.read(&p.r, sc.cgroup, p.mem, r.now)
		if err != nil {
			level := 4
			if !isNotExist(err) {
				level = 2
			}
			r.log().V(level).Info("Cannot read system container stats", "container", sc.name, "cgroup", sc.cgroup, "err", err)
			continue
		}
		cs := r.cgroupStats(sc.cgroup, s)
		cs.Name = sc.name
		cs.StartTime = metaTime(sc.start)
		if sc.start.IsZero() {
			cs.StartTime = metaTime(p.cg.creationTime(sc.cgroup, p.boot))
		}
		out = append(out, cs)
	}
	return out
}

// runtimeFs returns the image and container filesystems the runtime
// reports, with usage from the runtime and capacity from statfs of their
// mount points, as the kubelet's CRI stats provider does. When the runtime
// reports no separate container filesystem (containerd 1.6), the container
// filesystem is the image filesystem.
func (r *round) runtimeFs() (*statsapi.RuntimeStats, error) {
	resp, err := r.p.opts.Images.ImageFsInfo(r.ctx)
	if err != nil {
		return nil, fmt.Errorf("stats summary: image filesystem info: %w", err)
	}
	if len(resp.GetImageFilesystems()) == 0 {
		return nil, errors.New("stats summary: the runtime reports no image filesystem")
	}
	first := resp.GetImageFilesystems()[0]
	r.imagefsDir = first.GetFsId().GetMountpoint()
	rs := &statsapi.RuntimeStats{ImageFs: r.criFs(first)}
	rs.ContainerFs = rs.ImageFs
	if cfs := resp.GetContainerFilesystems(); len(cfs) > 0 {
		rs.ContainerFs = r.criFs(cfs[0])
	}
	return rs, nil
}

// criFs converts a CRI filesystem usage, adding the capacity of its
// filesystem; a mount point statfs cannot read leaves the capacity out
// (logged), as the kubelet does.
func (r *round) criFs(u *runtimeapi.FilesystemUsage) *statsapi.FsStats {
	fs := &statsapi.FsStats{Time: metaTime(time.Unix(0, u.GetTimestamp()))}
	if u.GetUsedBytes() != nil {
		fs.UsedBytes = u64(u.GetUsedBytes().GetValue())
	}
	if u.GetInodesUsed() != nil {
		fs.InodesUsed = u64(u.GetInodesUsed().GetValue())
	}
	r.addCapacity(fs, u.GetFsId().GetMountpoint())
	return fs
}

// addCapacity fills the capacity fields of fs from statfs of mountpoint.
func (r *round) addCapacity(fs *statsapi.FsStats, mountpoint string) {
	if mountpoint == "" {
		return
	}
	info, err := r.statfs(mountpoint)
	if err != nil {
		// Said at --v=2 when it starts or its error changes; every round
		// (each 10 s under the eviction manager) only at --v=5.
		v := 5
		if msg := err.Error(); r.p.fsErrs[mountpoint] != msg {
			r.p.fsErrs[mountpoint] = msg
			v = 2
		}
		r.log().V(v).Info("Cannot read the capacity of a runtime filesystem", "mountpoint", mountpoint, "err", err)
		return
	}
	delete(r.p.fsErrs, mountpoint)
	fs.AvailableBytes = u64(info.available)
	fs.CapacityBytes = u64(info.capacity)
	fs.Inodes = u64(info.inodes)
	fs.InodesFree = u64(info.inodesFree)
}

// nodeFilesystems returns the node's filesystems for the root container's
// cAdvisor metrics: nodefs and, when it is another filesystem, the image
// filesystem.
func (r *round) nodeFilesystems() []pathFs {
	if r.nodefs == nil {
		return nil
	}
	out := []pathFs{{path: r.p.opts.RootDir, info: r.nodefs.info, time: r.now}}
	if res, ok := r.fs[r.imagefsDir]; ok && r.imagefsDir != "" && res.err == nil && res.info.device != r.nodefs.info.device {
		out = append(out, pathFs{path: r.imagefsDir, info: res.info, time: r.now})
	}
	return out
}
