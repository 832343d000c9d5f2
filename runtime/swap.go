package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The swap behaviours of memorySwap.swapBehavior, the kubelet's.
const (
	// NoSwap: containers do not swap (memory.swap.max 0 on cgroup v2; on
	// v1 the memory+swap limit is the memory limit). The default.
	NoSwap = "NoSwap"
	// LimitedSwap: the containers of Burstable pods that are not critical
	// and whose memory request differs from their limit may swap in
	// proportion to their request (cgroup v2 only); all others NoSwap.
	LimitedSwap = "LimitedSwap"
)

// cgroup2MaxSwap is the cgroup v2 file the swap limit goes to through the
// CRI's unified settings.
const cgroup2MaxSwap = "memory.swap.max"

// SwapOptions are the containers' swap settings (PodManagerOptions.Swap),
// applied as the kubelet's configureContainerSwapResources: nothing when
// the node has no swap cgroup controller, else NoSwap or LimitedSwap.
type SwapOptions struct {
	// Behavior is NoSwap ("" too) or LimitedSwap.
	Behavior string
	// Capacity is the node's swap in bytes, shared by LimitedSwap's
	// containers in proportion to their memory requests. Zero means
	// SwapTotal from /proc/meminfo.
	Capacity int64
	// Critical reports the pods that never swap (the kubelet's
	// IsCriticalPod: static, mirror and system-critical pods;
	// eviction.IsCriticalPod fits). Required for LimitedSwap.
	Critical func(*v1.Pod) bool
	// ControllerAvailable reports whether the kernel's swap controller is
	// there; nil checks the agent's own cgroup (memory.swap.max on cgroup
	// v2, memory.memsw.limit_in_bytes on v1), as the kubelet.
	ControllerAvailable func(cgroupV2 bool) bool
}

// validate checks o's behaviour.
func (o *SwapOptions) validate() error {
	switch o.Behavior {
	case "", NoSwap:
	case LimitedSwap:
		if o.Critical == nil {
			return errors.New("pod manager: swap behavior LimitedSwap needs SwapOptions.Critical")
		}
	default:
		return fmt.Errorf("invalid configuration: memorySwap.swapBehavior %q must be one of: \"\", %q or %q", o.Behavior, LimitedSwap, NoSwap)
	}
	return nil
}

// swapFacts reads what configureSwap needs of the node: whether the swap
// controller is there and the swap capacity.
func (o *SwapOptions) swapFacts(cgroupV2 bool) (available bool, capacity int64, err error) {
	check := o.ControllerAvailable
	if check == nil {
		check = swapControllerAvailable
	}
	if !check(cgroupV2) {
		return false, 0, nil
	}
	capacity = o.Capacity
	if capacity == 0 && o.Behavior == LimitedSwap {
		if capacity, err = readMeminfo("/proc/meminfo", "SwapTotal"); err != nil {
			return false, 0, fmt.Errorf("node swap capacity: %w", err)
		}
	}
	return true, capacity, nil
}

// swapControllerAvailable is the kubelet's checkSwapControllerAvailability:
// the swap file of the agent's own memory cgroup exists.
func swapControllerAvailable(cgroupV2 bool) bool {
	p := "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"
	if cgroupV2 {
		data, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return false
		}
		self := ""
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "0::"); ok {
				self = rest
			}
		}
		p = filepath.Join("/sys/fs/cgroup", self, cgroup2MaxSwap)
	}
	_, err := os.Stat(p)
	return err == nil
}

// configureSwap sets r's swap limit for c of pod, as the kubelet's
// configureContainerSwapResources.
func (m *PodManager) configureSwap(r *runtimeapi.LinuxContainerResources, pod *v1.Pod, c *v1.Container, facts machineFacts) {
	if m.opts.Swap == nil || !facts.swapController {
		return
	}
	if !facts.cgroupV2 {
		// NoSwap on v1: memory+swap no more than memory (ignored without
		// a memory limit).
		r.MemorySwapLimitInBytes = r.MemoryLimitInBytes
		return
	}
	swap := int64(0)
	if m.limitedSwap(pod, c) {
		// (request / node memory) × node swap; a request above the
		// node's memory gets none, as the kubelet's.
		if req := c.Resources.Requests.Memory().Value(); facts.memoryCapacity > 0 && req <= facts.memoryCapacity {
			swap = int64(float64(req) / float64(facts.memoryCapacity) * float64(facts.swapCapacity))
		}
	}
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[cgroup2MaxSwap] = strconv.FormatInt(swap, 10)
}

// limitedSwap reports whether c of pod may swap under LimitedSwap (the
// kubelet's GetContainerSwapBehavior): a Burstable pod that is not
// critical, the container with a memory request or limit, the two
// different.
func (m *PodManager) limitedSwap(pod *v1.Pod, c *v1.Container) bool {
	if m.opts.Swap.Behavior != LimitedSwap || m.opts.Swap.Critical(pod) || m.podQOS(pod) != v1.PodQOSBurstable {
		return false
	}
	req, limit := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if req.IsZero() && limit.IsZero() {
		return false
	}
	return req.Cmp(*limit) != 0
}

// readMeminfo returns the field (MemTotal, SwapTotal) of a meminfo file,
// in bytes.
func readMeminfo(path, field string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == field+":" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s in %s: %w", field, path, err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in %s", field, path)
}
