package stats

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/machine"
)

// CadvisorOptions configure CadvisorCollector.
type CadvisorOptions struct {
	// Machine returns the host's facts the machine_* series report (their
	// machine ID, system UUID and boot ID labels, the CPUs, memory and
	// swap): the agent's one machine.Func, which the node status reports
	// too. nil leaves the machine_* series out. It must be safe for
	// concurrent use.
	Machine machine.Func
	// Logger, the node's, takes the errors of collections and is in the
	// context of the provider's calls; none by default.
	Logger logr.Logger
}

// cAdvisor's labels on every container metric, as the kubelet sets them
// (containerPrometheusLabelsFunc).
var cadvisorLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

func cadvisorDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, cadvisorLabels...), extra...), nil)
}

var (
	cadvisorScrapeErrorDesc = prometheus.NewDesc("container_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	cadvisorLastSeenDesc    = cadvisorDesc("container_last_seen", "Last time a container was seen by the exporter")
	cadvisorCPUDesc         = cadvisorDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "cpu")
	cadvisorRSSDesc         = cadvisorDesc("container_memory_rss", "Size of RSS in bytes.")
	cadvisorSwapDesc        = cadvisorDesc("container_memory_swap", "Container swap usage in bytes.")
	cadvisorUsageDesc       = cadvisorDesc("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")
	cadvisorWorkingSetDesc  = cadvisorDesc("container_memory_working_set_bytes", "Current working set in bytes.")
	cadvisorFsInodesFree    = cadvisorDesc("container_fs_inodes_free", "Number of available Inodes", "device")
	cadvisorFsInodesTotal   = cadvisorDesc("container_fs_inodes_total", "Number of Inodes", "device")
	cadvisorFsLimitDesc     = cadvisorDesc("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", "device")
	cadvisorFsUsageDesc     = cadvisorDesc("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", "device")
	cadvisorRxBytesDesc     = cadvisorDesc("container_network_receive_bytes_total", "Cumulative count of bytes received", "interface")
	cadvisorRxErrorsDesc    = cadvisorDesc("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", "interface")
	cadvisorTxBytesDesc     = cadvisorDesc("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "interface")
	cadvisorTxErrorsDesc    = cadvisorDesc("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", "interface")
	cadvisorStartTimeDesc   = cadvisorDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")

	machineLabels        = []string{"machine_id", "system_uuid", "boot_id"}
	machineCoresDesc     = prometheus.NewDesc("machine_cpu_cores", "Number of logical CPU cores.", machineLabels, nil)
	machineMemoryDesc    = prometheus.NewDesc("machine_memory_bytes", "Amount of memory installed on the machine.", machineLabels, nil)
	machineSwapBytesDesc = prometheus.NewDesc("machine_swap_bytes", "Amount of swap memory available on the machine.", machineLabels, nil)
)

// CadvisorCollector returns a collector of the container_* and machine_*
// series of the kubelet's /metrics/cadvisor that common dashboards use,
// from p's full Summary (cached up to Options.MaxAge), with cAdvisor's
// names, help and labels (container, id, image, name, namespace, pod):
//
//   - the root cgroup (id "/"): CPU, memory, the host's network interfaces,
//     and container_fs_{usage,limit}_bytes and container_fs_inodes_{free,total}
//     of nodefs and, when separate, the image filesystem (labelled by
//     device);
//   - the system containers (the kubepods cgroup, and kubelet, runtime and
//     misc when configured), id their cgroup: CPU and memory;
//   - each pod, id its pod cgroup (Options.Cgroups; "" when unknown), pod
//     and namespace labels: CPU, memory and its network interfaces (cAdvisor
//     reports those on the pod's sandbox container, whose row this
//     replaces);
//   - each running container, id its cgroup below the pod cgroup, name its
//     runtime ID, image, container, pod and namespace: CPU, memory, swap
//     (no filesystem series: cAdvisor has none for containerd containers);
//   - container_start_time_seconds and container_last_seen for each row,
//     container_scrape_error, and (with Options.Machine) machine_cpu_cores,
//     machine_memory_bytes and machine_swap_bytes.
//
// Memory series are working set, usage, RSS and swap; cAdvisor's cache,
// mapped-file, failcnt, CFS, block I/O, process and spec series are not
// exported. Register it in the registry that serves /metrics/cadvisor; it
// is safe for concurrent use.
func CadvisorCollector(p *Provider, o CadvisorOptions) prometheus.Collector {
	return &cadvisorCollector{p: p, machine: o.Machine, logger: o.Logger}
}

type cadvisorCollector struct {
	p       *Provider
	machine machine.Func
	logger  logr.Logger
}

func (c *cadvisorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		cadvisorScrapeErrorDesc, cadvisorLastSeenDesc, cadvisorCPUDesc, cadvisorRSSDesc, cadvisorSwapDesc,
		cadvisorUsageDesc, cadvisorWorkingSetDesc, cadvisorFsInodesFree, cadvisorFsInodesTotal, cadvisorFsLimitDesc,
		cadvisorFsUsageDesc, cadvisorRxBytesDesc, cadvisorRxErrorsDesc, cadvisorTxBytesDesc, cadvisorTxErrorsDesc,
		cadvisorStartTimeDesc, machineCoresDesc, machineMemoryDesc, machineSwapBytesDesc,
	} {
		ch <- d
	}
}

