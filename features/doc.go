// Package features holds a node's feature gates: the kubelet v1.37's gates
// (k8s.io/kubernetes pkg/features, with their defaults, stages, locks and
// dependencies; kubelet_gates.go is generated from the kubelet's and
// e2e/kubeletparity checks it), validated and set from a
// KubeletConfiguration's featureGates with k8s.io/component-base's
// featuregate, as the kubelet does at start.
//
// There is no process-wide gate: the agent builds one *Gates from its
// configuration and passes it in each module's options (a nil *Gates is
// the defaults), so two agents in one process may run with different
// gates. Implemented lists the gates nodekit acts on; Unimplemented the
// ones a configuration sets to no effect.
package features
