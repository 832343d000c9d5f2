package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// CPUSources say whose CPU RunBurst splits out of the machine's
// (BurstOptions.Machine); the agent is BurstOptions.AgentPID.
type CPUSources struct {
	// RuntimeCgroup is the cgroup the container runtime runs in, a path
	// below each hierarchy's mount ("/nodebench-1-containerd"): containerd
	// with what it starts (shims, runc under them, the CNI plugins).
	// Required.
	RuntimeCgroup string
	// PodsCgroup is the agent's cgroup root (its --cgroup-root), which
	// holds the pods' cgroups (kubepods). Required.
	PodsCgroup string
	// ControlPlane are the control plane's processes (etcd,
	// kube-apiserver, ...) by name.
	ControlPlane map[string]int
	// RuntimeMetrics, when set, scrapes the runtime's Prometheus metrics:
	// its gRPC calls (grpc_server_handled_total) are counted over the
	// window (MachineCPU.RuntimeCalls).
	RuntimeMetrics func(context.Context) (cluster.Metrics, error)
}

// MachineCPU is the CPU the whole machine used over a window, split by
// whom. Each part is read from its own source (/proc/stat in USER_HZ
// ticks, cgroup usage, the processes' CPU-time clocks), so Rest absorbs
// /proc/stat's rounding: a few ticks either way.
type MachineCPU struct {
	// Window is how long the account ran; CPUs the machine's CPUs
	// (/proc/stat's cpuN lines), so the CPU time it had is Window × CPUs.
	Window time.Duration
	CPUs   int
	// Busy is the CPU time /proc/stat counts as used on all CPUs (user,
	// nice, system, irq, softirq, steal: all but idle and iowait).
	Busy time.Duration
	// Agent is the node agent's (its CPU-time clock: every thread, ReadProcStats).
	Agent time.Duration
	// Runtime is the usage of CPUSources.RuntimeCgroup (cgroup v1
	// cpuacct.usage, v2 cpu.stat usage_usec).
	Runtime time.Duration
	// Pods is the usage of CPUSources.PodsCgroup: what runs in the pods'
	// cgroups, including each container's runc init once it joined its
	// cgroup (mounts, pivot_root, exec of the container's process).
	Pods time.Duration
	// ControlPlane is the control plane processes' (their CPU-time clocks).
	ControlPlane time.Duration
	// Bench is this process's: the client creating and watching the pods.
	Bench time.Duration
	// Interrupts is irq + softirq of /proc/stat, charged to no process
	// (packet processing, timers, block I/O completions); part of Rest.
	Interrupts time.Duration
	// Niced is the nice time of /proc/stat: processes at a positive nice
	// value (other jobs at nice -n 19), none of the measured ones unless
	// they were started niced; part of Rest then.
	Niced time.Duration
	// Rest is Busy less the parts above: other processes on the machine
	// and the interrupts.
	Rest time.Duration
	// RuntimeCalls are the runtime's CRI calls (runtime.v1 services) over
	// the window by method, from every client; nil without
	// CPUSources.RuntimeMetrics.
	RuntimeCalls map[string]float64
}

// Utilization is Busy over the CPU time the machine had.
func (m *MachineCPU) Utilization() float64 {
	if m.Window <= 0 || m.CPUs == 0 {
		return 0
	}
	return m.Busy.Seconds() / (m.Window.Seconds() * float64(m.CPUs))
}

// String summarizes the account on one line, in CPU-s.
func (m *MachineCPU) String() string {
	s := fmt.Sprintf("%.2f CPU-s busy (%.0f %% of %d CPUs × %s): agent %.2f, runtime %.2f, pods %.2f, control plane %.2f, nodebench %.2f, rest %.2f (interrupts %.2f, niced %.2f)",
		m.Busy.Seconds(), 100*m.Utilization(), m.CPUs, m.Window.Round(time.Millisecond), m.Agent.Seconds(), m.Runtime.Seconds(), m.Pods.Seconds(),
		m.ControlPlane.Seconds(), m.Bench.Seconds(), m.Rest.Seconds(), m.Interrupts.Seconds(), m.Niced.Seconds())
	if m.RuntimeCalls != nil {
		s += fmt.Sprintf("; CRI calls %.0f: %s", m.RuntimeCallTotal(), m.FormatRuntimeCalls())
	}
	return s
}

// RuntimeCallTotal sums RuntimeCalls.
func (m *MachineCPU) RuntimeCallTotal() float64 {
	var sum float64
	for _, n := range m.RuntimeCalls {
		sum += n
	}
	return sum
}

