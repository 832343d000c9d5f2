// Package runtime is nodekit's adapter to a CRI container runtime. For now it
// holds the connection: a [Client] built on k8s.io/cri-client that hands out
// the runtime and image services (the k8s.io/cri-api interfaces
// cri.RuntimeService and cri.ImageManagerService) and derives from them what
// the node reports: the runtime's name and version ([Client.Version]), its
// health for the Ready condition ([Client.Health]) and its cgroup driver
// ([Client.CgroupDriver]).
//
// The agent must start while the runtime is down and recover when it comes
// back, so [New] does no I/O. Each service connects on its first call and
// retries the connection on every call until it succeeds; after that gRPC
// reconnects by itself. Every call is counted in the kubelet's CRI operation
// metrics (kubelet_runtime_operations_total and friends) when a
// prometheus.Registerer is given. Runtimes that leave an RPC Unimplemented are
// tolerated: CgroupDriver reports ok=false for a runtime without
// RuntimeConfig, and the codes.Unimplemented status of any other RPC (such as
// GetContainerEvents) reaches the caller unchanged so it can fall back.
//
// With fx, [Module] provides *Client, cri.RuntimeService and
// cri.ImageManagerService from the Options value in the graph and closes the
// Client when the application stops. What an embedder can swap:
//
//   - The runtime itself: set Options.Endpoint to any CRI v1 server, such as
//     containerd, CRI-O or the in-process fake in runtime/fakecri.
//   - The services the rest of the agent uses: fx.Decorate
//     cri.RuntimeService or cri.ImageManagerService to wrap or replace them
//     (say, to add tracing or to fake one RPC). The Client's own Version,
//     Health and CgroupDriver keep using the undecorated services.
//   - The whole package: leave Module out and provide *Client, or whatever
//     the agent's consumers ask for, yourself.
package runtime
