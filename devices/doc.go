// Package devices is the node side of the kubelet's device plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1): a Manager serves the
// registration socket <root-dir>/device-plugins/kubelet.sock, connects to
// each registering plugin, turns its ListAndWatch stream into the extended
// resource's capacity (all devices) and allocatable (healthy devices),
// allocates devices to containers at pod admission (GetPreferredAllocation,
// Allocate), completes their CRI configs (PreStartContainer, envs, mounts,
// device nodes, annotations, CDI devices), and keeps the allocations in the
// kubelet's checkpoint file, kubelet_internal_checkpoint, so they survive a
// restart and a kubelet→nodekit handover.
//
// It is also the topology manager's hint provider, as the kubelet's
// device manager (HintProvider): GetTopologyHints and GetPodTopologyHints
// from the NUMA nodes plugins report for their devices, and
// AllocateContainer taking the devices on the NUMA nodes of the affinity
// the topology manager chose (Options.Affinity) first.
//
// The Manager depends on no other nodekit module but the topology
// manager's hint types; the agent wires it:
// SetNodeStatus as a node status setter after the machine info setter,
// HintProvider as the topology manager's first hint provider, whose admit
// handler allocates the devices (without a topology manager, Allocate in
// a pod admit handler: an *AdmissionError carries the kubelet's reason,
// UnexpectedAdmissionError, and message), ApplyContainerConfig as
// the runtime's container config hook, and Options.ActivePods,
// SourcesReady and ContainerRunning from the pod lifecycle and runtime
// (SourcesReady must turn true only once the loop has handled the sources'
// first updates, so that pods found running on a restart keep their
// devices), and NodeForAdmission before the general predicates. The
// Manager is also the pod resources API's DevicesProvider
// (UpdateAllocatedDevices, ContainerDevices, AllocatableDevices).
// An embedder replaces the Manager by wiring another implementation of
// those funcs, or provides Options to Module with fx.Supply / fx.Decorate.
package devices
