package cgroupdriver

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Kernel and kubelet constants for the cpu controller.
const (
	// minShares is the smallest cpu.shares value the kernel accepts; the
	// kubelet gives it to BestEffort pods and the BestEffort QoS cgroup.
	minShares = 2
	// maxShares is the largest cpu.shares value the kernel accepts.
	maxShares = 262144
	// sharesPerCPU is the cpu.shares value of one CPU.
	sharesPerCPU = 1024
	// defaultCPUPeriod is the kubelet's default CFS period, 100ms, in
	// microseconds (KubeletConfiguration cpuCFSQuotaPeriod).
	defaultCPUPeriod = 100000
	// minCPUQuota is the smallest CFS quota the kernel accepts, 1ms, in
	// microseconds.
	minCPUQuota = 1000
	// maxCPUWeight is the largest cgroup v2 cpu.weight.
	maxCPUWeight = 10000

	milliCPUPerCPU = 1000
)

// pidResource is the node allocatable resource name that limits the number
// of processes in the kubepods cgroup (the kubelet's "pid").
const pidResource v1.ResourceName = "pid"

// ResourceConfig is the set of cgroup values nodekit manages. A nil field
// (and a zero CPUQuota, CPUPeriod or Memory, which cannot be meant) leaves
// the cgroup's current value untouched. The value -1 means "no limit" for
// CPUQuota, Memory and PidsLimit. A ResourceConfig is a plain value; the
// package never keeps a pointer to one it was given.
type ResourceConfig struct {
	// CPUShares is the relative CPU weight in cgroup v1 cpu.shares units
	// [minShares, maxShares]; on cgroup v2 it is written as cpu.weight (see
	// cpuSharesToWeight).
	CPUShares *uint64
	// CPUQuota is the CFS quota in microseconds per CPUPeriod.
	CPUQuota *int64
	// CPUPeriod is the CFS period in microseconds.
	CPUPeriod *uint64
	// Memory is the memory limit in bytes.
	Memory *int64
	// PidsLimit is the maximum number of processes.
	PidsLimit *int64
}

// String returns the set fields as "name=value" pairs, for logs and errors.
func (r ResourceConfig) String() string {
	var parts []string
	add := func(name string, set bool, v string) {
		if set {
			parts = append(parts, name+"="+v)
		}
	}
	add("cpuShares", r.CPUShares != nil, fmtUint(r.CPUShares))
	add("cpuQuota", r.CPUQuota != nil, fmtInt(r.CPUQuota))
	add("cpuPeriod", r.CPUPeriod != nil, fmtUint(r.CPUPeriod))
	add("memory", r.Memory != nil, fmtInt(r.Memory))
	add("pidsLimit", r.PidsLimit != nil, fmtInt(r.PidsLimit))
	return "{" + strings.Join(parts, " ") + "}"
}

func fmtUint(p *uint64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatUint(*p, 10)
}

func fmtInt(p *int64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(*p, 10)
}

// milliCPUToShares converts a CPU request in millicores to cpu.shares as the
// kubelet does: 0 becomes minShares, and the result is clamped to
// [minShares, maxShares].
func milliCPUToShares(milliCPU int64) uint64 {
	if milliCPU <= 0 {
		return minShares
	}
	shares := milliCPU * sharesPerCPU / milliCPUPerCPU
	switch {
	case shares < minShares:
		return minShares
	case shares > maxShares:
		return maxShares
	}
	return uint64(shares)
}

// milliCPUToQuota converts a CPU limit in millicores to a CFS quota in
// microseconds for periodUsec. A limit of 0 (or less) means no quota and
// returns 0; any other quota is at least minCPUQuota.
func milliCPUToQuota(milliCPU int64, periodUsec uint64) int64 {
	if milliCPU <= 0 {
		return 0
	}
	quota := milliCPU * int64(periodUsec) / milliCPUPerCPU
	if quota < minCPUQuota {
		return minCPUQuota
	}
	return quota
}

// cpuSharesToWeight converts cgroup v1 cpu.shares to cgroup v2 cpu.weight
// with the kubelet's linear mapping of [2, 262144] onto [1, 10000].
func cpuSharesToWeight(shares uint64) uint64 {
	switch {
	case shares <= minShares:
		return 1
	case shares >= maxShares:
		return maxCPUWeight
	}
	return 1 + (shares-minShares)*(maxCPUWeight-1)/(maxShares-minShares)
}

