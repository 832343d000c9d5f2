package stats

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// podAcc accumulates one pod's stats during a round.
type podAcc struct {
	sandbox *runtimeapi.PodSandbox
	stats   statsapi.PodStats
	info    podInfo
}

// pods returns the stats of the pods the runtime runs. With the pod
// cgroups known (and PodStatsFromCRI off) it asks the runtime for
// container stats (ListContainerStats) and reads the pod-level stats from
// the pod cgroups, as the kubelet does by default. Otherwise it asks for
// pod sandbox stats (ListPodSandboxStats), and falls back to the former
// when the runtime does not implement them (remembered for the Provider's
// life) or the call fails (this round only: containerd fails the whole
// call when one sandbox is being torn down). When Options.HasPods says the
// runtime holds no pod, or the runtime lists no sandbox, it asks nothing more.
func (r *round) pods() ([]statsapi.PodStats, []podInfo, error) {
	p := r.p
	rt := p.opts.Runtime
	var sandboxes []*runtimeapi.PodSandbox
	if p.opts.HasPods == nil || p.opts.HasPods() {
		var err error
		if sandboxes, err = rt.ListPodSandbox(r.ctx, &runtimeapi.PodSandboxFilter{}); err != nil {
			return nil, nil, fmt.Errorf("stats summary: list pod sandboxes: %w", err)
		}
	}
	if len(sandboxes) == 0 {
		// No sandbox, no pod: every container and every stat is reported
		// under its sandbox, so the lists below could add none. A node
		// with no pod (an idle one, every round of its eviction manager)
		// asks the runtime once, or not at all (Options.HasPods), instead
		// of three times.
		r.forgetPodCgroups()
		return []statsapi.PodStats{}, []podInfo{}, nil
	}
	containers, err := rt.ListContainers(r.ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		return nil, nil, fmt.Errorf("stats summary: list containers: %w", err)
	}
	sandboxByID := latestSandboxes(sandboxes)
	running := make(map[string]*runtimeapi.Container, len(containers))
	for _, c := range containers {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running[c.GetId()] = c
		}
	}

	var accs []*podAcc
	fromSandboxes := false
	if (p.opts.PodStatsFromCRI || p.opts.Cgroups == nil) && !p.noSbox.Load() {
		stats, err := rt.ListPodSandboxStats(r.ctx, &runtimeapi.PodSandboxStatsFilter{})
		switch {
		case err == nil:
			accs, fromSandboxes = r.podsFromSandboxStats(stats, sandboxByID, running), true
		case status.Code(err) == codes.Unimplemented:
			p.noSbox.Store(true)
			r.log().V(2).Info("The container runtime does not implement ListPodSandboxStats; pod stats come from the pod cgroups", "err", err)
		default:
			r.log().V(2).Info("Pod sandbox stats failed; using container stats and the pod cgroups this time", "err", err)
		}
	}
	if !fromSandboxes {
		stats, err := rt.ListContainerStats(r.ctx, &runtimeapi.ContainerStatsFilter{})
		if err != nil {
			return nil, nil, fmt.Errorf("stats summary: list container stats: %w", err)
		}
		accs = r.podsFromContainerStats(stats, sandboxByID, running)
		r.forgetPodCgroups()
	}

	sort.Slice(accs, func(i, j int) bool {
		a, b := accs[i].stats.PodRef, accs[j].stats.PodRef
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.UID < b.UID
	})
	pods := make([]statsapi.PodStats, len(accs))
	infos := make([]podInfo, len(accs))
	for i, a := range accs {
		if r.full {
			r.podStorage(&a.stats)
		}
		pods[i], infos[i] = a.stats, a.info
	}
	return pods, infos, nil
}

// latestSandboxes indexes the sandboxes by ID after dropping the
// superseded ones as the kubelet does: of several sandboxes of one pod
// (same namespace and name), the ready ones are kept, or else the newest.
func latestSandboxes(sandboxes []*runtimeapi.PodSandbox) map[string]*runtimeapi.PodSandbox {
	type ref struct{ namespace, name string }
	byPod := map[ref][]*runtimeapi.PodSandbox{}
	for _, s := range sandboxes {
		k := ref{s.GetMetadata().GetNamespace(), s.GetMetadata().GetName()}
		byPod[k] = append(byPod[k], s)
	}
	out := make(map[string]*runtimeapi.PodSandbox, len(sandboxes))
	for _, list := range byPod {
		if len(list) == 1 {
			out[list[0].GetId()] = list[0]
			continue
		}
		var newest *runtimeapi.PodSandbox
		ready := false
		for _, s := range list {
			if s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
				out[s.GetId()], ready = s, true
			}
			if newest == nil || s.GetCreatedAt() > newest.GetCreatedAt() {
				newest = s
			}
		}
		if !ready {
			out[newest.GetId()] = newest
		}
	}
	return out
}

