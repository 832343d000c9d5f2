package topologymanager

import (
	"fmt"
	"math/bits"
	"strconv"
)

// BitMask is a set of NUMA node IDs (0-63), as the kubelet's bitmask. The
// zero BitMask in a TopologyHint means the hint has no NUMA preference
// (the kubelet's nil affinity).
type BitMask uint64

// NewBitMask returns the mask of the given NUMA node IDs.
func NewBitMask(ids ...int) (BitMask, error) {
	var m BitMask
	for _, i := range ids {
		if i < 0 || i >= 64 {
			return 0, fmt.Errorf("bit number must be in range 0-63")
		}
		m |= 1 << uint(i)
	}
	return m, nil
}

// Count is the number of NUMA nodes in m.
func (m BitMask) Count() int { return bits.OnesCount64(uint64(m)) }

// IsSet says whether NUMA node id is in m.
func (m BitMask) IsSet(id int) bool { return id >= 0 && id < 64 && m&(1<<uint(id)) != 0 }

// Bits returns the NUMA node IDs in m, ascending.
func (m BitMask) Bits() []int {
	var out []int
	for i := 0; i < 64; i++ {
		if m.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}

// IsNarrowerThan says whether m has fewer NUMA nodes than o, or as many
// and lower ones, as the kubelet orders them.
func (m BitMask) IsNarrowerThan(o BitMask) bool {
	if m.Count() == o.Count() {
		return m < o
	}
	return m.Count() < o.Count()
}

// String is the kubelet's rendering: the binary digits, in pairs.
func (m BitMask) String() string {
	const grouping = 2
	for shift := 64 - grouping; shift > 0; shift -= grouping {
		if m > 1<<uint(shift) {
			return fmt.Sprintf("%0"+strconv.Itoa(shift+grouping)+"b", uint64(m))
		}
	}
	return fmt.Sprintf("%0"+strconv.Itoa(grouping)+"b", uint64(m))
}

// IterateBitMasks calls fn with every non-empty subset of ids: the single
// nodes first, then the pairs, and so on.
func IterateBitMasks(ids []int, fn func(BitMask)) {
	var iterate func(ids []int, acc BitMask, left int)
	iterate = func(ids []int, acc BitMask, left int) {
		if left == 0 {
			fn(acc)
			return
		}
		for i := range ids {
			iterate(ids[i+1:], acc|1<<uint(ids[i]), left-1)
		}
	}
	for size := 1; size <= len(ids); size++ {
		iterate(ids, 0, size)
	}
}