// cpuWeightToShares is the kubelet's inverse of cpuSharesToWeight. The round
// trip is lossy: cpu.weight is about 26 times coarser than cpu.shares.
func cpuWeightToShares(weight uint64) uint64 {
	if weight <= 1 {
		return minShares
	}
	if weight >= maxCPUWeight {
		return maxShares
	}
	return (weight-1)*(maxShares-minShares)/(maxCPUWeight-1) + minShares
}

// podResourceOptions are the node settings that shape a pod's cgroup values.
type podResourceOptions struct {
	// EnforceCPULimits is KubeletConfiguration cpuCFSQuota: when false the
	// quota of pods with a CPU limit is set to -1 (unlimited).
	EnforceCPULimits bool
	// CPUPeriod is KubeletConfiguration cpuCFSQuotaPeriod in microseconds;
	// 0 means defaultCPUPeriod.
	CPUPeriod uint64
	// PodPidsLimit is KubeletConfiguration podPidsLimit; a value <= 0 sets no
	// pids limit.
	PodPidsLimit int64
}

// resourceConfigForPod returns the values of pod's own cgroup, as the
// kubelet's ResourceConfigForPod plus its pids limit:
//
//   - cpu shares from the sum of the CPU requests (pod-level resources and
//     overhead included), minShares for BestEffort pods;
//   - a CFS quota from the CPU limits when every container (or the pod level)
//     declares one, or always for Guaranteed pods (-1 when
//     EnforceCPULimits is false);
//   - a memory limit from the memory limits on the same rule;
//   - the pids limit when PodPidsLimit > 0.
//
// pod is not modified; the result is a new value.
func resourceConfigForPod(pod *v1.Pod, o podResourceOptions) ResourceConfig {
	period := o.CPUPeriod
	if period == 0 {
		period = defaultCPUPeriod
	}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})

	cpuLimitsDeclared, memoryLimitsDeclared := true, true
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Resources.Limits.Cpu().IsZero() {
				cpuLimitsDeclared = false
			}
			if list[i].Resources.Limits.Memory().IsZero() {
				memoryLimitsDeclared = false
			}
		}
	}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		if !pod.Spec.Resources.Limits.Cpu().IsZero() {
			cpuLimitsDeclared = true
		}
		if !pod.Spec.Resources.Limits.Memory().IsZero() {
			memoryLimitsDeclared = true
		}
	}

	var cpuRequest, cpuLimit, memoryLimit int64
	if q, ok := reqs[v1.ResourceCPU]; ok {
		cpuRequest = q.MilliValue()
	}
	if q, ok := limits[v1.ResourceCPU]; ok {
		cpuLimit = q.MilliValue()
	}
	if q, ok := limits[v1.ResourceMemory]; ok {
		memoryLimit = q.Value()
	}
	shares := milliCPUToShares(cpuRequest)
	quota := milliCPUToQuota(cpuLimit, period)
	if !o.EnforceCPULimits {
		quota = -1
	}

	var rc ResourceConfig
	switch PodQOS(pod) {
	case v1.PodQOSGuaranteed:
		rc.CPUShares = &shares
		rc.CPUQuota = &quota
		rc.CPUPeriod = &period
		rc.Memory = &memoryLimit
	case v1.PodQOSBurstable:
		rc.CPUShares = &shares
		if cpuLimitsDeclared {
			rc.CPUQuota = &quota
			rc.CPUPeriod = &period
		}
		if memoryLimitsDeclared {
			rc.Memory = &memoryLimit
		}
	default:
		shares := uint64(minShares)
		rc.CPUShares = &shares
	}
	if o.PodPidsLimit > 0 {
		pids := o.PodPidsLimit
		rc.PidsLimit = &pids
	}
	return rc
}

// resourceConfigForAllocatable returns the values of the kubepods cgroup for
// the node allocatable resources rl, as the kubelet enforces them: cpu
// shares from the CPU, the memory limit from the memory and the pids limit
// from pidResource. A resource missing from rl is left untouched.
func resourceConfigForAllocatable(rl v1.ResourceList) ResourceConfig {
	var rc ResourceConfig
	if q, ok := rl[v1.ResourceCPU]; ok {
		shares := milliCPUToShares(q.MilliValue())
		rc.CPUShares = &shares
	}
	if q, ok := rl[v1.ResourceMemory]; ok {
		mem := q.Value()
		rc.Memory = &mem
	}
	if q, ok := rl[pidResource]; ok {
		pids := q.Value()
		rc.PidsLimit = &pids
	}
	return rc
}

