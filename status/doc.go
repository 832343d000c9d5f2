// Package status registers the Node and keeps its status current, as the
// kubelet's node status loop does (k/k pkg/kubelet/kubelet_node_status.go and
// pkg/kubelet/nodestatus).
//
// This package is the node's status. A pod's status is computed by
// status/podstatus (podstatus.Generate in status/podstatus/generate.go) and
// written by its Manager (status/podstatus/manager.go).
//
// # What lives here
//
//   - Reporter (New, Run): creates the Node with the kubelet's labels
//     (kubernetes.io/hostname, os, arch and their beta aliases), the
//     configured labels and taints and the controller-managed attach-detach
//     annotation, retrying with back-off (100 ms doubling to 7 s); on
//     AlreadyExists it reconciles the labels, annotation and huge page sizes
//     the kubelet owns. Then every UpdateFrequency (10 s) it reads the Node
//     (first from a single-node informer, on retries from the API; from
//     the API on every try after the informer's watch failed, until the
//     informer shows what the API answered, so that a node marked Unknown
//     during an API server outage is seen and reported Ready at the first
//     cycle after it), runs the
//     setters on a copy and, only when something other than heartbeat times
//     changed or ReportFrequency (5 m, ± 50 % after a change) elapsed, sends
//     a strategic merge PATCH of the status subresource, retried up to 5
//     times. The patch is a two-way diff from the Node as read, so
//     conditions and fields written by others (node-problem-detector,
//     kubectl) are never touched. At startup the status is also re-evaluated
//     every 100 ms without calling the API and patched the moment the node
//     turns Ready. Metrics: nodekit_node_status_patches_total,
//     nodekit_node_status_patch_bytes_total (by reason: changed, report,
//     ready, register), nodekit_node_status_patch_errors_total and
//     nodekit_node_status_cycles_total (by result).
//   - Setters: one func per part of the status, as in the kubelet, named
//     by the Setter* constants: NodeAddress, MachineInfo (capacity and
//     allocatable), VersionInfo, DaemonEndpoints, Images, GoRuntime,
//     RuntimeHandlers, NodeFeatures, DeclaredFeatures, the Memory, Disk and
//     PID pressure conditions, NodeSchedulable (events only), Ready and
//     VolumesInUse (status.volumesInUse once the volume manager has
//     synced). DefaultSetters builds them all, in the kubelet's order, from
//     SetterOptions; each is built by an unexported constructor beside the
//     code it reports (addresses.go, capacity.go, version.go,
//     runtime_setters.go, conditions.go, volumes.go).
//   - The host's facts (CPUs, memory, huge pages, IDs, kernel, OS image)
//     are not read here: they come from package machine through
//     SetterOptions.Machine (the agent's one machine.Func).
//   - Module: the fx wiring.
//
// nodeInfo.kubeletVersion is nodekit.KubeletVersion() unless
// SetterOptions.KubeletVersion is set.
//
// # Contracts
//
// The Reporter runs its setters one at a time on a single goroutine; a
// setter may keep state and must not block for long. Setters see a private
// deep copy of the Node and may change its status and metadata; spec changes
// are dropped. A setter with side effects must skip them when IsDryRun(ctx)
// (the fast startup loop evaluates setters on trial). Objects passed in
// (Machine, image lists) are not modified. status does not import the
// runtime, lease, eviction or agent packages: they are wired in through the
// func types RuntimeVersionFunc, RuntimeHealthFunc, RuntimeHandlersFunc,
// RuntimeFeaturesFunc, ListImagesFunc, VolumesInUseFuncs, PressureFuncs and
// HealthCheck.
//
// # Wiring with fx
//
// Module needs from the graph: Options and SetterOptions (the agent builds
// both from its KubeletConfiguration), and a RuntimeVersionFunc and a
// RuntimeHealthFunc (unless SetterOptions carries them). Optional: a
// kubernetes.Interface (without one the Reporter is standalone: it keeps
// the Node it computes in a local NodeWatch, NewLocalNodeWatch, and sends
// nothing), a *NodeWatch, RuntimeHandlersFunc, RuntimeFeaturesFunc,
// ListImagesFunc, VolumesInUseFuncs (absent: no VolumesInUse setter),
// PressureFuncs (absent: no pressure), record.EventRecorder (absent: no
// events), clock.Clock, prometheus.Registerer, logr.Logger, and HealthCheck
// values in the group "node_health_checks". It provides *Reporter (wait on
// Registered() for the Node to exist) and runs it from start to stop.
//
// # What an embedder can swap
//
// The setters are the value group "node_status_setters" of OrderedSetter.
// The default ones are built by DefaultSetters and named by the Setter*
// constants; everything else in the group is the embedder's.
//
// To add a setter, add it to the group with AsSetter under a new Name
// and an Order that places it (custom conditions usually below OrderReady,
// which runs last):
//
//	status.AsSetter("GPUHealthy", status.OrderPIDPressure+50, mySetter)
//
// To replace a default setter, add one with the default's Name (for
// example status.SetterNodeAddress): it takes the default's place and runs
// at its own Order. To remove a default setter, add nil under its Name
// (status.AsSetter(status.SetterNodeAddress, 0, nil)); a Name no default
// has fails the agent's start. To change only what a default setter sees,
// fx.Decorate its input (the RuntimeHealthFunc, the PressureFuncs, or
// SetterOptions, e.g. SetterOptions.Machine for a simulated node), or add a
// HealthCheck with AsHealthCheck. The package example shows
// an addition and a replacement.
//
// Without fx, pass DefaultSetters(...) plus your own OrderedSetters in
// Options.Setters: the same replacement rules apply.
package status
