package eviction

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// NodeAllocatableEnforcementKey is the enforceNodeAllocatable entry ("pods")
// that makes ParseThresholds add an allocatableMemory.available threshold
// for every hard memory.available one, as the kubelet does.
const NodeAllocatableEnforcementKey = "pods"

// DefaultHard returns the kubelet's default hard eviction thresholds on
// Linux (v1.37, pkg/kubelet/eviction/defaults_linux.go): memory.available<100Mi,
// nodefs.available<10%, nodefs.inodesFree<5%, imagefs.available<15%,
// imagefs.inodesFree<5%. The caller owns the returned map.
func DefaultHard() map[string]string {
	return map[string]string{
		SignalMemoryAvailable:   "100Mi",
		SignalNodeFsAvailable:   "10%",
		SignalNodeFsInodesFree:  "5%",
		SignalImageFsAvailable:  "15%",
		SignalImageFsInodesFree: "5%",
	}
}

// ThresholdValue is an amount of a signal: a Quantity, or when Quantity is
// nil a Percentage (0..1) of the signal's capacity.
type ThresholdValue struct {
	Quantity   *resource.Quantity
	Percentage float32
}

// Amount is the value in the signal's unit (bytes, inodes, PIDs) for a
// signal whose capacity is capacity. A percentage rounds down, as the
// kubelet's.
func (v ThresholdValue) Amount(capacity int64) int64 {
	if v.Quantity != nil {
		return v.Quantity.Value()
	}
	return int64(float64(capacity) * float64(v.Percentage))
}

// quantity is Amount as the kubelet prints it in eviction messages: the
// configured quantity as written, or the percentage's amount in binary SI.
func (v ThresholdValue) quantity(capacity int64) resource.Quantity {
	if v.Quantity != nil {
		return v.Quantity.DeepCopy()
	}
	return *resource.NewQuantity(v.Amount(capacity), resource.BinarySI)
}

// String prints the value as configured ("100Mi", "10%").
func (v ThresholdValue) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(float64(v.Percentage)*100, 'g', 6, 64) + "%"
}

// Threshold is one eviction threshold: the signal is met when its available
// amount is less than Value. It is hard when GracePeriod is zero (evict at
// once, pods get 1 s to stop) and soft otherwise (the signal must stay met
// for GracePeriod). After eviction starts, the signal must recover to Value
// plus MinReclaim before the threshold counts as resolved.
type Threshold struct {
	Signal      string
	Value       ThresholdValue
	GracePeriod time.Duration
	MinReclaim  *ThresholdValue
}

// Hard reports whether t is a hard threshold (no grace period).
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// String describes t for logs.
func (t Threshold) String() string {
	s := t.Signal + "<" + t.Value.String()
	if t.GracePeriod != 0 {
		s += " for " + t.GracePeriod.String()
	}
	if t.MinReclaim != nil {
		s += " reclaim " + t.MinReclaim.String()
	}
	return s
}

// ThresholdConfig is the eviction part of a KubeletConfiguration, as its
// fields are spelled there.
type ThresholdConfig struct {
	// Hard is evictionHard ("memory.available": "100Mi" or "10%"). When
	// nil, DefaultHard applies. When set, signals it does not name have no
	// hard threshold, unless MergeDefaultHard, as the kubelet.
	Hard map[string]string
	// Soft is evictionSoft; every signal in it needs a SoftGracePeriod.
	Soft map[string]string
	// SoftGracePeriod is evictionSoftGracePeriod ("memory.available": "1m30s").
	SoftGracePeriod map[string]string
	// MinimumReclaim is evictionMinimumReclaim ("imagefs.available": "2Gi"
	// or "5%"); it applies to the signal's hard and soft thresholds.
	MinimumReclaim map[string]string
	// MergeDefaultHard is mergeDefaultEvictionSettings: fill the signals
	// Hard does not name from DefaultHard.
	MergeDefaultHard bool
	// EnforceNodeAllocatable is enforceNodeAllocatable; when it holds
	// "pods", every hard memory.available threshold gets an
	// allocatableMemory.available twin.
	EnforceNodeAllocatable []string
}

