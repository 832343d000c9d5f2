package status

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/machine"
)

// defaultMaxPods is the kubelet's default maxPods.
const defaultMaxPods = 110

// machineInfoOptions configures machineInfo.
type machineInfoOptions struct {
	// Machine returns the host's machine; required. Typically
	// machine.Cached(func() (*machine.Info, error) { return machine.Read(roots) }).
	Machine machine.Func
	// MaxPods is the pods capacity; default 110.
	MaxPods int32
	// PodsPerCore, when positive, caps pods at PodsPerCore × cores.
	PodsPerCore int32
	// KubeReserved and SystemReserved are subtracted from capacity to give
	// allocatable (kubelet --kube-reserved, --system-reserved).
	KubeReserved, SystemReserved v1.ResourceList
	// EvictionHard is the kubelet's evictionHard map, e.g.
	// {"memory.available": "100Mi", "nodefs.available": "10%"}. Its
	// memory.available and nodefs.available thresholds are also subtracted
	// from allocatable memory and ephemeral-storage.
	EvictionHard map[string]string
	// NoLocalStorageCapacityIsolation leaves ephemeral-storage out of the
	// capacity (kubelet localStorageCapacityIsolation=false).
	NoLocalStorageCapacityIsolation bool
	// Recorder, when set, receives a Warning "Rebooted" event when the boot
	// ID differs from the one on the Node.
	Recorder record.EventRecorder
}

// evictionSignals are the kubelet's eviction signals; the value says which
// resource a hard threshold on it reserves ("" for none).
var evictionSignals = map[string]v1.ResourceName{
	"memory.available":            v1.ResourceMemory,
	"nodefs.available":            v1.ResourceEphemeralStorage,
	"nodefs.inodesFree":           "",
	"imagefs.available":           "",
	"imagefs.inodesFree":          "",
	"containerfs.available":       "",
	"containerfs.inodesFree":      "",
	"allocatableMemory.available": "",
	"pid.available":               "",
}

// threshold is a hard eviction threshold that reserves part of a resource:
// an absolute quantity, or a fraction of the capacity (float32, as the
// kubelet parses it, so allocatable matches the kubelet's to the byte).
type threshold struct {
	quantity *resource.Quantity
	fraction float32
}

// parseEvictionHard keeps the thresholds that reserve a resource, checking
// every statement as the kubelet does.
func parseEvictionHard(statements map[string]string) (map[v1.ResourceName]threshold, error) {
	out := map[v1.ResourceName]threshold{}
	for signal, value := range statements {
		res, known := evictionSignals[signal]
		if !known {
			return nil, fmt.Errorf("eviction threshold %s=%q: unknown signal", signal, value)
		}
		var t threshold
		if pct, ok := strings.CutSuffix(value, "%"); ok {
			if value == "0%" || value == "100%" {
				continue
			}
			f, err := strconv.ParseFloat(pct, 32)
			if err != nil {
				return nil, fmt.Errorf("eviction threshold %s=%q: %w", signal, value, err)
			}
			t.fraction = float32(f) / 100
			if t.fraction < 0 || t.fraction > 1 || math.IsNaN(f) {
				return nil, fmt.Errorf("eviction threshold %s=%q: percentage must be between 0%% and 100%%", signal, value)
			}
		} else {
			q, err := resource.ParseQuantity(value)
			if err != nil {
				return nil, fmt.Errorf("eviction threshold %s=%q: %w", signal, value, err)
			}
			if q.Sign() <= 0 {
				// The kubelet's words, as the eviction manager's.
				return nil, fmt.Errorf("eviction threshold %s must be positive: %s", signal, &q)
			}
			t.quantity = &q
		}
		if res != "" {
			out[res] = t
		}
	}
	return out, nil
}

// reservation returns how much of capacity c is reserved by t.
func (t threshold) reservation(c resource.Quantity) resource.Quantity {
	if t.quantity != nil {
		return t.quantity.DeepCopy()
	}
	return *resource.NewQuantity(int64(float64(c.Value())*float64(t.fraction)), resource.BinarySI)
}

// hugePageResourceName is the resource name of a huge page size,
// e.g. hugepages-2Mi.
func hugePageResourceName(pageSize int64) v1.ResourceName {
	return v1.ResourceName(v1.ResourceHugePagesPrefix + resource.NewQuantity(pageSize, resource.BinarySI).String())
}

// isExtendedResourceName mirrors the API's rule: a qualified name outside
// the kubernetes.io domain that is not a quota "requests." name.
func isExtendedResourceName(name v1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/") && !strings.HasPrefix(s, "requests.")
}

