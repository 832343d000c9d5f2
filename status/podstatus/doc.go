// Package podstatus computes a pod's API status from what the container
// runtime reports and writes it to the API server, as the kubelet's
// generateAPIPodStatus and status manager do.
//
// # Generating a status
//
// Generate (generate.go; the phase in phase.go, the kubelet's conditions in
// conditions.go) turns the runtime's podstate.PodStatus of a pod (read from
// the CRI in runtime/podstatus.go), the reasons its waiting containers wait
// (podstate.ContainerWaiting: CrashLoopBackOff, ErrImagePull, ...) and the
// prober's results into a v1.PodStatus:
//
//   - the phase, by the kubelet's rules: regular init containers first (a
//     failed one that will not restart fails the pod), sidecars (restartable
//     init containers) must have started, then the regular containers
//     decide with their restart policies and restart rules; a pod the agent
//     declares terminal (GenerateOptions.Terminal) ends Succeeded or Failed
//     once its containers stopped; Succeeded and Failed never change again;
//   - container, init container and ephemeral container statuses: waiting
//     (ContainerCreating, PodInitializing, or the runtime's reason), running
//     or terminated with exit code, reason, message and times, the previous
//     instance's state as lastState, restart count, ready, started, image,
//     imageID and containerID "<runtime>://<id>";
//   - the kubelet's conditions PodReadyToStartContainers, Initialized,
//     Ready (with readiness gates), ContainersReady and PodScheduled, with
//     its reasons and messages ("containers with unready status: [a b]");
//     other writers' conditions are kept;
//   - podIP(s) (ordered by the node's IP family) and hostIP(s), start time,
//     QoS class, pod and container resources, observed generation.
//
// # Writing it
//
// A Manager (manager.go; the patch in patch.go) caches the latest status
// per pod (SetPodStatus, GetPodStatus) and Run writes changes with a
// strategic merge patch of the status subresource carrying the pod's UID
// as precondition, only when the API server's status differs, and never
// touching the condition types it does not own. It refuses illegal
// transitions (a terminal phase or a finished container coming back),
// keeps a pod from turning terminal on the API server before TerminatePod
// says its containers stopped, deletes a finished pod's object (grace
// period 0, UID precondition) once it is being deleted and terminal, and
// retries failed writes with the next write and at least every 10 s.
//
// A static pod's status (podsource.IsStaticPod) goes to its mirror pod, the
// API pod whose kubernetes.io/config.mirror annotation is the static pod's
// config hash. With the sources' view (Options.Pods) the Manager writes it
// only once the sources show that mirror pod, without a request before, and
// its periodic sync compares against the mirror pod's status. With the
// sources' view it also makes no request for a pod the sources no longer
// show, nor for a pod it deleted itself (until RemovePod): their API objects
// are gone, and the Node authorizer refuses even a read of a pod no longer
// bound to the node (the kubelet makes that GET, refused, until its
// RemoveOrphanedStatuses drops the status). Without a
// Client (a standalone node) the Manager keeps the statuses for
// GetPodStatus and writes nothing.
//
// Unlike the kubelet's status manager, which writes one pod at a time, it
// writes up to Options.Writers pods at once, each as soon as a writer is
// free (a burst of pods does not wait for each round trip in turn, nor a
// status for the slowest write under way), and it holds a pod's first status back for
// up to Options.PendingWriteDelay (1 s) while the pod is still Pending: a
// pod that starts within that time costs one write, carrying Running,
// instead of one for ContainerCreating and one for Running.
//
// The pod loop (pods.Controller) wires it on every sync of a pod, as the
// kubelet's syncPod does, status first, then the runtime's actions: the
// runtime's view of the pod becomes its API status through Generate (the
// CRI backend's runtime.Backend.PodStatus), with the status last generated
// as GenerateOptions.Previous, and SetPodStatus caches it for Run to write;
// TerminatePod follows once the pod's containers all stopped for good, and
// RemovePod when its sources removed it. Example (podWorker) shows one pod's
// course.
//
// # Metrics
//
// Registered on Options.Registerer when it is set:
//
//   - kubelet_pod_status_sync_duration_seconds (histogram): from a status
//     change to its successful write, as the kubelet's;
//   - kubelet_terminated_containers_total{container_type,exit_code,reason}
//     (counter): container terminations seen in statuses, as the kubelet's;
//   - nodekit_pod_status_patches_total{result} (counter): status writes,
//     result patched, unchanged (no request needed) or failed;
//   - nodekit_pod_deletions_total{result} (counter): deletions of finished
//     pods, deleted or failed;
//   - nodekit_pod_start_internal_duration_seconds (histogram,
//     StartLatencyBuckets: from 1 ms, none wider than a quarter below
//     10 s): from the agent first seeing a pod (PodSeen, see StartObserver)
//     to the agent sending the first status write (PATCH) that shows all
//     its containers started, once the API server accepted it;
//   - nodekit_pod_start_status_patch_duration_seconds (histogram, the same
//     buckets): that PATCH's round trip on the agent's clock, apart: the
//     API server's handling and the client's side of the request (its
//     rate limiter, the connection, the agent's goroutines waiting for a
//     core; in nodebench's 100-pod bursts the API server's own part, from
//     its audit log, was a fifth to three fifths of it at p50);
//   - nodekit_pod_start_status_patch_phase_duration_seconds{phase}
//     (histogram, the same buckets): that PATCH's round trip split where
//     net/http/httptrace sees it, when the client is HTTP: connection
//     (the client's rate limiter, the connection pool), write (a stream on
//     the shared HTTP/2 connection, headers and body), answer (the
//     network, the API server, the connection's read loop reaching the
//     answer) and read (the body, its decoding, the writer waking). Only
//     that PATCH is traced.
//
// # Swapping pieces
//
// Generate is a plain function: an agent with its own status rules calls
// its own. Without fx, build a Manager with NewManager and call Run. With
// fx, Module provides *Manager and Interface (what the agent's pod workers
// use) and runs the Manager. An embedder tunes it by decorating
// podstatus.Options (e.g. a shorter SyncPeriod), gives it the pods its
// sources see by providing a PodGetter, or writes statuses some other way
// by leaving Module out and providing its own Interface. Events are not
// recorded here: the runtime side records them.
package podstatus
