// Package nodekit is a library for building Kubernetes node agents: the
// kubelet, reimplemented as composable Go modules wired by go.uber.org/fx.
//
// Each concern lives in its own package with a small interface, a plain
// constructor and an fx option (Module):
//
//   - lease: the node Lease heartbeat (kube-node-lease/<node>).
//   - status: node registration, node status setters and the reporter.
//   - runtime: the CRI connection to containerd or CRI-O; runtime/fakecri is
//     an in-process CRI server for tests and simulation.
//   - cgroupdriver: the cgroupfs and systemd drivers and the QoS and pod
//     cgroup hierarchy.
//   - agent: the composition root: Config (a KubeletConfiguration plus the
//     kubelet's command-line flags) and agent.Module, which wires every
//     default piece.
//
// An embedder builds a custom agent by importing agent.Module and replacing
// or adding pieces with fx.Decorate, fx.Replace or value groups; see the
// package documentation of each module and examples/.
package nodekit

import "strings"

// Version is nodekit's release, reported as the node's kubeletVersion and in
// the agent's user agent. Release builds set it with
// -ldflags "-X github.com/nodekit/nodekit.Version=vX.Y.Z".
var Version = "v0.1.0"

// KubernetesVersion is the Kubernetes release whose kubelet behaviour nodekit
// matches.
const KubernetesVersion = "v1.37.2"

// KubeletVersion is what a nodekit agent reports as the node's
// nodeInfo.kubeletVersion: the Kubernetes release it matches, so version-skew
// checks (kubeadm, kubectl) treat it as that kubelet, with nodekit and its
// version as semver build metadata, so an operator can tell it apart, e.g.
// "v1.37.2+nodekit.0.1.0".
func KubeletVersion() string {
	return KubernetesVersion + "+nodekit." + strings.TrimPrefix(Version, "v")
}