// machineInfo returns a Setter for nodeInfo.machineID / systemUUID / bootID /
// swap / runningInUserNamespace, capacity and allocatable, as the kubelet
// computes them: cpu (cores), memory, hugepages-<size> (every size, also
// empty ones), ephemeral-storage (the root directory's filesystem) and pods
// (MaxPods, or min(PodsPerCore × cores, MaxPods)); capacity keys it does not
// own (e.g. extended resources set by an earlier setter) are kept.
// Allocatable is capacity − KubeReserved − SystemReserved − the hard eviction
// threshold, clamped at 0, and every huge page size's capacity is also taken
// from allocatable memory. When Machine fails, cpu and memory are reported 0
// and pods MaxPods, and the error is returned.
func machineInfo(opts machineInfoOptions) (Setter, error) {
	if opts.Machine == nil {
		return nil, errors.New("machine info: Machine is required")
	}
	if opts.MaxPods == 0 {
		opts.MaxPods = defaultMaxPods
	}
	if opts.MaxPods < 0 || opts.PodsPerCore < 0 {
		return nil, fmt.Errorf("machine info: maxPods (%d) and podsPerCore (%d) must not be negative", opts.MaxPods, opts.PodsPerCore)
	}
	for _, list := range []v1.ResourceList{opts.KubeReserved, opts.SystemReserved} {
		for name, q := range list {
			if q.Sign() < 0 {
				return nil, fmt.Errorf("machine info: reserved %s %s is negative", name, q.String())
			}
		}
	}
	eviction, err := parseEvictionHard(opts.EvictionHard)
	if err != nil {
		return nil, fmt.Errorf("machine info: %w", err)
	}
	rebootRecorded := false

	return func(ctx context.Context, node *v1.Node) error {
		if node.Status.Capacity == nil {
			node.Status.Capacity = v1.ResourceList{}
		}
		capacity := node.Status.Capacity
		m, machineErr := opts.Machine()
		if machineErr != nil {
			capacity[v1.ResourceCPU] = *resource.NewMilliQuantity(0, resource.DecimalSI)
			capacity[v1.ResourceMemory] = resource.MustParse("0Gi")
			capacity[v1.ResourcePods] = *resource.NewQuantity(int64(opts.MaxPods), resource.DecimalSI)
		} else {
			info := &node.Status.NodeInfo
			info.MachineID = m.MachineID
			info.SystemUUID = m.SystemUUID
			if info.BootID != "" && info.BootID != m.BootID && !rebootRecorded && !IsDryRun(ctx) {
				rebootRecorded = true
				if opts.Recorder != nil {
					opts.Recorder.Eventf(nodeRef(node), v1.EventTypeWarning, eventNodeRebooted,
						"Node %s has been rebooted, boot id: %s", node.Name, m.BootID)
				}
				klog.FromContext(ctx).Info("Node has been rebooted", "node", klog.KObj(node), "bootID", m.BootID, "previousBootID", info.BootID)
			}
			info.BootID = m.BootID
			if swap := m.SwapCapacity; swap != 0 {
				info.Swap = &v1.NodeSwapStatus{Capacity: &swap}
			} else {
				info.Swap = nil
			}
			inUserNS := m.RunningInUserNamespace
			info.RunningInUserNamespace = &inUserNS

			capacity[v1.ResourceCPU] = *resource.NewMilliQuantity(int64(m.NumCores)*1000, resource.DecimalSI)
			capacity[v1.ResourceMemory] = *resource.NewQuantity(m.MemoryCapacity, resource.BinarySI)
			for _, hp := range m.HugePages {
				capacity[hugePageResourceName(hp.PageSize)] = *resource.NewQuantity(hp.PageSize*hp.NumPages, resource.BinarySI)
			}
			pods := int64(opts.MaxPods)
			if opts.PodsPerCore > 0 {
				pods = min(int64(m.NumCores)*int64(opts.PodsPerCore), pods)
			}
			capacity[v1.ResourcePods] = *resource.NewQuantity(pods, resource.DecimalSI)
			if !opts.NoLocalStorageCapacityIsolation {
				capacity[v1.ResourceEphemeralStorage] = *resource.NewQuantity(m.EphemeralStorageCapacity, resource.DecimalSI)
			}
		}

		if node.Status.Allocatable == nil {
			node.Status.Allocatable = v1.ResourceList{}
		}
		allocatable := node.Status.Allocatable
		for name := range allocatable {
			if _, ok := capacity[name]; !ok && isExtendedResourceName(name) {
				delete(allocatable, name)
			}
		}
		for name, c := range capacity {
			v := c.DeepCopy()
			if q, ok := opts.KubeReserved[name]; ok {
				v.Sub(q)
			}
			if q, ok := opts.SystemReserved[name]; ok {
				v.Sub(q)
			}
			if t, ok := eviction[name]; ok {
				v.Sub(t.reservation(c))
			}
			if v.Sign() < 0 {
				v.Set(0)
			}
			allocatable[name] = v
		}
		hugePageNames := make([]string, 0, 2)
		for name := range capacity {
			if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
				hugePageNames = append(hugePageNames, string(name))
			}
		}
		sort.Strings(hugePageNames)
		for _, name := range hugePageNames {
			mem := allocatable[v1.ResourceMemory]
			mem.Sub(capacity[v1.ResourceName(name)])
			if mem.Sign() < 0 {
				mem.Set(0)
			}
			allocatable[v1.ResourceMemory] = mem
		}
		if machineErr != nil {
			return fmt.Errorf("read machine info of node %s: %w", node.Name, machineErr)
		}
		return nil
	}, nil
}