// newPod starts a pod's stats from its sandbox; the summary's pod start
// time is the sandbox's creation.
func newPod(sb *runtimeapi.PodSandbox) *podAcc {
	md := sb.GetMetadata()
	return &podAcc{
		sandbox: sb,
		stats: statsapi.PodStats{
			PodRef:    statsapi.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()},
			StartTime: metaTime(time.Unix(0, sb.GetCreatedAt())),
		},
		info: podInfo{sandboxID: sb.GetId()},
	}
}

// podsFromSandboxStats builds the pods from the runtime's pod sandbox
// stats, as the kubelet's CRI stats provider does with
// PodAndContainerStatsFromCRI.
func (r *round) podsFromSandboxStats(stats []*runtimeapi.PodSandboxStats, sandboxes map[string]*runtimeapi.PodSandbox, running map[string]*runtimeapi.Container) []*podAcc {
	accs := make([]*podAcc, 0, len(stats))
	for _, st := range stats {
		sb, ok := sandboxes[st.GetAttributes().GetId()]
		if !ok {
			continue
		}
		a := newPod(sb)
		linux := st.GetLinux()
		for _, cst := range linux.GetContainers() {
			if c, ok := running[cst.GetAttributes().GetId()]; ok {
				r.addContainer(a, cst, c)
			}
		}
		if linux != nil {
			a.stats.CPU = r.criCPU("pod:"+sb.GetId(), linux.GetCpu())
			a.stats.Memory = criMemory(linux.GetMemory())
			if r.full {
				a.stats.Network = criNetwork(linux.GetNetwork(), r.now)
				if pc := linux.GetProcess().GetProcessCount(); pc != nil {
					a.stats.ProcessStats = &statsapi.ProcessStats{ProcessCount: u64(pc.GetValue())}
				}
			}
		}
		a.stats.Swap = sumSwap(a.stats.Containers)
		accs = append(accs, a)
	}
	return accs
}

// podsFromContainerStats builds the pods from the runtime's container
// stats, with the pod-level CPU, memory, network and processes read from
// the pod cgroups (the kubelet reads them through cAdvisor); without the
// pod's cgroup, CPU, memory and swap are the sums of its containers'.
// A pod without a running container is left out, as the kubelet does.
func (r *round) podsFromContainerStats(stats []*runtimeapi.ContainerStats, sandboxes map[string]*runtimeapi.PodSandbox, running map[string]*runtimeapi.Container) []*podAcc {
	bySandbox := map[string]*podAcc{}
	var accs []*podAcc
	for _, cst := range stats {
		c, ok := running[cst.GetAttributes().GetId()]
		if !ok {
			continue
		}
		sb, ok := sandboxes[c.GetPodSandboxId()]
		if !ok {
			continue
		}
		a := bySandbox[sb.GetId()]
		if a == nil {
			a = newPod(sb)
			bySandbox[sb.GetId()] = a
			accs = append(accs, a)
		}
		r.addContainer(a, cst, c)
	}
	for _, a := range accs {
		cgroup := r.podCgroup(types.UID(a.stats.PodRef.UID))
		if cgroup == "" {
			a.stats.CPU, a.stats.Memory = sumCPUMemory(a.stats.Containers)
			a.stats.Swap = sumSwap(a.stats.Containers)
			continue
		}
		s, err := r.p.cg.read(&r.p.r, cgroup, r.p.mem, r.now)
		if err != nil {
			delete(r.p.podCgroups, types.UID(a.stats.PodRef.UID))
			r.log().V(4).Info("Cannot read pod cgroup; summing its containers", "pod", a.stats.PodRef, "cgroup", cgroup, "err", err)
			a.stats.CPU, a.stats.Memory = sumCPUMemory(a.stats.Containers)
			a.stats.Swap = sumSwap(a.stats.Containers)
			continue
		}
		cs := r.cgroupStats(cgroup, s)
		a.stats.CPU, a.stats.Memory, a.stats.Swap = cs.CPU, cs.Memory, cs.Swap
		a.info.cgroup = cgroup
		if r.full {
			r.podProcesses(a, cgroup)
		}
	}
	return accs
}

