// Package nodekit is a library for building Kubernetes node agents: the
// kubelet, reimplemented as composable Go modules wired by go.uber.org/fx.
//
// Each concern lives in its own package with a small interface, a plain
// constructor and an fx option (Module). The packages:
//
//   - agent: the composition root: Config (a KubeletConfiguration plus the
//     kubelet's command-line flags) and agent.Module, which wires every
//     default piece; agent/agenttest starts whole agents in tests, on a
//     fake clientset and runtime/fakecri; agent/fleet runs many simulated
//     nodes in one process and deploys them as shards.
//   - features: the kubelet's feature gates (names, defaults, locks,
//     dependencies) and a node's values of them, validated as the
//     kubelet's; the agent gives them to each module through its options.
//   - podstate: the runtime-neutral pod and container state the other
//     modules read, and the one restart decision.
//   - pods: the pod lifecycle loop (admission, one worker per pod, graceful
//     termination, housekeeping) and the pods.Runtime a backend implements.
//   - podsource: the pod sources merged into one stream of updates;
//     podsource/apiserver (the API server's pods), podsource/file and
//     podsource/url (static pods), podsource/manifest (the static manifest
//     decoder) and podsource/mirror (mirror pods).
//   - runtime: the CRI backend (containerd, CRI-O): pod syncing, the PLEG,
//     image and container garbage collection; runtime/fakecri is an
//     in-process CRI server for tests and simulation.
//   - imagepull: the image pull manager (KubeletEnsureSecretPulledImages):
//     which credentials pulled each image, kept in the kubelet's records,
//     and whether a pod may use an image already on the node.
//   - cgroupdriver: the cgroupfs and systemd drivers and the QoS and pod
//     cgroup hierarchy.
//   - volume: the volume manager and its plugins; volume/csi is the CSI
//     node side (stage, publish, CSINode).
//   - pluginmanager: the watch on <root-dir>/plugins_registry and the
//     plugin registration handshake (CSI drivers register through it).
//   - devices: device plugins (extended resources, allocation at
//     admission); devices/internal/checkpoint is its checkpoint file.
//   - dra: Dynamic Resource Allocation (DRA drivers' kubelet plugins,
//     ResourceClaims prepared and unprepared, their CDI devices).
//   - userns: user namespaces (hostUsers: false): each pod's range of host
//     IDs, kept in its pod directory in the kubelet's format.
//   - podresources: the pod resources API (pod-resources/kubelet.sock).
//   - resources/allocation: the resources allocated to each pod (in-place
//     resize's checkpoint, <root-dir>/allocated_pods_state).
//   - resources/topology: the machine's CPUs, caches and NUMA nodes (from
//     sysfs, or synthetic ones for tests); resources/topologymanager: the
//     topology manager (policies, scopes, hint merging, admission);
//     resources/cpumanager and resources/memorymanager: the CPU and memory
//     managers (static policies, exclusive cpusets and NUMA memory), their
//     state files in resources/cpumanager/internal/state and
//     resources/memorymanager/internal/state; resources/internal/qos: the
//     QoS facts they share.
//   - prober: liveness, readiness and startup probes.
//   - status: node registration, the node status setters and the
//     reporter; status/podstatus: a pod's API status and the pod status
//     manager.
//   - machine: the host's facts (CPUs, memory, huge pages, machine, system
//     and boot IDs, kernel, OS image) read from /proc, /sys and statfs, in
//     one place for the node status, the kubepods cgroup and
//     /metrics/cadvisor.
//   - lease: the node Lease heartbeat (kube-node-lease/<node>).
//   - ticks: a node's shared ticks (ticks.Align), on which its periodic
//     loops wake together; the modules' Options take one.
//   - stats: the stats summary and the resource and cadvisor metrics.
//   - eviction: node-pressure eviction.
//   - nodeshutdown: graceful node shutdown.
//   - server: the node API (port 10250).
//   - certificate: the client certificate's TLS bootstrap and rotation.
//   - internal/...: the modules' plumbing, not for embedders: runner (Run on
//     an fx lifecycle), fxgroup (the typed As* registration helpers),
//     ordered (name and order resolution of setters and admit handlers),
//     checksum (the kubelet's checkpoint checksum), atomicfile (a state
//     file replaced whole),
//     timers, clientmetrics (client-go's metrics), testenv (what a test
//     does when the machine lacks something), memtrim (the start-up pages
//     given back to the kernel), grpcproto (gRPC's proto codec with buffer
//     sizes that keep no idle MiB), unixsock (how long a unix socket's
//     path may be), protoequal (API objects compared by their protobuf
//     encoding first).
//   - examples/...: runnable agents: nodeagent (the kubelet replacement),
//     standalone (no API server), customstatus and customsource (an
//     embedder's setter and pod source), podsim (a pod-level backend),
//     fleet (a shard of simulated nodes).
//
// # Where a status comes from
//
// Four places carry "status" in their name; each is one step of one path:
//
//   - a pod's API status (phase, conditions, container statuses) is
//     computed by podstatus.Generate in status/podstatus/generate.go (the
//     phase in phase.go, the kubelet's conditions in conditions.go) and
//     cached and written to the API server by podstatus.Manager
//     (status/podstatus/manager.go);
//   - its input, the runtime's view of the pod (podstate.PodStatus), is read
//     from the CRI in runtime/podstatus.go and kept by the PLEG;
//   - the node's status is package status: the Reporter (reporter.go) runs
//     one setter per part of the status (setter.go, capacity.go,
//     conditions.go, ...) and patches the Node; runtime/statuspoller.go feeds
//     it the runtime's health.
//
// The e2e module (e2e/, its own go.mod) tests agents against a real control
// plane and containerd, and holds nodebench, the benchmark.
//
// An embedder builds a custom agent by importing agent.Module and replacing
// or adding pieces with fx.Decorate, fx.Replace or the typed registration
// helpers (status.AsSetter, pods.AsAdmitHandler, podsource.AsSource, ...);
// see the package documentation of each module and examples/.
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