// FormatRuntimeCalls lists RuntimeCalls, most frequent first, as
// "Method n" joined by commas.
func (m *MachineCPU) FormatRuntimeCalls() string {
	methods := make([]string, 0, len(m.RuntimeCalls))
	for method := range m.RuntimeCalls {
		methods = append(methods, method)
	}
	slices.SortFunc(methods, func(a, b string) int {
		if d := m.RuntimeCalls[b] - m.RuntimeCalls[a]; d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(methods))
	for i, method := range methods {
		parts[i] = fmt.Sprintf("%s %.0f", method, m.RuntimeCalls[method])
	}
	return strings.Join(parts, ", ")
}

// cpuSample is one reading of every source of a MachineCPU.
type cpuSample struct {
	at                                       time.Time
	cpus                                     int
	busy, interrupts, niced                  time.Duration
	agent, runtime, pods, controlPlane, self time.Duration
	calls                                    map[string]float64
}

// sampleCPU reads every source of src (and the agent's pid).
func sampleCPU(ctx context.Context, src *CPUSources, agentPID int) (cpuSample, error) {
	var s cpuSample
	if src.RuntimeMetrics != nil {
		// First: serving the scrape is the runtime's work, which then
		// falls outside the window at both ends.
		m, err := src.RuntimeMetrics(ctx)
		if err != nil {
			return s, err
		}
		s.calls = criCalls(m)
	}
	s.at = time.Now()
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	if s.cpus, s.busy, s.interrupts, s.niced, err = parseProcStat(stat); err != nil {
		return s, err
	}
	if s.runtime, err = cluster.CgroupCPU(src.RuntimeCgroup); err != nil {
		return s, err
	}
	if s.pods, err = cluster.CgroupCPU(src.PodsCgroup); err != nil {
		return s, err
	}
	procCPU := func(pid int) (time.Duration, error) {
		st, err := ReadProcStats(pid)
		return st.CPU, err
	}
	if s.agent, err = procCPU(agentPID); err != nil {
		return s, err
	}
	for name, pid := range src.ControlPlane {
		cpu, err := procCPU(pid)
		if err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
		s.controlPlane += cpu
	}
	if s.self, err = procCPU(os.Getpid()); err != nil {
		return s, err
	}
	return s, nil
}

// machineCPU is the account from before to after.
func machineCPU(before, after cpuSample) *MachineCPU {
	m := &MachineCPU{
		Window: after.at.Sub(before.at), CPUs: after.cpus,
		Busy:         after.busy - before.busy,
		Agent:        after.agent - before.agent,
		Runtime:      after.runtime - before.runtime,
		Pods:         after.pods - before.pods,
		ControlPlane: after.controlPlane - before.controlPlane,
		Bench:        after.self - before.self,
		Interrupts:   after.interrupts - before.interrupts,
		Niced:        after.niced - before.niced,
	}
	m.Rest = m.Busy - m.Agent - m.Runtime - m.Pods - m.ControlPlane - m.Bench
	if after.calls != nil {
		m.RuntimeCalls = map[string]float64{}
		for method, n := range after.calls {
			if d := n - before.calls[method]; d != 0 {
				m.RuntimeCalls[method] = d
			}
		}
	}
	return m
}

// criCalls sums grpc_server_handled_total of the CRI's services
// (runtime.v1.RuntimeService, runtime.v1.ImageService) by method.
func criCalls(m cluster.Metrics) map[string]float64 {
	calls := map[string]float64{}
	family, ok := m["grpc_server_handled_total"]
	if !ok {
		return calls
	}
	for _, metric := range family.Metric {
		var service, method string
		for _, l := range metric.GetLabel() {
			switch l.GetName() {
			case "grpc_service":
				service = l.GetValue()
			case "grpc_method":
				method = l.GetValue()
			}
		}
		if strings.HasPrefix(service, "runtime.v1.") && metric.Counter != nil {
			calls[method] += metric.Counter.GetValue()
		}
	}
	return calls
}

// userHZ is the unit of /proc/stat's CPU times: USER_HZ, 100 on every
// Linux architecture nodebench runs on.
const userHZ = 100

// parseProcStat reads /proc/stat: the CPUs (its cpuN lines) and, from its
// cpu line, the time all CPUs were busy (user, nice, system, irq,
// softirq, steal; guest time is inside user), the interrupts' part of it
// (irq, softirq) and the niced processes' (nice).
func parseProcStat(data []byte) (cpus int, busy, interrupts, niced time.Duration, err error) {
	s := bufio.NewScanner(bytes.NewReader(data))
	var total []uint64
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			cpus++
			continue
		}
		// cpu user nice system idle iowait irq softirq steal ...
		if len(fields) < 9 {
			return 0, 0, 0, 0, fmt.Errorf("/proc/stat: cpu line %q: want at least 8 figures", s.Text())
		}
		for _, f := range fields[1:9] {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return 0, 0, 0, 0, fmt.Errorf("/proc/stat: cpu line: %w", err)
			}
			total = append(total, v)
		}
	}
	if total == nil || cpus == 0 {
		return 0, 0, 0, 0, errors.New("/proc/stat: no cpu and cpuN lines")
	}
	ticks := func(vs ...uint64) time.Duration {
		var sum uint64
		for _, v := range vs {
			sum += v
		}
		return time.Duration(sum) * time.Second / userHZ
	}
	const user, nice, system, irq, softirq, steal = 0, 1, 2, 5, 6, 7
	return cpus, ticks(total[user], total[nice], total[system], total[irq], total[softirq], total[steal]), ticks(total[irq], total[softirq]), ticks(total[nice]), nil
}

// CPUCgroup returns the cgroup process pid's CPU time is charged to, as
// /proc/<pid>/cgroup names it: its cgroup in the cgroup v1 hierarchy with
// the cpuacct controller, else its cgroup v2 one.
func CPUCgroup(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	cgroup, err := parseProcCgroup(data)
	if err != nil {
		return "", fmt.Errorf("process %d: %w", pid, err)
	}
	return cgroup, nil
}

// parseProcCgroup reads /proc/<pid>/cgroup (hierarchy-ID:controllers:path
// lines) for CPUCgroup.
func parseProcCgroup(data []byte) (string, error) {
	unified, haveUnified := "", false
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified, haveUnified = parts[2], true
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "cpuacct") {
			return parts[2], nil
		}
	}
	if !haveUnified {
		return "", errors.New("/proc/<pid>/cgroup: no cpuacct nor cgroup v2 line")
	}
	return unified, nil
}
