// Package fakecri is an in-process CRI v1 gRPC server (the RuntimeService and
// ImageService of k8s.io/cri-api) listening on a unix socket, or called
// directly ([Server.InProcess]): a fake container runtime. It lets tests, demos and many-node simulations run the
// same client code that talks to containerd, without a container runtime on
// the machine.
//
// A [Server] keeps all of its state in memory behind one mutex; it is safe for
// concurrent use and cheap enough to run a thousand of them in one process:
// it runs no goroutine per container, only one timer per Server for the next
// scripted exit.
//
// What it fakes:
//
//   - Runtime status, version and config (Status, Version, RuntimeConfig);
//     a verbose Status carries Options.SandboxImage as containerd's
//     info["config"] does.
//   - Images: ListImages, ImageStatus, PullImage from a fake registry,
//     RemoveImage, ImageFsInfo. References are normalized the way containerd
//     does ("nginx" is "docker.io/library/nginx:latest"); [NewImage] builds an
//     image with a deterministic ID and digest for a reference.
//   - Pod sandboxes as a state machine (READY until stopped, then NOTREADY
//     until removed) with IPs allocated from Options.PodCIDRs, none for
//     sandboxes in the node's network namespace (as containerd, the kubelet
//     reports the node's IPs for those), and a sandbox failing to start while
//     the network is not ready ([Server.SetNetworkReady]).
//   - Containers as a state machine (CREATED, RUNNING, EXITED) created from a
//     stored image in a ready sandbox. What a started container does is its
//     [Behavior]: scripted with the annotations [BehaviorAnnotation] and
//     [BehaviorAnnotationPrefix]+name on the pod (they reach the sandbox
//     config), or interpreted from common commands (true, false, exit N,
//     sleep N, echo, and "sh -c" scripts of those), otherwise running until
//     stopped. A started container writes its log lines to its log path in
//     the CRI log format. StopContainer honours the timeout: SIGTERM, then a
//     kill (exit code 137) when the container outlives it.
//   - ReopenContainerLog opens a running container's log file anew at its
//     path (creating it after a log rotation moved it away), as containerd.
//   - ExecSync answered by an [ExecHandler] ([Server.SetExecHandler]);
//     UpdateContainerResources; a verbose ContainerStatus carrying, as
//     containerd's, the OCI runtime spec (github.com/opencontainers/runtime-spec)
//     with linux.cgroupsPath under the sandbox's cgroup parent and
//     linux.resources; ContainerStats, ListContainerStats,
//     PodSandboxStats and ListPodSandboxStats with usage from the behavior.
//   - GetContainerEvents: a stream of CREATED, STARTED, STOPPED and DELETED
//     events for containers and sandboxes, carrying the sandbox's status
//     and its containers' statuses as containerd's do.
//
// Exec, Attach and PortForward (the streaming RPCs), checkpointing and the
// metrics descriptors answer codes.Unimplemented.
//
// Everything time-dependent runs on Options.Clock: with a fake clock
// (k8s.io/utils/clock/testing) a test steps time and sees scripted exits,
// stop timeouts and exec delays happen exactly then.
//
// Tests steer it with controls that take effect on the next RPC:
// [Server.SetRuntimeReady] and [Server.SetNetworkReady] (the conditions of
// Status), [Server.SetVersion], [Server.SetCgroupDriver], [Server.SetImages],
// [Server.AddImage], [Server.AddPullable] and [Server.RequireAuth] (the
// image store and the fake registry that PullImage draws from), [Server.ExitContainer] and
// [Server.StopSandbox] (a container crash, a dying sandbox),
// [Server.SetExecHandler], [Server.SetError] and [Server.SetUnimplemented]
// (fault injection for any RPC by its method name, for example emulating
// containerd 1.6, which lacks RuntimeConfig and GetContainerEvents; also
// Options.Unimplemented), [Server.SetReplyRewriter] (any reply rewritten
// or turned into an error after the fake did the work: a misbehaving
// runtime, as runtime.FuzzCRIReplies drives it), and [Server.Calls], [Server.Images],
// [Server.EventStreams] and [Server.DroppedEvents] to inspect what clients
// did.
//
// Nothing in the agent depends on this package: point the runtime package's
// Options.Endpoint at the endpoint [Server.Start] returns (or at the socket
// given to [Server.Serve]) to run an agent on the fake runtime. An agent in
// the same process can skip the socket: [Server.InProcess] returns CRI
// services that call the fake directly (the runtime package's
// Options.RuntimeService and Options.ImageService), with the same replies,
// errors, faults and call counts and none of gRPC's connections,
// goroutines or serialization; agent/fleet runs its nodes so.
package fakecri
