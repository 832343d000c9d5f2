// Package agent is nodekit's composition root: it turns a kubelet
// configuration into a running node agent. No pod, node or runtime logic
// lives here; every piece is another package's module, wired from the
// Config.
//
// Config holds a KubeletConfiguration (k8s.io/kubelet/config/v1beta1) plus
// the settings the kubelet takes only as flags; ParseFlags reads the
// kubelet's command line and --config file unchanged, with the kubelet's
// defaults and precedence (flags override the file), and logs each setting
// given that nodekit does not implement (implementedSettings in settings.go
// lists those it does). Config's methods
// (LeaseOptions, StatusOptions, SetterOptions, PodsOptions, RuntimeOptions,
// CgroupOptions, PodManagerOptions, StatsOptions, ...) translate it into
// each module's Options, so pieces can be wired without this package's
// modules, or without fx.
//
// Core is everything of a node agent but what runs its pods: apiserver
// clients (a rate-limited one, a heartbeat one for the Lease and node
// status, one for events), metrics, the node Lease, node registration and
// status, the node watch, the pod sources, the pod status manager, the pod
// lifecycle loop (pods.Module), the probe engine (Probes), the kubelet API
// on 10250 (NodeAPI: logs, exec, attach, port-forward, stats, metrics,
// configz, with TLS, authentication and authorization), the /healthz and
// /metrics server on the healthz port, and the graceful node shutdown
// (NodeShutdown: with shutdownGracePeriod set, pods stopped by priority
// when systemd-logind announces a shutdown or, opted in with
// --node-shutdown-signal, the agent receives SIGPWR). A
// runtime module completes it: CRI
// (containerd, CRI-O or runtime/fakecri: the CRI connection, cgroups, pod
// manager, PLEG, stats with the pods' volume usage, the volume manager
// (Volumes), image garbage collection and container log rotation
// (RuntimeGC), and the node-pressure eviction manager (Eviction: pressure
// conditions, eviction admission, unused containers and images reclaimed
// before pods are evicted through the pod loop)) or PodBackend(constructor)
// (a pods.PodBackend of the embedder's: a cloud service, VMs, a
// simulator). Module is Core + CRI; New and Run build it,
// NewWith and RunWith take another runtime module. Run is the whole main of
// examples/nodeagent; examples/podsim is a pod-level node in a few lines:
//
//	os.Exit(agent.RunWith(os.Args[1:], agent.PodBackend(newSimulator)))
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
// Everything in the graph, with fx options passed to New, NewWith, Run or
// RunWith:
//
//   - A value: fx.Decorate replaces what a provider returns, e.g. the Lease
//     options (func(lease.Options) lease.Options), the pods.Options, the
//     cgroup driver (func(cgroupdriver.Driver) cgroupdriver.Driver), the CRI
//     services (func(cri.RuntimeService) cri.RuntimeService), the clock or
//     the logger. fx.Replace swaps a value outright, e.g. *Clients to run on
//     other clientsets (agenttest does), or the ServiceLister, so that many
//     agents in one process share one informer on the cluster's Services
//     (NewServiceLister; e2e/bench's fleet does).
//   - Many-of-a-kind pieces, with the typed helpers: status.AsSetter (a node
//     status setter; one with the name of a default replaces it, a nil one
//     removes it), status.AsHealthCheck (gates Ready), podsource.AsSource (a
//     pod source; its pods are static pods, see examples/customsource),
//     pods.AsAdmitHandler (an admission check, by order), prober.AsHandler
//     (a probe kind's handler), volume.AsPlugin (a volume plugin; one with
//     a built-in plugin's Name replaces it), eviction.AsSignal (an eviction
//     signal), nodeshutdown.AsSource (a node shutdown signal),
//     server.AsRoute (a node API endpoint), pluginmanager.AsHandler (a
//     plugin registration handler). The manifest sources change by
//     decorating file.Options or url.Options; the volume manager's periods
//     or mounter by decorating volume.Options.
//
// Pass decorators at the top level (to New, Run, or fx.New beside Module),
// not inside an fx.Module of your own: fx applies a decorator only to the
// module it is declared in and that module's children, so one declared in
// a sibling module never reaches nodekit's.
//
// # Contracts
//
// Components start on fx's OnStart and stop on OnStop, each within fx's
// timeouts; a component that fails while running shuts the agent down with
// exit code 1, so a supervisor restarts it as it restarts a kubelet, and
// the agent's last log line says which component failed and why.
// Construction does no I/O: the agent makes its directories, dials the
// runtime and contacts the apiserver only when it starts. Every log line of
// an agent carries its node's name.
package agent