// podCgroup returns the path of the cgroup of the pod with uid, "" when
// unknown. The pod cgroups are listed again (at most once per round) only
// when a pod is not in the list kept from earlier rounds: a pod's cgroup
// never moves.
func (r *round) podCgroup(uid types.UID) string {
	p := r.p
	c := p.opts.Cgroups
	if c == nil {
		return ""
	}
	r.podsSeen[uid] = true
	if cg, ok := p.podCgroups[uid]; ok {
		return cg
	}
	if r.podCgroupsListed {
		return ""
	}
	r.podCgroupsListed = true
	names, err := c.ListPods(r.ctx)
	if err != nil {
		r.log().V(2).Info("Cannot list the pod cgroups", "err", err)
		return ""
	}
	p.podCgroups = make(map[types.UID]string, len(names))
	for uid, n := range names {
		p.podCgroups[uid] = c.Driver().Literal(n)
	}
	return p.podCgroups[uid]
}

// forgetPodCgroups drops the kept pod cgroups of pods not seen this round.
func (r *round) forgetPodCgroups() {
	for uid := range r.p.podCgroups {
		if !r.podsSeen[uid] {
			delete(r.p.podCgroups, uid)
		}
	}
}

// podProcesses fills a pod's process count (the processes of its
// containers' cgroups, as cAdvisor counts them) and network (the network
// namespace of one of its processes, which all share the sandbox's, as
// cAdvisor reads it for the sandbox) from the pod cgroup.
func (r *round) podProcesses(a *podAcc, cgroup string) {
	p := r.p
	children, err := p.cg.children(cgroup)
	if err != nil {
		r.log().V(4).Info("Cannot list the cgroups of a pod", "pod", a.stats.PodRef, "cgroup", cgroup, "err", err)
		return
	}
	var count uint64
	netPID := 0
	sandboxChild := ""
	for _, child := range children {
		if strings.Contains(child, a.info.sandboxID) {
			sandboxChild = child
			continue
		}
		for i, ci := range a.info.containers {
			if !strings.Contains(child, ci.id) {
				continue
			}
			a.info.containers[i].cgroup = cgroup + "/" + child
			pids, err := p.cg.procs(&p.r, cgroup+"/"+child)
			if err != nil {
				break
			}
			count += uint64(len(pids))
			if netPID == 0 && len(pids) > 0 {
				netPID = pids[0] // containers share the sandbox's network namespace
			}
			break
		}
	}
	if netPID == 0 && sandboxChild != "" {
		if pids, err := p.cg.procs(&p.r, cgroup+"/"+sandboxChild); err == nil && len(pids) > 0 {
			netPID = pids[0]
		}
	}
	a.stats.ProcessStats = &statsapi.ProcessStats{ProcessCount: u64(count)}
	if netPID == 0 {
		return
	}
	net, err := p.r.readNetDev(filepath.Join(p.opts.ProcRoot, strconv.Itoa(netPID), "net", "dev"), false, r.now)
	if err != nil {
		r.log().V(4).Info("Cannot read a pod's network stats", "pod", a.stats.PodRef, "pid", netPID, "err", err)
		return
	}
	a.stats.Network = net
}

// addContainer adds a running container's stats to its pod.
func (r *round) addContainer(a *podAcc, cst *runtimeapi.ContainerStats, c *runtimeapi.Container) {
	name := cst.GetAttributes().GetMetadata().GetName()
	if name == "" {
		name = c.GetMetadata().GetName()
	}
	cs := statsapi.ContainerStats{
		Name:      name,
		StartTime: metaTime(time.Unix(0, c.GetCreatedAt())),
		CPU:       r.criCPU("container:"+c.GetId(), cst.GetCpu()),
		Memory:    criMemory(cst.GetMemory()),
		Swap:      criSwap(cst.GetSwap()),
	}
	nowT := metaTime(r.now)
	if cs.CPU == nil {
		cs.CPU = &statsapi.CPUStats{Time: nowT, UsageCoreNanoSeconds: u64(0), UsageNanoCores: u64(0)}
	}
	if cs.Memory == nil {
		cs.Memory = &statsapi.MemoryStats{Time: nowT, UsageBytes: u64(0), WorkingSetBytes: u64(0), RSSBytes: u64(0)}
	}
	if cs.Swap == nil {
		cs.Swap = &statsapi.SwapStats{Time: nowT, SwapUsageBytes: u64(0), SwapAvailableBytes: u64(0)}
	}
	if r.full {
		cs.Rootfs = &statsapi.FsStats{}
		if wl := cst.GetWritableLayer(); wl != nil {
			cs.Rootfs = r.criFs(wl)
		}
		md := a.sandbox.GetMetadata()
		cs.Logs = r.dirUsage(filepath.Join(r.p.podLogsDir(md), name))
	}
	image := c.GetImage().GetUserSpecifiedImage()
	if image == "" {
		image = c.GetImage().GetImage()
	}
	a.stats.Containers = append(a.stats.Containers, cs)
	a.info.containers = append(a.info.containers, containerInfo{id: c.GetId(), image: image})
}

