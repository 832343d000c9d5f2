package topologymanager

import (
	"fmt"
	"strconv"
)

// The policies (kubelet topologyManagerPolicy) and scopes
// (topologyManagerScope).
const (
	PolicyNone           = "none"
	PolicyBestEffort     = "best-effort"
	PolicyRestricted     = "restricted"
	PolicySingleNumaNode = "single-numa-node"

	ScopeContainer = "container"
	ScopePod       = "pod"
)

// The policy options (topologyManagerPolicyOptions), both GA in 1.37.
const (
	// OptionPreferClosestNUMANodes ("true") makes best-effort and
	// restricted prefer, among equally wide NUMA affinities, the one whose
	// nodes are closest to each other.
	OptionPreferClosestNUMANodes = "prefer-closest-numa-nodes"
	// OptionMaxAllowableNUMANodes raises the number of NUMA nodes (default
	// 8) above which a policy other than none refuses to start.
	OptionMaxAllowableNUMANodes = "max-allowable-numa-nodes"

	defaultMaxAllowableNUMANodes = 8
)

type policyOptions struct {
	preferClosest bool
	maxNUMANodes  int
}

// parsePolicyOptions checks the options with the kubelet's messages.
func parsePolicyOptions(opts map[string]string) (policyOptions, error) {
	out := policyOptions{maxNUMANodes: defaultMaxAllowableNUMANodes}
	for name, value := range opts {
		switch name {
		case OptionPreferClosestNUMANodes:
			v, err := strconv.ParseBool(value)
			if err != nil {
				return out, fmt.Errorf("bad value for option %q: %w", name, err)
			}
			out.preferClosest = v
		case OptionMaxAllowableNUMANodes:
			v, err := strconv.Atoi(value)
			if err != nil {
				return out, fmt.Errorf("unable to convert policy option to integer %q: %w", name, err)
			}
			if v < defaultMaxAllowableNUMANodes {
				return out, fmt.Errorf("the minimum value of %q should not be less than %v", name, defaultMaxAllowableNUMANodes)
			}
			out.maxNUMANodes = v
		default:
			return out, fmt.Errorf("unknown Topology Manager Policy option: %q", name)
		}
	}
	return out, nil
}

// merge merges the providers' hints under policy: the best hint and
// whether the pod (or container) can be admitted with it.
func merge(policy string, numa *numaInfo, opts policyOptions, providersHints []map[string][]TopologyHint) (TopologyHint, bool) {
	filtered := filterProvidersHints(providersHints)
	if policy == PolicySingleNumaNode {
		filtered = singleNUMAHints(filtered)
	}
	best := newHintMerger(numa, filtered, opts.preferClosest && policy != PolicySingleNumaNode).merge()
	switch policy {
	case PolicyBestEffort:
		return best, true
	case PolicySingleNumaNode:
		if best.NUMANodeAffinity == numa.defaultAffinity() {
			best.NUMANodeAffinity = 0
		}
	}
	return best, best.Preferred
}

// singleNUMAHints keeps the preferred hints of at most one NUMA node.
func singleNUMAHints(all [][]TopologyHint) [][]TopologyHint {
	out := make([][]TopologyHint, 0, len(all))
	for _, resource := range all {
		var kept []TopologyHint
		for _, h := range resource {
			if h.Preferred && h.NUMANodeAffinity.Count() <= 1 {
				kept = append(kept, h)
			}
		}
		out = append(out, kept)
	}
	return out
}
