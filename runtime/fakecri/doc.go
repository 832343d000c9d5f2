// Package fakecri is an in-process CRI v1 gRPC server (the RuntimeService and
// ImageService of k8s.io/cri-api) listening on a unix socket. It lets tests,
// demos and many-node simulations run the same client code that talks to
// containerd, without a container runtime on the machine.
//
// A [Server] keeps all of its state in memory behind one mutex; it is safe for
// concurrent use and cheap enough to run a thousand of them in one process.
// Today it answers Version, Status, RuntimeConfig, ListImages, ImageStatus,
// PullImage, RemoveImage and ImageFsInfo; every other RPC returns
// codes.Unimplemented (pod sandboxes and containers come later).
//
// Tests steer it with controls that take effect on the next RPC:
// [Server.SetRuntimeReady] and [Server.SetNetworkReady] (the conditions of
// Status), [Server.SetVersion], [Server.SetCgroupDriver], [Server.SetImages],
// [Server.AddImage] and [Server.AddPullable] (the image store and the fake
// registry that PullImage draws from), [Server.SetError] and
// [Server.SetUnimplemented] (fault injection for any RPC by its method name,
// for example emulating containerd 1.6, which lacks RuntimeConfig), and
// [Server.Calls] and [Server.Images] to inspect what clients did.
//
// Image references are normalized the way containerd does
// ("nginx" is "docker.io/library/nginx:latest"), so a pod spec's image name
// finds an image stored under its fully qualified tag; [NewImage] builds an
// image with a deterministic ID and digest for a reference.
//
// Nothing in the agent depends on this package: point the runtime package's
// Options.Endpoint at the endpoint [Server.Start] returns (or at the socket
// given to [Server.Serve]) to run an agent on the fake runtime.
package fakecri
