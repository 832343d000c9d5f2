// Package podresources serves the kubelet's pod resources API
// (k8s.io/kubelet/pkg/apis/podresources/v1: List, Get,
// GetAllocatableResources; and v1alpha1's List, which the kubelet still
// serves) on <root-dir>/pod-resources/kubelet.sock, the socket monitoring
// agents such as GPU exporters read to map devices to pods. As the
// kubelet, the socket is created in a 0750 directory (its own mode is the
// process umask's), and unary calls are rate limited to DefaultQPS with
// DefaultBurst (beyond: ResourceExhausted "rejected by rate limit").
//
// What the answers hold, as the kubelet v1.37 with its defaults:
//   - pods: the active pods only (admitted, not terminal), for List and
//     Get; Get of another pod is an error "pod <name> in namespace <ns> not
//     found". Each pod's app containers and its restartable init
//     (sidecar) containers, not its regular init containers.
//   - devices: from the DevicesProvider (the device manager,
//     devices.Manager): per container, resource and device ID, with the
//     NUMA node the plugin reported.
//   - CPU IDs and memory: from the CPUsProvider and MemoryProvider, which
//     the agent wires to resources/cpumanager and resources/memorymanager;
//     with their default policies (cpuManagerPolicy none,
//     memoryManagerPolicy None) the answers are empty, as the kubelet's.
//     The pod-level CPU IDs and memory (feature PodLevelResourceManagers,
//     off by default in 1.37) are not reported.
//   - dynamic resources: from the DynamicResourcesProvider (the agent's
//     is dra.Manager: the prepared ResourceClaims of each container).
//
// The kubelet's metrics kubelet_pod_resources_endpoint_requests_total,
// _requests_list, _requests_get, _requests_get_allocatable and
// _errors_get, labelled server_api_version, are registered on
// Options.Registerer.
//
// New builds a Server without fx; Run serves it. Module provides and runs
// a *Server from the Options in the graph: an embedder changes what it
// reports by decorating the Options (fx.Decorate) with other providers,
// e.g. a CPU manager's, or replaces the *Server.
package podresources