// cadvisorRow is one cAdvisor container: its label values, in
// cadvisorLabels order.
type cadvisorRow struct {
	labels []string
	ch     chan<- prometheus.Metric
}

func (r cadvisorRow) emit(d *prometheus.Desc, vt prometheus.ValueType, t time.Time, v float64, extra ...string) {
	m := prometheus.MustNewConstMetric(d, vt, v, append(append([]string{}, r.labels...), extra...)...)
	if !t.IsZero() {
		m = prometheus.NewMetricWithTimestamp(t, m)
	}
	r.ch <- m
}

func (r cadvisorRow) cpuMemory(cpu *statsapi.CPUStats, mem *statsapi.MemoryStats, swap *statsapi.SwapStats) {
	if cpu != nil && cpu.UsageCoreNanoSeconds != nil && *cpu.UsageCoreNanoSeconds > 0 {
		r.emit(cadvisorCPUDesc, prometheus.CounterValue, cpu.Time.Time, seconds(*cpu.UsageCoreNanoSeconds), "total")
	}
	if mem != nil {
		for _, m := range []struct {
			d *prometheus.Desc
			v *uint64
		}{{cadvisorRSSDesc, mem.RSSBytes}, {cadvisorUsageDesc, mem.UsageBytes}, {cadvisorWorkingSetDesc, mem.WorkingSetBytes}} {
			if m.v != nil {
				r.emit(m.d, prometheus.GaugeValue, mem.Time.Time, float64(*m.v))
			}
		}
	}
	if swap != nil && swap.SwapUsageBytes != nil {
		r.emit(cadvisorSwapDesc, prometheus.GaugeValue, swap.Time.Time, float64(*swap.SwapUsageBytes))
	}
}

func (r cadvisorRow) network(n *statsapi.NetworkStats) {
	if n == nil {
		return
	}
	for _, i := range n.Interfaces {
		for _, m := range []struct {
			d *prometheus.Desc
			v *uint64
		}{{cadvisorRxBytesDesc, i.RxBytes}, {cadvisorRxErrorsDesc, i.RxErrors}, {cadvisorTxBytesDesc, i.TxBytes}, {cadvisorTxErrorsDesc, i.TxErrors}} {
			if m.v != nil {
				r.emit(m.d, prometheus.CounterValue, n.Time.Time, float64(*m.v), i.Name)
			}
		}
	}
}

func (r cadvisorRow) seen(start, now time.Time) {
	if !start.IsZero() {
		r.emit(cadvisorStartTimeDesc, prometheus.GaugeValue, time.Time{}, float64(start.Unix()))
	}
	r.emit(cadvisorLastSeenDesc, prometheus.GaugeValue, now, float64(now.Unix()))
}