// cgroupFile is one value to write to one control file. controller names the
// cgroup v1 hierarchy ("cpu", "memory", "pids"); it is empty on cgroup v2.
type cgroupFile struct {
	controller, file, value string
}

// v1Files returns the cgroup v1 control file writes for r, in write order.
func v1Files(r ResourceConfig) []cgroupFile {
	var fs []cgroupFile
	if r.CPUShares != nil {
		fs = append(fs, cgroupFile{"cpu", "cpu.shares", strconv.FormatUint(*r.CPUShares, 10)})
	}
	if r.CPUPeriod != nil && *r.CPUPeriod != 0 {
		fs = append(fs, cgroupFile{"cpu", "cpu.cfs_period_us", strconv.FormatUint(*r.CPUPeriod, 10)})
	}
	if r.CPUQuota != nil && *r.CPUQuota != 0 {
		fs = append(fs, cgroupFile{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(limitOrMinus1(*r.CPUQuota), 10)})
	}
	if r.Memory != nil && *r.Memory != 0 {
		fs = append(fs, cgroupFile{"memory", "memory.limit_in_bytes", strconv.FormatInt(limitOrMinus1(*r.Memory), 10)})
	}
	if r.PidsLimit != nil {
		fs = append(fs, cgroupFile{"pids", "pids.max", pidsMax(*r.PidsLimit)})
	}
	return fs
}

// v2Files returns the cgroup v2 control file writes for r, in write order.
func v2Files(r ResourceConfig) []cgroupFile {
	var fs []cgroupFile
	if r.CPUShares != nil {
		fs = append(fs, cgroupFile{"", "cpu.weight", strconv.FormatUint(cpuSharesToWeight(*r.CPUShares), 10)})
	}
	quotaSet := r.CPUQuota != nil && *r.CPUQuota != 0
	periodSet := r.CPUPeriod != nil && *r.CPUPeriod != 0
	if quotaSet || periodSet {
		quota := "max"
		if quotaSet && *r.CPUQuota > 0 {
			quota = strconv.FormatInt(*r.CPUQuota, 10)
		}
		period := uint64(defaultCPUPeriod)
		if periodSet {
			period = *r.CPUPeriod
		}
		fs = append(fs, cgroupFile{"", "cpu.max", quota + " " + strconv.FormatUint(period, 10)})
	}
	if r.Memory != nil && *r.Memory != 0 {
		v := "max"
		if *r.Memory > 0 {
			v = strconv.FormatInt(*r.Memory, 10)
		}
		fs = append(fs, cgroupFile{"", "memory.max", v})
	}
	if r.PidsLimit != nil {
		fs = append(fs, cgroupFile{"", "pids.max", pidsMax(*r.PidsLimit)})
	}
	return fs
}

// limitOrMinus1 maps every negative limit to -1, the v1 "unlimited".
func limitOrMinus1(v int64) int64 {
	if v < 0 {
		return -1
	}
	return v
}

// pidsMax renders a pids limit: "max" when negative, 1 for 0 (as runc and
// systemd do, since systemd refuses 0), the number otherwise.
func pidsMax(v int64) string {
	switch {
	case v < 0:
		return "max"
	case v == 0:
		return "1"
	}
	return strconv.FormatInt(v, 10)
}

// parseLimit parses a limit file value: "max" and "-1" are -1; on cgroup v1
// the kernel reports an unlimited memory limit as the largest page-aligned
// int64, which is also returned as -1.
func parseLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return -1, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse limit %q: %w", s, err)
	}
	if v < 0 || v >= v1UnlimitedMemory {
		return -1, nil
	}
	return v, nil
}

// v1UnlimitedMemory is the smallest value cgroup v1 reports for an unlimited
// memory limit (PAGE_COUNTER_MAX pages of the largest page size rounds down
// to at least this).
const v1UnlimitedMemory = math.MaxInt64 &^ (1<<21 - 1)
