// Package agent is nodekit's composition root: it turns a kubelet
// configuration into a running node agent.
//
// Config holds a KubeletConfiguration (k8s.io/kubelet/config/v1beta1) plus
// the settings the kubelet takes only as flags; ParseFlags reads the
// kubelet's command line and --config file unchanged, with the kubelet's
// defaults and precedence (flags override the file). Module wires every
// default nodekit module from the *Config in the graph: apiserver clients (a
// rate-limited one and a heartbeat one for the Lease and node status),
// events, metrics, the CRI runtime, the node Lease, node registration and
// status, the API server pod source, the pod status manager, the cgroup
// hierarchy, the runtime's pod manager and PLEG, the PodController (admission
// and pod workers) and the /healthz and /metrics server. New builds an fx
// application from a Config; Run is the whole main of examples/nodeagent.
//
// # Static pods and standalone mode
//
// StaticPods (in both cores) adds the manifest directory (staticPodPath,
// --pod-manifest-path) and the manifest URL (staticPodURL, --manifest-url,
// --manifest-url-header) to the pod sources; an empty path or URL adds
// none. MirrorPods (Core only) shows the static pods to the API server as
// mirror pods. Admission checks pods against status.Reporter.NodeAnyWay,
// the node as computed before it is registered too, so static pods run with
// no API server reachable, as the kubelet's.
//
// The core is chosen by the configuration: CoreFor(cfg), which New, NewWith
// and Run use, is Core when cfg.KubeconfigPath (--kubeconfig) is set and
// Standalone when it is empty. Standalone is the kubelet's standalone mode:
// no API clients in the graph, no registration, Lease or node status
// patches, no API server pod source and no mirror pods; events only go to
// the log; the status Reporter keeps the node it computes in a local
// status.NodeWatch and the podstatus.Manager keeps the pod statuses (no
// client), which the pods.Store and podstatus's GetPodStatus serve to the
// node API. The CRI module runs the same on both (without an API server a
// container's config map, secret and service variables cannot be had).
// examples/standalone runs it on the in-process fake runtime.
//
// # What an embedder can swap
//
// Everything in the graph, with fx options passed to New (or Run):
//
//   - A value: fx.Decorate replaces what a provider returns, e.g. the Lease
//     options (func(lease.Options) lease.Options), the status setter
//     options, the cgroup driver (func(cgroupdriver.Driver)
//     cgroupdriver.Driver), the clock or the logger. fx.Replace swaps a value
//     outright, e.g. *Clients to run on other clientsets.
//   - Node status: add a status.OrderedSetter to the status.SetterGroup
//     value group; one with the Name of a default setter replaces it, and
//     with a nil Set removes it. Add a status.HealthCheck to
//     status.HealthCheckGroup to gate Ready.
//   - Pods: add a podsource.Source with podsource.AsSource (its pods are
//     static pods; examples/customsource), change the manifest sources by
//     decorating file.Options or url.Options, and add an AdmitHandler with
//     pods.AsAdmitHandler; admission runs GeneralPredicates (the kubelet's
//     resource, affinity, port and taint checks) first.
//
// PodController runs without fx too: NewPodController takes the sources, a
// PodRuntime (*runtime.PodManager), the runtime's events, a pod status
// manager and admission checks.
//
// # Contracts
//
// Module's components start on fx's OnStart and stop on OnStop, each within
// fx's timeouts; a component that fails while running shuts the application
// down with exit code 1, so a supervisor restarts it as it restarts a
// kubelet. Construction does no I/O: the agent makes its directories, dials
// the runtime and contacts the apiserver only when it starts.
package agent
