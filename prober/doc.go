// Package prober runs containers' liveness, readiness and startup probes and
// caches their results, as the kubelet's prober (k/k pkg/kubelet/prober and
// pkg/probe/{exec,http,tcp,grpc}, v1.37).
//
// # What it does
//
// A Manager keeps one logical worker per (pod, container, probe type) for
// the regular containers and the restartable init containers (sidecars) of
// the pods it is given (AddPod). Each run of a worker does what the
// kubelet's worker.doProbe does, in its order:
//
//   - It reads the pod's latest generated status (Options.PodStatus); no
//     status: nothing to do. A Failed or Succeeded pod: the worker stops.
//   - It finds the container's status (regular, then init containers); no
//     container ID yet: nothing to do.
//   - A new container ID drops the result of the previous instance and caches
//     the initial result: readiness Failure, liveness Success, startup
//     Unknown. A container that was already running 10 s before the Manager
//     was created (the agent restarted) gets no initial result, so the status
//     generator keeps what the pod's status said until the probe decides; a
//     sidecar already started then gets startup Success (the kubelet's
//     behaviour with ChangeContainerStatusOnKubeletRestart off, its v1.37
//     default). A new container also ends the hold below.
//   - On hold (after a liveness Failure or a startup result), nothing to do.
//   - A container not running gets Failure; a terminated one whose restart
//     rules and policies (container restartPolicyRules, restartPolicy, then
//     the pod's) do not restart it, and whose pod is not restarting all its
//     containers, stops the worker.
//   - A pod with a deletionTimestamp: liveness and startup cache Success
//     and stop (their results go with them); readiness keeps probing.
//   - Within initialDelaySeconds of the container's start, nothing to do.
//   - Until the container has Started, only the startup probe runs; after,
//     the startup probe idles (kept for the next instance).
//   - The handler of the probe's kind runs (see Handlers). An error is
//     retried up to three times in a row, then recorded as an Unhealthy
//     event and the run is forgotten. A Warning counts as Success (plus a
//     ProbeWarning event), Unknown as Failure.
//   - The result must repeat successThreshold (Success) or failureThreshold
//     (Failure) times in a row before it is cached, counted as the kubelet
//     counts: the run of equal results carries over to a new container
//     instance unless the worker was put on hold.
//   - A cached liveness Failure, or any cached startup result, puts the
//     worker on hold until a new container appears.
//
// Probe fields left zero get the API defaults (timeout 1 s, period 10 s,
// success threshold 1, failure threshold 3).
//
// # Scheduling
//
// Runs follow the kubelet's ticker: the first run is at once, or, when the
// Manager was created less than a period ago, after a random part of the
// period so probes do not stampede after a restart; the next runs are on
// the period's grid from there. A run that outlasts one or more ticks is
// followed at once by one more run (a ticker keeps one tick), then the grid
// again. Runs of one worker never overlap. AddPod triggers an immediate
// readiness run (and restarts that worker's grid from it) for each running,
// started container of the pod whose readiness is not Success, as the
// kubelet's UpdatePodStatus does on each sync.
//
// Unlike the kubelet, which has a goroutine per worker, one scheduler
// goroutine keeps the workers in a heap ordered by their next run and
// sleeps on one timer; due runs go to a pool of reusable goroutines, up to
// Options.Parallelism (64) runs at once. A run beyond that waits for one to
// finish, but never longer than 100 ms: a run that has lasted 100 ms no
// longer counts, so a slow or hung probe delays other runs by 100 ms at
// most, and a burst of due runs does not start a goroutine each. The
// goroutines running probes are never more than the workers; up to
// Options.Parallelism stay parked between runs, and a quarter of those
// beyond are retired every second. A run may start up to 1 ms late (so one
// wake-up starts several), never early. Stopping a worker (RemovePod,
// CleanupPods, StopLivenessAndStartup) cancels its run in flight, whose
// result is discarded; the kubelet lets it finish.
//
// # Results and updates
//
// Results are cached by probe type and runtime container ID (the part of
// v1.ContainerStatus.ContainerID after "://"): Liveness, Readiness and
// Startup return the verdict (podstate.ProbeUnknown without one); Result,
// Ready and Started also say whether there is one, which the status
// generator needs (a cached startup Unknown means "not started", no result
// means "decide from the previous status"). A stopped worker's results are
// dropped. Updates delivers the UID of a pod whose cached results changed:
// every readiness and startup change, and liveness changes to Failure (the
// kubelet's sync loop acts on no other). A change is what a run leaves
// behind, so a worker that AddPod starts for a container that exited for
// good, and that sets its initial result and stops in its first run, does
// not make the loop sync the pod again (and AddPod start it again). A pod
// is queued at most once until it is received, so probes never wait on the
// consumer.
//
// # Handlers
//
// A Handler runs one kind of probe action (KindExec, KindHTTPGet,
// KindTCPSocket, KindGRPC). The defaults behave as the kubelet's:
//
//   - exec (NewExecHandler): ExecSync through Options.Exec with the
//     probe's timeout; $(VAR) in the command expands to the container's
//     literal env values; exit 0 Success, other exit codes Failure with
//     stdout+stderr (10 KiB at most) as the message, a timeout Failure.
//   - httpGet (NewHTTPHandler): GET with the pod IP as default host, the
//     scheme, path, port by number or by the container's port name, the
//     probe's headers (Host sets the request's host), User-Agent
//     "kube-probe/1.37" and Accept "*/*" unless set (an empty Accept removes
//     it); 200–399 Success, a redirect to another host Warning, same-host
//     redirects followed up to 10 times; at most 10 KiB of the body read;
//     failure messages without the body; TLS unverified; no keep-alives, no
//     proxy, no compression.
//   - tcpSocket (NewTCPHandler): a connection opened within the timeout and
//     closed at once; the pod IP as default host.
//   - grpc (NewGRPCHandler): grpc.health.v1.Health/Check with the probe's
//     service on the pod IP, without TLS, user agent kube-probe/1.37; any
//     error or a status other than SERVING is Failure.
//
// The alpha H2CContainerProbe (httpGet protocol HTTP2) and
// GRPCContainerProbeTLS (grpc mode TLS) gates are off by default in v1.37
// and not supported: such probes run as on a kubelet with the gates off,
// and the worker logs so once.
//
// # Events and metrics
//
// Events, on the container's reference (spec.containers{name} or
// spec.initContainers{name}) through Options.Recorder: Warning Unhealthy
// "<Type> probe failed: <output>" and "<Type> probe errored and resulted in
// <result> state: <error>", Warning ProbeWarning "<Type> probe warning:
// <output>". Restarting a container after a liveness or startup Failure is
// the runtime's job (it reads Liveness and Startup); readiness feeds the pod
// status generator.
//
// Metrics, through Options.Registerer (the kubelet serves them on
// /metrics/probes): prober_probe_total{probe_type, result, container, pod,
// namespace, pod_uid} (probe_type Liveness/Readiness/Startup; result
// successful/failed/unknown) and the histogram
// prober_probe_duration_seconds{probe_type, container, pod, namespace} of
// runs that did not fail. A worker's series go when it stops.
//
// # Wiring
//
// The pod lifecycle loop calls AddPod on every sync of a pod that should
// run, after the pod's status was set; StopLivenessAndStartup when it starts
// terminating a pod; RemovePod once the pod's containers stopped;
// CleanupPods from housekeeping with the UIDs of the pods that may still run;
// and it syncs the pod of every UID received from Updates. The status
// generator takes Ready and Started (podstatus.ProbeResultFunc); the runtime
// takes Liveness and Startup. Run runs the probes from start to stop.
//
// With fx, Module provides the *Manager and runs it. It takes from the
// graph a PodStatusFunc (or Options.PodStatus), and optionally Options, an
// ExecRunner or cri-api's RuntimeService for exec probes, handlers in the
// group HandlerGroup ("probe_handlers", added with AsHandler), a record.EventRecorder, a
// clock.Clock, and a prometheus.Registerer (named MetricsRegistererName
// first, else the unnamed one).
//
// # What an embedder can swap
//
//   - A probe kind's handler: a Handler whose Kind is that of a default
//     replaces the default (Options.Handlers, or AsHandler with fx); a new kind is added the same way. Two handlers
//     of one kind are an error.
//   - How exec commands reach containers: Options.Exec (any ExecRunner).
//   - Where pod status comes from: Options.PodStatus.
//   - The clock, the event recorder and the metrics registry.
//   - The whole prober: the loop, the status generator and the runtime
//     consume it through small funcs and interfaces (AddPod, RemovePod...,
//     func(containerID) (success, known bool), Liveness and Startup), so
//     another implementation can stand in without this package.
//
// For example, a pod-level backend that runs its containers in-process
// answers exec probes itself (see Example_module):
//
//	prober.AsHandler(newInProcessExec)
package prober