func (c *cadvisorCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), c.logger), collectTimeout)
	defer cancel()
	c.collectMachine(ch)
	s, err := c.p.get(ctx, true)
	if err != nil {
		c.logger.Error(err, "Couldn't get containers")
		ch <- prometheus.MustNewConstMetric(cadvisorScrapeErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	now := c.p.clock.Now()
	sum := s.summary
	row := func(id, image, name, namespace, pod, container string) cadvisorRow {
		return cadvisorRow{labels: []string{container, id, image, name, namespace, pod}, ch: ch}
	}

	root := row("/", "", "", "", "", "")
	root.cpuMemory(sum.Node.CPU, sum.Node.Memory, sum.Node.Swap)
	root.network(sum.Node.Network)
	devices := c.p.mountDevices()
	seen := map[string]bool{}
	for _, f := range s.fs {
		dev := devices.deviceOf(f.path)
		if seen[dev] {
			continue
		}
		seen[dev] = true
		root.emit(cadvisorFsInodesFree, prometheus.GaugeValue, f.time, float64(f.info.inodesFree), dev)
		root.emit(cadvisorFsInodesTotal, prometheus.GaugeValue, f.time, float64(f.info.inodes), dev)
		root.emit(cadvisorFsLimitDesc, prometheus.GaugeValue, f.time, float64(f.info.capacity), dev)
		root.emit(cadvisorFsUsageDesc, prometheus.GaugeValue, f.time, float64(f.info.used), dev)
	}
	root.seen(sum.Node.StartTime.Time, now)

	for _, sc := range sum.Node.SystemContainers {
		id := c.systemCgroup(sc.Name)
		if id == "" {
			continue
		}
		r := row(id, "", "", "", "", "")
		r.cpuMemory(sc.CPU, sc.Memory, sc.Swap)
		r.seen(sc.StartTime.Time, now)
	}

	var listed map[types.UID]string // pod cgroups the summary did not read
	for i := range sum.Pods {
		ps := &sum.Pods[i]
		info := &s.pods[i]
		ref := ps.PodRef
		cgroup := info.cgroup
		if cgroup == "" {
			if listed == nil {
				listed = c.podCgroups(ctx)
			}
			cgroup = listed[types.UID(ref.UID)]
		}
		pr := row(cgroup, "", "", ref.Namespace, ref.Name, "")
		pr.cpuMemory(ps.CPU, ps.Memory, ps.Swap)
		pr.network(ps.Network)
		pr.seen(ps.StartTime.Time, now)
		var children []string
		for j := range ps.Containers {
			cs := &ps.Containers[j]
			ci := info.containers[j]
			id := ci.cgroup
			if id == "" && cgroup != "" {
				if children == nil {
					children, _ = c.p.cg.children(cgroup)
				}
				for _, child := range children {
					if strings.Contains(child, ci.id) {
						id = cgroup + "/" + child
						break
					}
				}
			}
			cr := row(id, ci.image, ci.id, ref.Namespace, ref.Name, cs.Name)
			cr.cpuMemory(cs.CPU, cs.Memory, cs.Swap)
			cr.seen(cs.StartTime.Time, now)
		}
	}
	ch <- prometheus.MustNewConstMetric(cadvisorScrapeErrorDesc, prometheus.GaugeValue, 0)
}

// systemCgroup returns the cgroup of the system container name.
func (c *cadvisorCollector) systemCgroup(name string) string {
	o := c.p.opts
	switch name {
	case statsapi.SystemContainerKubelet:
		return o.SystemCgroups.Kubelet
	case statsapi.SystemContainerRuntime:
		return o.SystemCgroups.Runtime
	case statsapi.SystemContainerMisc:
		return o.SystemCgroups.Misc
	case statsapi.SystemContainerPods:
		if o.Cgroups != nil {
			return o.Cgroups.Driver().Literal(o.Cgroups.QOSCgroups().Guaranteed)
		}
	}
	return ""
}

// podCgroups lists the pod cgroup paths by pod UID; empty without
// Options.Cgroups.
func (c *cadvisorCollector) podCgroups(ctx context.Context) map[types.UID]string {
	cg := c.p.opts.Cgroups
	if cg == nil {
		return nil
	}
	names, err := cg.ListPods(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot list the pod cgroups", "err", err)
	}
	out := make(map[types.UID]string, len(names))
	for uid, n := range names {
		out[uid] = cg.Driver().Literal(n)
	}
	return out
}

func (c *cadvisorCollector) collectMachine(ch chan<- prometheus.Metric) {
	if c.machine == nil {
		return
	}
	m, err := c.machine()
	if err != nil {
		c.logger.V(2).Info("Cannot read the machine info", "err", err)
		return
	}
	labels := []string{m.MachineID, m.SystemUUID, m.BootID}
	ch <- prometheus.MustNewConstMetric(machineCoresDesc, prometheus.GaugeValue, float64(m.NumCores), labels...)
	ch <- prometheus.MustNewConstMetric(machineMemoryDesc, prometheus.GaugeValue, float64(m.MemoryCapacity), labels...)
	ch <- prometheus.MustNewConstMetric(machineSwapBytesDesc, prometheus.GaugeValue, float64(m.SwapCapacity), labels...)
}

// mountTable maps mount points to the devices mounted there.
type mountTable []mountEntry

type mountEntry struct{ point, device string }

// mountDevices reads the mount table of this process's mount namespace
// (<ProcRoot>/self/mountinfo).
func (p *Provider) mountDevices() mountTable {
	var r reader
	defer r.release()
	b, err := r.read(filepath.Join(p.opts.ProcRoot, "self", "mountinfo"))
	if err != nil {
		return nil
	}
	var t mountTable
	eachLine(b, func(line []byte) {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(string(line))
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			return
		}
		t = append(t, mountEntry{point: unescapeMount(fields[4]), device: fields[sep+2]})
	})
	return t
}

// deviceOf returns the device of the mount holding path (the last mount
// of the longest matching mount point), or path itself when unknown.
func (t mountTable) deviceOf(path string) string {
	best, dev := -1, path
	for _, m := range t {
		if (path == m.point || strings.HasPrefix(path, strings.TrimSuffix(m.point, "/")+"/")) && len(m.point) >= best {
			best, dev = len(m.point), m.device
		}
	}
	return dev
}

// unescapeMount decodes the octal escapes (\040 for a space) of a
// mountinfo field.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
