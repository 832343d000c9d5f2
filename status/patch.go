package status

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// nodePatchMeta is the strategic merge patch metadata of v1.Node, looked up
// once instead of by reflection on every patch.
var nodePatchMeta = func() strategicpatch.LookupPatchMeta {
	meta, err := strategicpatch.NewPatchMetaFromStruct(v1.Node{})
	if err != nil {
		panic(fmt.Sprintf("strategic merge patch metadata of v1.Node: %v", err))
	}
	return meta
}()

// nodeChanged reports whether updated differs from original in what the
// reporter writes: labels, annotations, or the status with the conditions'
// heartbeat times ignored (the kubelet's nodeStatusHasChanged).
func nodeChanged(original, updated *v1.Node) bool {
	if !maps.Equal(original.Labels, updated.Labels) || !maps.Equal(original.Annotations, updated.Annotations) {
		return true
	}
	if conditionsChanged(original.Status.Conditions, updated.Status.Conditions) {
		return true
	}
	a, b := original.Status, updated.Status
	a.Conditions, b.Conditions = nil, nil
	return !apiequality.Semantic.DeepEqual(a, b)
}

// conditionsChanged compares two condition lists by type, ignoring order and
// LastHeartbeatTime.
func conditionsChanged(a, b []v1.NodeCondition) bool {
	if len(a) != len(b) {
		return true
	}
	sa, sb := sortedConditions(a), sortedConditions(b)
	for i := range sa {
		if !apiequality.Semantic.DeepEqual(sa[i], sb[i]) {
			return true
		}
	}
	return false
}

func sortedConditions(in []v1.NodeCondition) []v1.NodeCondition {
	out := slices.Clone(in)
	for i := range out {
		out[i].LastHeartbeatTime = metav1.Time{}
	}
	slices.SortStableFunc(out, func(x, y v1.NodeCondition) int { return cmp.Compare(x.Type, y.Type) })
	return out
}

// statusPatch returns the strategic merge patch that turns original into
// updated, for the status subresource: a two-way patch of what this agent
// changed, so conditions and fields other writers own are left alone. The
// spec is never part of it. status.addresses is declared a merge list keyed
// by type although an address list must be replaced whole (two InternalIPs
// share a type), so a changed list is sent with a $patch: replace directive.
// Neither node is modified.
func statusPatch(original, updated *v1.Node) ([]byte, error) {
	oldJSON, err := json.Marshal(original)
	if err != nil {
		return nil, fmt.Errorf("encode node %s as read: %w", original.Name, err)
	}
	diff := *updated
	diff.Spec = original.Spec
	replaceAddresses := len(original.Status.Addresses) > 0 &&
		!apiequality.Semantic.DeepEqual(original.Status.Addresses, updated.Status.Addresses)
	if replaceAddresses {
		diff.Status.Addresses = original.Status.Addresses
	}
	newJSON, err := json.Marshal(&diff)
	if err != nil {
		return nil, fmt.Errorf("encode updated node %s: %w", original.Name, err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatchUsingLookupPatchMeta(oldJSON, newJSON, nodePatchMeta)
	if err != nil {
		return nil, fmt.Errorf("compute status patch of node %s: %w", original.Name, err)
	}
	if !replaceAddresses {
		return patch, nil
	}
	patch, err = withReplacedAddresses(patch, updated.Status.Addresses)
	if err != nil {
		return nil, fmt.Errorf("compute status patch of node %s: %w", original.Name, err)
	}
	return patch, nil
}

// withReplacedAddresses sets status.addresses in a strategic merge patch to
// addresses followed by a {"$patch": "replace"} directive.
func withReplacedAddresses(patch []byte, addresses []v1.NodeAddress) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(patch, &top); err != nil {
		return nil, err
	}
	status := map[string]json.RawMessage{}
	if raw, ok := top["status"]; ok {
		if err := json.Unmarshal(raw, &status); err != nil {
			return nil, err
		}
	}
	list := make([]any, 0, len(addresses)+1)
	for _, a := range addresses {
		list = append(list, a)
	}
	list = append(list, map[string]string{"$patch": "replace"})
	raw, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	status["addresses"] = raw
	if top["status"], err = json.Marshal(status); err != nil {
		return nil, err
	}
	return json.Marshal(top)
}
