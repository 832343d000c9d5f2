// Package runtime is nodekit's adapter to a CRI container runtime: the
// connection, pod syncing with the kubelet's semantics, and the pod
// lifecycle event generator.
//
// # Connection
//
// A [Client] built on k8s.io/cri-client hands out the runtime and image
// services (the k8s.io/cri-api interfaces cri.RuntimeService and
// cri.ImageManagerService) and derives from them what the node reports: the
// runtime's name and version ([Client.Version]), its health for the Ready
// condition ([Client.Health]) and its cgroup driver ([Client.CgroupDriver]).
// The agent must start while the runtime is down and recover when it comes
// back, so [New] does no I/O. Each service connects on its first call and
// retries the connection on every call until it succeeds; after that gRPC
// reconnects by itself. Every call is counted in the kubelet's CRI operation
// metrics (kubelet_runtime_operations_total and friends) when a
// prometheus.Registerer is given. Runtimes that leave an RPC Unimplemented
// are tolerated: CgroupDriver reports ok=false for a runtime without
// RuntimeConfig, and the codes.Unimplemented status of any other RPC (such
// as GetContainerEvents) reaches the caller unchanged so it can fall back.
//
// # Pods
//
// A [PodManager] runs pods on the runtime as the kubelet's kuberuntime
// manager does. An agent's pod worker, one per pod and serialized, does:
//
//	status, err := pleg.Cache().GetNewerThan(ctx, uid, lastSync) // or pm.GetPodStatus
//	... generate and report the API status from status and the last SyncResult.Waiting ...
//	if the pod should run {
//		vols, err := volumes.MountPod(ctx, pod) // a VolumeManager; skip the sync on error
//		res := pm.SyncPod(ctx, pod, status, runtime.SyncInput{PullSecrets: secrets, Probes: probes,
//			Volumes: runtime.PodVolumes{Mounted: vols, SubPath: volumes.SubPath}}) // requeue at res.RetryAt
//	} else {
//		err = pm.KillPod(ctx, pod, status.RunningPod(), gracePeriodOverride)
//		err = volumes.UnmountPod(ctx, uid)
//		... once the final status is reported: pm.RemovePod(ctx, uid)
//	}
//
// [Backend] does exactly this for the pod lifecycle loop (pods.Runtime),
// with a [VolumeManager] (the agent adapts volume.Manager): it mounts a
// pod's volumes before every SyncPod of a pod that should run (on error
// nothing starts, the pod stays ContainerCreating and the loop retries after
// its back-off), unmounts them once KillPod stopped the pod, and again
// before RemovePod.
//
// SyncPod creates the sandbox (hostname, DNS from the pod and the cluster
// DNS settings, port mappings, cgroup parent, log directory, host
// namespaces, sysctls), starts init containers in order, sidecars and
// regular containers (image pulled by pull policy with the pod's pull
// secrets, a present image used only when the [ImagePullManager] of
// PodManagerOptions.ImagePulls says the pod may; command, args and env with $(VAR) expansion and the downward API;
// resources; security context; the mounts of the volumes in
// SyncInput.Volumes, read-only where the volume says so, subPath and
// subPathExpr resolved by the volume manager, with the kubelet's errors;
// /etc/hosts; termination message file), starts ephemeral containers
// (kubectl debug) once, in the pod's sandbox and their target container's
// process namespace, never restarting them, restarts the others by restart
// policy with
// CrashLoopBackOff, replaces containers whose image changed or whose
// liveness or startup probe failed, and recreates a dead sandbox. It labels
// and annotates sandboxes and containers as the kubelet does
// (io.kubernetes.pod.name, .namespace, .uid, io.kubernetes.container.name,
// hash, restart count, grace periods, preStop hook), so crictl shows them
// and [PodManager.ListPods] finds an agent's pods after a restart; the hash
// is the kubelet's own ([HashContainer]), so an agent that replaces a
// kubelet on a node keeps the containers it started running; KillPod
// accepts a nil pod for such orphans. Container logs are written by the
// runtime to <PodLogsDir>/<namespace>_<name>_<uid>/<container>/<restart>.log;
// once a container started, a link to its log is made in ContainerLogsDir
// (/var/log/containers, where log shippers read), named as the kubelet names
// it ([ContainerLogLink]), removed with the container, and the container
// garbage collector removes the dangling links of containers that exited.
// Events (Pulling, Pulled, Created, Started, Killing, BackOff, Failed,
// FailedCreatePodSandBox, SandboxChanged, ...) carry the kubelet's reasons
// and messages.
//
// A container's termination message is read from its termination message
// file (at most 4 KiB) or, with FallbackToLogsOnError after a failure, from
// the last 80 lines (at most 2 KiB) of its log, as the kubelet.
//
// AppArmor profiles (field or annotation, podstate.AppArmorProfile) are
// passed to the runtime in the CRI field and the deprecated string form;
// pod admission (pods.AppArmor) refuses pods that ask for one on a host
// without AppArmor.
//
// In-place resize: the pod SyncPod gets is the allocated pod (its spec with
// the resources the node allocated, pods.Allocations). A running container
// whose actuated resources (those it was created with, or a resize applied
// since, podstate.ContainerStatus.Resources) differ from its allocation is
// updated with UpdateContainerResources, memory then cpu, decreases before
// increases, the pod's cgroup grown before the containers and shrunk after
// them (PodManagerOptions.UpdatePodCgroup), as the kubelet's
// doPodResizeAction; a changed resource whose resizePolicy says
// RestartContainer restarts the container instead. A refused update fails
// the sync with ErrResizePodInPlace and a ResizeError event and is retried.
// What the runtime reports (ContainerStatus.resources) is the container's
// status.resources. Pod-level resources (spec.resources) are resized the
// same way: a container that sets no CPU or memory limit runs with the
// pod-level one, so it is updated with the pod's cgroup;
// PodManager.PodLevelActuated records what the pod's cgroup was given (at
// its sandbox's creation, then per resource), which the pod's
// status.resources report.
//
// User namespaces: with PodManagerOptions.UserNamespaces (the userns
// package's Manager) every sandbox and container config carries the pod's
// user namespace, the node's (mode NODE) or, for hostUsers: false, one of
// its own (mode POD, its ID mappings) whose mappings also idmap each of
// the containers' mounts, as the kubelet's; a runtime handler without user
// namespaces (containerd 1.6 reports no handlers) fails the sandbox with
// the kubelet's FailedCreatePodSandBox message. The Backend releases the
// mappings once the pod's containers stopped and its volumes are torn
// down (kubelet_started_user_namespaced_pods_total and _errors_total).
//
// Image volumes: before the first container of a sync starts, the images of
// all the pod's image volumes are made present as containers' images are
// (the volume's pullPolicy, the pod's pull secrets, the same back-off and
// events, on the pod), as the kubelet's getImageVolumes; a container
// mounting one whose pull failed waits with that pull's reason
// (ErrImagePull, ImagePullBackOff) and a Failed event. Its CRI mount has
// the pulled image (Mount.image) and the volumeMount's subPath
// (image_sub_path), read-only; a runtime that cannot mount images fails
// CreateContainer, and the container waits with CreateContainerError and
// the runtime's message (kubelet_image_volume_requested_total,
// _mounted_succeed_total, _mounted_errors_total). An image a container
// mounts is in use for [ImageGC] (each container's ContainerStatus mounts,
// read at every collection, as the kubelet's).
//
// Left out: recursive read-only mounts are never asked of
// the runtime (recursiveReadOnly IfPossible mounts read-only, Enabled fails
// the container with the kubelet's error for a runtime without them).
//
// # Garbage collection and logs
//
// [PodManager.GarbageCollect] applies the kubelet's container GC policy
// ([ContainerGCPolicy]: minimum age, dead instances per container, dead
// containers per node) and removes what removed pods left (containers,
// sandboxes, log directories); [PodManager.DeleteAllUnusedContainers] and
// [Backend.DeleteAllUnusedContainers] also remove the dead containers of
// pods that terminated, for the eviction manager. [ImageGC] is the
// kubelet's image garbage collector (high and low thresholds of the image
// filesystem, minimum and maximum age, never an image a container uses nor
// a pinned or sandbox image; kubelet_image_garbage_collected_total;
// ImageGCFailed, FreeDiskSpaceFailed and InvalidDiskCapacity events), run
// every 5 minutes, with [ImageGC.DeleteUnusedImages] for the eviction
// manager; its PostGC hooks (the image pull manager's pruning) learn the
// images left after each collection. [LogRotator] is the kubelet's container log manager: a running
// container's log over containerLogMaxSize is moved aside and reopened by
// the runtime (ReopenContainerLog), older rotations gzipped, at most
// containerLogMaxFiles kept.
//
// # Lifecycle events
//
// A [PLEG] relists the runtime's pods every second (the kubelet's generic
// PLEG), reads the pods that changed into its [PodCache] and sends a
// [PodLifecycleEvent] for each change; where the runtime streams container
// events (GetContainerEvents), a pod is read as soon as one of its
// containers changes (with PLEGOptions.SyncsObserved, which PodsModule
// sets, only when one stops or is deleted: the [Backend] hands the PLEG the
// status it reads after each sync, [PLEG.Observe], so what the agent
// created and started is not read again), and the relist is the safety
// net: while the stream is up it runs once a minute
// (PLEGOptions.EventedRelistPeriod), the cache being marked fresh every
// second without a CRI call, as the kubelet's evented PLEG does (with 5
// minutes). [PLEG.Healthy] reports "PLEG is not healthy: ..." for the
// node's Ready condition when relisting stalls.
//
// # fx and what an embedder can swap
//
// [Module] provides *Client, cri.RuntimeService and cri.ImageManagerService
// from the Options value in the graph and closes the Client when the
// application stops. [PodsModule] provides *PodManager, *PLEG and
// *PodCache from the PodManagerOptions (and optional PLEGOptions) in the
// graph and runs the PLEG. What an embedder can swap:
//
//   - The runtime itself: set Options.Endpoint to any CRI v1 server, such as
//     containerd, CRI-O or the in-process fake in runtime/fakecri.
//   - The services the rest of the agent uses: fx.Decorate
//     cri.RuntimeService or cri.ImageManagerService to wrap or replace them
//     (say, to add tracing or to fake one RPC). The Client's own Version,
//     Health and CgroupDriver keep using the undecorated services;
//     PodsModule uses the Client's unless PodManagerOptions names others.
//   - Pieces of pod syncing, through PodManagerOptions' funcs: the cgroup
//     parent (cgroupdriver), the QoS classification, config map, secret and
//     service sources, runtime class resolution; the volume manager
//     through the [VolumeManager] interface the Backend takes.
//   - The PLEG's source: PLEGOptions.Pods is a [PodLister] interface.
//   - The whole package: leave the modules out and provide *Client,
//     *PodManager, *PLEG or whatever the agent's consumers ask for yourself.
package runtime