// ParseThresholds turns cfg into thresholds the way the kubelet's
// ParseThresholdConfig does, with its validation and error texts: an
// unknown signal ("unsupported eviction signal x"), a soft threshold without
// a grace period, a percentage outside 0..100 %, a threshold that is not
// positive, a negative grace period or minimum reclaim are errors; "0%" and
// "100%" thresholds are ignored. extraSignals are the names of signals an
// embedder adds (Options.Signals), accepted besides the built-in ones.
//
// The result lists hard thresholds then soft ones, each by signal name, then
// the allocatable ones; maps are read in sorted order so the first error
// reported is always the same.
func ParseThresholds(cfg ThresholdConfig, extraSignals ...string) ([]Threshold, error) {
	valid := func(s string) bool { return isBuiltinSignal(s) || slices.Contains(extraSignals, s) }
	hardCfg := cfg.Hard
	if hardCfg == nil {
		hardCfg = DefaultHard()
	} else if cfg.MergeDefaultHard {
		merged := DefaultHard()
		for k, v := range cfg.Hard {
			merged[k] = v
		}
		hardCfg = merged
	}
	hard, err := parseStatements(hardCfg, valid)
	if err != nil {
		return nil, err
	}
	soft, err := parseStatements(cfg.Soft, valid)
	if err != nil {
		return nil, err
	}
	grace, err := parseGracePeriods(cfg.SoftGracePeriod, valid)
	if err != nil {
		return nil, err
	}
	reclaim, err := parseMinimumReclaims(cfg.MinimumReclaim, valid)
	if err != nil {
		return nil, err
	}
	for i := range soft {
		period, ok := grace[soft[i].Signal]
		if !ok {
			return nil, fmt.Errorf("grace period must be specified for the soft eviction threshold %v", soft[i].Signal)
		}
		soft[i].GracePeriod = period
	}
	out := append(hard, soft...)
	for i := range out {
		if r, ok := reclaim[out[i].Signal]; ok {
			out[i].MinReclaim = &r
		}
	}
	if slices.Contains(cfg.EnforceNodeAllocatable, NodeAllocatableEnforcementKey) {
		for _, t := range out {
			if t.Signal == SignalMemoryAvailable && t.Hard() {
				out = append(out, Threshold{Signal: SignalAllocatableMemoryAvailable, Value: t.Value, MinReclaim: t.MinReclaim})
			}
		}
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func parseStatements(statements map[string]string, valid func(string) bool) ([]Threshold, error) {
	var out []Threshold
	for _, signal := range sortedKeys(statements) {
		t, err := parseStatement(signal, statements[signal], valid)
		if err != nil {
			return nil, err
		}
		if t != nil {
			out = append(out, *t)
		}
	}
	return out, nil
}

func parseStatement(signal, val string, valid func(string) bool) (*Threshold, error) {
	if !valid(signal) {
		return nil, fmt.Errorf("unsupported eviction signal %v", signal)
	}
	if strings.HasSuffix(val, "%") {
		if val == "0%" || val == "100%" {
			return nil, nil
		}
		p, err := parsePercentage(val)
		if err != nil {
			return nil, err
		}
		if p < 0 {
			return nil, fmt.Errorf("eviction percentage threshold %v must be >= 0%%: %s", signal, val)
		}
		if p > 1 {
			return nil, fmt.Errorf("eviction percentage threshold %v must be <= 100%%: %s", signal, val)
		}
		return &Threshold{Signal: signal, Value: ThresholdValue{Percentage: p}}, nil
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return nil, err
	}
	if q.Sign() <= 0 {
		return nil, fmt.Errorf("eviction threshold %v must be positive: %s", signal, &q)
	}
	return &Threshold{Signal: signal, Value: ThresholdValue{Quantity: &q}}, nil
}

func parsePercentage(val string) (float32, error) {
	v, err := strconv.ParseFloat(strings.TrimRight(val, "%"), 32)
	if err != nil {
		return 0, err
	}
	return float32(v) / 100, nil
}

func parseGracePeriods(statements map[string]string, valid func(string) bool) (map[string]time.Duration, error) {
	out := make(map[string]time.Duration, len(statements))
	for _, signal := range sortedKeys(statements) {
		if !valid(signal) {
			return nil, fmt.Errorf("unsupported eviction signal %v", signal)
		}
		val := statements[signal]
		d, err := time.ParseDuration(val)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("invalid eviction grace period specified: %v, must be a positive value", val)
		}
		out[signal] = d
	}
	return out, nil
}

func parseMinimumReclaims(statements map[string]string, valid func(string) bool) (map[string]ThresholdValue, error) {
	out := make(map[string]ThresholdValue, len(statements))
	for _, signal := range sortedKeys(statements) {
		if !valid(signal) {
			return nil, fmt.Errorf("unsupported eviction signal %v", signal)
		}
		val := statements[signal]
		if strings.HasSuffix(val, "%") {
			p, err := parsePercentage(val)
			if err != nil {
				return nil, err
			}
			if p <= 0 {
				return nil, fmt.Errorf("eviction percentage minimum reclaim %v must be positive: %s", signal, val)
			}
			out[signal] = ThresholdValue{Percentage: p}
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, err
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("negative eviction minimum reclaim specified for %v", signal)
		}
		out[signal] = ThresholdValue{Quantity: &q}
	}
	return out, nil
}

// withContainerFs returns thresholds with the containerfs.* thresholds the
// kubelet derives from the disk layout: containerfs follows nodefs when
// there is one filesystem or when writable layers are split from images,
// and imagefs when images and writable layers share a dedicated filesystem.
// containerfs.* thresholds in the configuration are replaced (the kubelet
// ignores them with a warning); replaced reports whether there were any.
func withContainerFs(thresholds []Threshold, layout DiskLayout) (out []Threshold, replaced bool) {
	if !layout.DedicatedImageFs && layout.SplitContainerFs {
		// Writable layers apart from images while images share nodefs: the
		// kubelet derives nothing and keeps what was configured.
		return thresholds, false
	}
	follow := map[string]string{
		SignalContainerFsAvailable:  SignalNodeFsAvailable,
		SignalContainerFsInodesFree: SignalNodeFsInodesFree,
	}
	if layout.DedicatedImageFs && !layout.SplitContainerFs {
		follow[SignalContainerFsAvailable] = SignalImageFsAvailable
		follow[SignalContainerFsInodesFree] = SignalImageFsInodesFree
	}
	out = make([]Threshold, 0, len(thresholds)+4)
	for _, t := range thresholds {
		if _, ok := follow[t.Signal]; ok {
			replaced = true
			continue
		}
		out = append(out, t)
	}
	n := len(out)
	for _, cfs := range []string{SignalContainerFsAvailable, SignalContainerFsInodesFree} {
		for _, t := range out[:n] {
			if t.Signal == follow[cfs] {
				t.Signal = cfs
				out = append(out, t)
			}
		}
	}
	return out, replaced
}
