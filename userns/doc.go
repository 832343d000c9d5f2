// Package userns is the kubelet's user namespace manager
// (UserNamespacesSupport, GA): a pod with spec.hostUsers: false runs in a
// user namespace of its own, whose container IDs 0 to IDsPerPod-1 (65,536
// by default) map to a range of host IDs no other pod of the node has.
//
// [Manager] gives out those ranges as the kubelet does: the node's range
// is the kubelet user's subordinate IDs ([KubeletMappings]: getsubids
// kubelet, from /etc/subuid and /etc/subgid) or every ID from IDsPerPod
// up; it must hold maxPods ranges. A pod's range is picked at random among
// the free ones before its sandbox is created and kept in its directory
// (<root-dir>/pods/<uid>/userns, the kubelet's JSON format), which New
// reads back for every pod: an agent restarted, or taking the node over
// from a kubelet, gives each running pod the same IDs. A range is released
// when the pod's containers stopped (the runtime backend calls Release) or,
// for pods the agent no longer knows, by Run's periodic cleanup.
//
// The runtime asks [Manager.PodUserNamespace] for each sandbox and
// container (runtime.PodManagerOptions.UserNamespaces): mode NODE for
// every pod but those with hostUsers: false, which get mode POD with their
// mappings, and whose containers' mounts are idmapped with them, so a
// volume's files keep their owners inside the pod (the kubelet changes no
// ownership for user namespaces). A runtime handler that does not report
// userNamespaces in its CRI Status (containerd 1.6 reports no handlers at
// all) fails the sandbox with the kubelet's message, "can't set
// `spec.hostUsers: false`, runtime does not support user namespaces", in a
// FailedCreatePodSandBox event: the pod never runs without its namespace.
//
// [Module] provides a *Manager from the Options in the graph and runs it;
// the agent's UserNamespaces option wires it to the runtime handlers, the
// pod store and the pod manager. An embedder replaces the node's range
// with fx.Decorate of Options (Mappings).
package userns