// podLogsDir returns a pod's log directory,
// <PodLogsDir>/<namespace>_<name>_<uid>, as the kubelet lays it out.
func (p *Provider) podLogsDir(md *runtimeapi.PodSandboxMetadata) string {
	return filepath.Join(p.opts.PodLogsDir, md.GetNamespace()+"_"+md.GetName()+"_"+md.GetUid())
}

// criCPU converts a CRI CPU usage. usageNanoCores is computed from this
// and the previous sample of the same series; until there is one, the
// runtime's own figure is used when it reports one.
func (r *round) criCPU(key string, u *runtimeapi.CpuUsage) *statsapi.CPUStats {
	if u == nil {
		return nil
	}
	cpu := &statsapi.CPUStats{Time: metaTime(time.Unix(0, u.GetTimestamp()))}
	if v := u.GetUsageCoreNanoSeconds(); v != nil {
		cpu.UsageCoreNanoSeconds = u64(v.GetValue())
		if rate, ok := r.p.rates.update(key, time.Unix(0, u.GetTimestamp()), v.GetValue()); ok {
			cpu.UsageNanoCores = u64(rate)
			return cpu
		}
	}
	if v := u.GetUsageNanoCores(); v != nil {
		cpu.UsageNanoCores = u64(v.GetValue())
	}
	return cpu
}

// criMemory converts a CRI memory usage.
func criMemory(u *runtimeapi.MemoryUsage) *statsapi.MemoryStats {
	if u == nil {
		return nil
	}
	return &statsapi.MemoryStats{
		Time:            metaTime(time.Unix(0, u.GetTimestamp())),
		AvailableBytes:  criValue(u.GetAvailableBytes()),
		UsageBytes:      criValue(u.GetUsageBytes()),
		WorkingSetBytes: criValue(u.GetWorkingSetBytes()),
		RSSBytes:        criValue(u.GetRssBytes()),
		PageFaults:      criValue(u.GetPageFaults()),
		MajorPageFaults: criValue(u.GetMajorPageFaults()),
	}
}

// criSwap converts a CRI swap usage.
func criSwap(u *runtimeapi.SwapUsage) *statsapi.SwapStats {
	if u == nil {
		return nil
	}
	return &statsapi.SwapStats{
		Time:               metaTime(time.Unix(0, u.GetTimestamp())),
		SwapUsageBytes:     criValue(u.GetSwapUsageBytes()),
		SwapAvailableBytes: criValue(u.GetSwapAvailableBytes()),
	}
}

// criNetwork converts a CRI pod network usage. containerd 1.6 reports
// only the default interface, without a timestamp: the interface is then
// also listed (as cAdvisor lists it, so per-interface metrics exist) and
// the time is now.
func criNetwork(u *runtimeapi.NetworkUsage, now time.Time) *statsapi.NetworkStats {
	if u == nil {
		return nil
	}
	t := now
	if u.GetTimestamp() != 0 {
		t = time.Unix(0, u.GetTimestamp())
	}
	ns := &statsapi.NetworkStats{Time: metaTime(t)}
	if d := u.GetDefaultInterface(); d != nil {
		ns.InterfaceStats = criInterface(d)
	}
	for _, i := range u.GetInterfaces() {
		ns.Interfaces = append(ns.Interfaces, criInterface(i))
	}
	if len(ns.Interfaces) == 0 && ns.Name != "" {
		ns.Interfaces = []statsapi.InterfaceStats{ns.InterfaceStats}
	}
	return ns
}

func criInterface(i *runtimeapi.NetworkInterfaceUsage) statsapi.InterfaceStats {
	return statsapi.InterfaceStats{
		Name:     i.GetName(),
		RxBytes:  criValue(i.GetRxBytes()),
		RxErrors: criValue(i.GetRxErrors()),
		TxBytes:  criValue(i.GetTxBytes()),
		TxErrors: criValue(i.GetTxErrors()),
	}
}

func criValue(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	return u64(v.GetValue())
}

