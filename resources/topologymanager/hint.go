package topologymanager

import "fmt"

// TopologyHint is a NUMA affinity a resource can be given with, and
// whether it is a preferred one (the narrowest that fits), as the
// kubelet's. A zero NUMANodeAffinity means any NUMA node.
type TopologyHint struct {
	NUMANodeAffinity BitMask
	Preferred        bool
}

// String renders the hint as the kubelet logs it.
func (h TopologyHint) String() string {
	if h.NUMANodeAffinity == 0 {
		return fmt.Sprintf("{<nil> %v}", h.Preferred)
	}
	return fmt.Sprintf("{%s %v}", h.NUMANodeAffinity, h.Preferred)
}

// numaInfo is the machine's NUMA nodes and their distances.
type numaInfo struct {
	nodes     []int
	distances map[int][]uint64
}

func (n *numaInfo) defaultAffinity() BitMask {
	m, _ := NewBitMask(n.nodes...)
	return m
}

func (n *numaInfo) narrowest(a, b BitMask) BitMask {
	if a.IsNarrowerThan(b) {
		return a
	}
	return b
}

// closest is the mask with the fewer nodes, or of as many the one whose
// nodes are closer to each other on average (then the lower).
func (n *numaInfo) closest(a, b BitMask) BitMask {
	if a.Count() != b.Count() {
		return n.narrowest(a, b)
	}
	da, db := n.averageDistance(a), n.averageDistance(b)
	if da == db {
		if a < b {
			return a
		}
		return b
	}
	if da < db {
		return a
	}
	return b
}

func (n *numaInfo) averageDistance(m BitMask) float64 {
	if m.Count() == 0 {
		return 0
	}
	var sum, count float64
	for _, a := range m.Bits() {
		for _, b := range m.Bits() {
			if d := n.distances[a]; b < len(d) {
				sum += float64(d[b])
			}
			count++
		}
	}
	return sum / count
}

// filterProvidersHints flattens the providers' hints into one list per
// resource: a provider without hints, or a resource with nil hints, has no
// preference ({any, preferred}); a resource with an empty list cannot be
// placed ({any, not preferred}).
func filterProvidersHints(providersHints []map[string][]TopologyHint) [][]TopologyHint {
	var out [][]TopologyHint
	for _, hints := range providersHints {
		if len(hints) == 0 {
			out = append(out, []TopologyHint{{0, true}})
			continue
		}
		for _, h := range hints {
			switch {
			case h == nil:
				out = append(out, []TopologyHint{{0, true}})
			case len(h) == 0:
				out = append(out, []TopologyHint{{0, false}})
			default:
				out = append(out, h)
			}
		}
	}
	return out
}

// mergePermutation ANDs one hint per resource into the default affinity;
// the result is preferred when every hint is and their affinities agree.
func mergePermutation(defaultAffinity BitMask, permutation []TopologyHint) TopologyHint {
	preferred := true
	merged := defaultAffinity
	var first BitMask
	for _, h := range permutation {
		if h.NUMANodeAffinity != 0 {
			if first == 0 {
				first = h.NUMANodeAffinity
			} else if h.NUMANodeAffinity != first {
				preferred = false
			}
			merged &= h.NUMANodeAffinity
		}
		if !h.Preferred {
			preferred = false
		}
	}
	return TopologyHint{NUMANodeAffinity: merged, Preferred: preferred}
}

// hintMerger picks the best merged hint, as the kubelet's HintMerger.
type hintMerger struct {
	numa  *numaInfo
	hints [][]TopologyHint
	// bestNonPreferredCount is the widest of the resources' narrowest
	// hints: no non-preferred merge can be narrower.
	bestNonPreferredCount int
	closest               bool
}

func newHintMerger(numa *numaInfo, hints [][]TopologyHint, closest bool) hintMerger {
	best := 0
	for _, resource := range hints {
		var narrowest BitMask
		for _, h := range resource {
			if h.NUMANodeAffinity == 0 {
				continue
			}
			if narrowest == 0 || h.NUMANodeAffinity.IsNarrowerThan(narrowest) {
				narrowest = h.NUMANodeAffinity
			}
		}
		if narrowest != 0 && narrowest.Count() > best {
			best = narrowest.Count()
		}
	}
	return hintMerger{numa: numa, hints: hints, bestNonPreferredCount: best, closest: closest}
}

func (m hintMerger) compareMasks(current, candidate *TopologyHint) *TopologyHint {
	if candidate.NUMANodeAffinity == current.NUMANodeAffinity {
		return current
	}
	var best BitMask
	if m.closest {
		best = m.numa.closest(current.NUMANodeAffinity, candidate.NUMANodeAffinity)
	} else {
		best = m.numa.narrowest(current.NUMANodeAffinity, candidate.NUMANodeAffinity)
	}
	if best == current.NUMANodeAffinity {
		return current
	}
	return candidate
}

func (m hintMerger) compare(current, candidate *TopologyHint) *TopologyHint {
	c := candidate.NUMANodeAffinity.Count()
	switch {
	case c == 0:
		return current
	case current == nil:
		return candidate
	case !current.Preferred && candidate.Preferred:
		return candidate
	case current.Preferred && !candidate.Preferred:
		return current
	case current.Preferred && candidate.Preferred:
		return m.compareMasks(current, candidate)
	}
	// Both non-preferred: the one closest to bestNonPreferredCount NUMA
	// nodes without being narrower than it, then by mask.
	cur, best := current.NUMANodeAffinity.Count(), m.bestNonPreferredCount
	switch {
	case cur > best:
		return m.compareMasks(current, candidate)
	case cur == best:
		if c != best {
			return current
		}
		return m.compareMasks(current, candidate)
	case c > best:
		return current
	case c == best:
		return candidate
	case c > cur:
		return candidate
	case c < cur:
		return current
	}
	return m.compareMasks(current, candidate)
}

func (m hintMerger) merge() TopologyHint {
	def := m.numa.defaultAffinity()
	var best *TopologyHint
	iterateHints(m.hints, func(permutation []TopologyHint) {
		merged := mergePermutation(def, permutation)
		best = m.compare(best, &merged)
	})
	if best == nil {
		return TopologyHint{NUMANodeAffinity: def}
	}
	return *best
}

// iterateHints calls fn with every choice of one hint per resource.
func iterateHints(all [][]TopologyHint, fn func([]TopologyHint)) {
	var iterate func(i int, acc []TopologyHint)
	iterate = func(i int, acc []TopologyHint) {
		if i == len(all) {
			fn(acc)
			return
		}
		for _, h := range all[i] {
			iterate(i+1, append(acc, h))
		}
	}
	iterate(0, nil)
}
