// Package dra is the node side of Dynamic Resource Allocation
// (resource.k8s.io/v1), as the kubelet v1.37's DRA manager: a DRA driver's
// kubelet plugin registers through the plugin registration socket
// (pluginmanager, type DRAPlugin, supported versions "v1.DRAPlugin" and
// "v1beta1.DRAPlugin"); before a pod's sandbox is created its
// ResourceClaims are prepared with the driver's NodePrepareResources
// (k8s.io/kubelet/pkg/apis/dra), once per claim however many pods share
// it; the CDI device IDs the driver returns go into the CDIDevices of the
// CRI config of each container that uses the claim; once the pod's
// containers stopped, a claim no other pod uses is released with
// NodeUnprepareResources.
//
// A pod's claims are prepared only when each is allocated and reserved
// for the pod (and owned by it when made from a ResourceClaimTemplate) and
// each driver of their allocations has a registered plugin; otherwise
// PrepareResources fails with the kubelet's error, which the runtime
// records as the kubelet's FailedPrepareDynamicResources event, and the
// pod stays without a sandbox until a retry succeeds.
//
// The claim cache is checkpointed in the kubelet's format and file,
// <root-dir>/dra_manager_state (CheckpointFile), before every driver call
// and after it, so an agent restart, or a nodekit agent taking over from a
// kubelet, keeps the running containers' CDI devices and unprepares what
// the previous process prepared. The claims of pods no longer active are
// unprepared every minute once the pod sources are ready.
//
// At start, and when a driver has had no connected plugin for 30 s, the
// node's ResourceSlices (of that driver) are deleted, as the kubelet does
// so that the scheduler stops placing pods on a driver that went away.
//
// The health drivers report on their DRAResourceHealth stream goes into
// the containers' allocatedResourcesStatus (ResourceHealthStatus) and is
// checkpointed in the kubelet's <root-dir>/dra_health_state
// (HealthCheckpointFile), so a restarted agent reports it until the report
// times out rather than Unknown; a driver whose stream ends is cleared, as
// by the kubelet.
//
// Not implemented: the DRAOptionalNodeOperations alpha gate (a claim whose results skip node
// operations is refused, as the kubelet with the gate off), and claims of
// PodGroups (DRAWorkloadResourceClaims, off by default).
//
// # Swapping pieces
//
// Module provides the *Manager from the Options in the graph: replace it
// with fx.Decorate of *Manager, or change its Options with fx.Decorate. The
// Manager depends on no other nodekit module; the agent registers it as the
// plugin manager's DRAPlugin handler and gives it to the CRI pod manager as
// its runtime.DynamicResources. Without fx, build it with New, call Run,
// and wire PrepareResources, UnprepareResources and ApplyContainerConfig
// where pods start and stop.
package dra