// sumCPUMemory sums the containers' CPU and memory, as the kubelet does
// for a pod whose cgroup it cannot read.
func sumCPUMemory(containers []statsapi.ContainerStats) (*statsapi.CPUStats, *statsapi.MemoryStats) {
	var cpu *statsapi.CPUStats
	var mem *statsapi.MemoryStats
	add := func(dst **uint64, v *uint64) {
		if v != nil {
			*dst = u64(deref(*dst) + *v)
		} else if *dst == nil {
			*dst = u64(0)
		}
	}
	for _, c := range containers {
		if c.CPU != nil {
			if cpu == nil {
				cpu = &statsapi.CPUStats{}
			}
			cpu.Time = c.CPU.Time
			add(&cpu.UsageCoreNanoSeconds, c.CPU.UsageCoreNanoSeconds)
			add(&cpu.UsageNanoCores, c.CPU.UsageNanoCores)
		}
		if c.Memory != nil {
			if mem == nil {
				mem = &statsapi.MemoryStats{}
			}
			mem.Time = c.Memory.Time
			add(&mem.AvailableBytes, c.Memory.AvailableBytes)
			add(&mem.UsageBytes, c.Memory.UsageBytes)
			add(&mem.WorkingSetBytes, c.Memory.WorkingSetBytes)
			add(&mem.RSSBytes, c.Memory.RSSBytes)
			add(&mem.PageFaults, c.Memory.PageFaults)
			add(&mem.MajorPageFaults, c.Memory.MajorPageFaults)
		}
	}
	return cpu, mem
}

// sumSwap sums the containers' swap, as the kubelet does when the runtime
// reports no pod-level swap.
func sumSwap(containers []statsapi.ContainerStats) *statsapi.SwapStats {
	var swap *statsapi.SwapStats
	for _, c := range containers {
		if c.Swap == nil {
			continue
		}
		if swap == nil {
			swap = &statsapi.SwapStats{SwapUsageBytes: u64(0), SwapAvailableBytes: u64(0)}
		}
		swap.Time = c.Swap.Time
		*swap.SwapUsageBytes += deref(c.Swap.SwapUsageBytes)
		*swap.SwapAvailableBytes += deref(c.Swap.SwapAvailableBytes)
	}
	return swap
}

func deref(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}

// podStorage fills a pod's volume and ephemeral storage stats: the
// containers' writable layers and logs, the ephemeral volumes, the log
// files directly in the pod's log directory and its etc-hosts file, on
// top of the nodefs capacity, as the kubelet's calcEphemeralStorage does.
func (r *round) podStorage(ps *statsapi.PodStats) {
	p := r.p
	var ephemeral []statsapi.VolumeStats
	if p.opts.VolumeStats != nil {
		if vs, ok := p.opts.VolumeStats(types.UID(ps.PodRef.UID)); ok {
			ephemeral = vs.Ephemeral
			ps.VolumeStats = append(append(make([]statsapi.VolumeStats, 0, len(vs.Ephemeral)+len(vs.Persistent)), vs.Ephemeral...), vs.Persistent...)
		}
	}
	es := fsStats(r.nodefs.info, r.now)
	add := func(used, inodes *uint64, t metav1.Time) {
		es.UsedBytes = addUsage(es.UsedBytes, used)
		es.InodesUsed = addUsage(es.InodesUsed, inodes)
		if es.Time.Before(&t) {
			es.Time = t
		}
	}
	for _, c := range ps.Containers {
		if c.Rootfs == nil {
			continue
		}
		add(c.Rootfs.UsedBytes, c.Rootfs.InodesUsed, c.Rootfs.Time)
		if c.Logs != nil {
			add(c.Logs.UsedBytes, c.Logs.InodesUsed, c.Logs.Time)
		}
	}
	for _, v := range ephemeral {
		add(v.UsedBytes, v.InodesUsed, v.Time)
	}
	md := &runtimeapi.PodSandboxMetadata{Namespace: ps.PodRef.Namespace, Name: ps.PodRef.Name, Uid: ps.PodRef.UID}
	if logs := r.dirUsage(p.podLogsDir(md)); logs != nil {
		add(logs.UsedBytes, logs.InodesUsed, logs.Time)
	}
	if used, inodes, err := pathUsage(filepath.Join(p.opts.RootDir, "pods", ps.PodRef.UID, "etc-hosts")); err == nil {
		add(&used, &inodes, metaTime(r.now))
	}
	ps.EphemeralStorage = es
}

// dirUsage returns the usage of the regular files in dir with the nodefs
// capacity, as the kubelet reports container logs; nil when dir cannot be
// read.
func (r *round) dirUsage(dir string) *statsapi.FsStats {
	used, inodes, err := fileUsage(dir)
	if err != nil {
		r.log().V(6).Info("Cannot measure log directory", "dir", dir, "err", err)
		return nil
	}
	fs := fsStats(r.nodefs.info, r.now)
	fs.UsedBytes, fs.InodesUsed = u64(used), u64(inodes)
	return fs
}

func addUsage(a, b *uint64) *uint64 {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return u64(*a + *b)
}
