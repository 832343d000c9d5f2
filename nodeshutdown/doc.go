// Package nodeshutdown is the kubelet's graceful node shutdown: when the
// node is about to shut down, the agent stops its pods in priority order
// within a grace period, so they end cleanly and their API objects say why.
//
// A Manager is configured as the kubelet is: shutdownGracePeriod and
// shutdownGracePeriodCriticalPods (Options.GracePeriod and
// GracePeriodCriticalPods) make two groups, regular pods (priority below
// 2000000000, system-cluster-critical) killed first with
// GracePeriod − GracePeriodCriticalPods, then critical pods with
// GracePeriodCriticalPods; shutdownGracePeriodByPodPriority
// (GracePeriodByPodPriority) gives any number of priority ranges instead,
// killed from the lowest up. Each pod gets its group's grace period, or its
// own terminationGracePeriodSeconds when shorter; the next group starts
// when the pods of the last one are stopped or its grace period is up.
// With no grace period set the Manager is disabled and watches nothing.
//
// When a shutdown is signalled the Manager:
//   - reports it in its Gate (Options.Gate; the Manager embeds it, and
//     admission and the Ready condition read it instead of the Manager,
//     which kills pods through the loop and syncs the reporter that read
//     it): ShutdownStatus returns ErrShuttingDown, which the agent
//     makes a health check of the Ready condition (Ready=False, reason
//     KubeletNotReady, message "node is shutting down"), and the Node
//     status is synced at once (Options.SyncNodeStatus); a NodeShutdown
//     event goes to the Node;
//   - rejects new pods: Admit returns reason NodeShutdown and message
//     "Pod was rejected as the node is shutting down.";
//   - kills the active pods through KillPod with the kubelet's final
//     status: phase Failed (unless Succeeded), reason Terminated, message
//     "Pod was terminated in response to imminent node shutdown." and a
//     DisruptionTarget condition with reason TerminationByKubelet;
//   - records the start and end in Options.StateFile and the gauges
//     kubelet_graceful_shutdown_start_time_seconds and
//     kubelet_graceful_shutdown_end_time_seconds.
//
// # Sources
//
// A Source tells the Manager the node shuts down. Two come with the
// package:
//   - LogindSource, the kubelet's: a systemd-logind "delay" inhibitor lock
//     taken over the D-Bus system bus, PrepareForShutdown(true) handled and
//     the lock released once the pods are stopped, PrepareForShutdown(false)
//     a cancellation (the node is Ready and admits pods again). When
//     logind's InhibitDelayMaxSec is shorter than the grace period it
//     writes the override the kubelet writes
//     (/etc/systemd/logind.conf.d/99-kubelet.conf) and reloads logind.
//   - SignalSource, for machines without logind (containers, other init
//     systems): the process receiving DefaultSignal (SIGPWR on Linux) is a
//     shutdown. An init system or an operator sends it before stopping the
//     node (`kill -PWR <agent pid>`), waits for the grace period, then
//     stops the agent with SIGTERM (which never kills pods). It is opt-in:
//     no signal is caught unless a SignalSource is among the Sources (the
//     agent adds one with --node-shutdown-signal), so a stray SIGPWR (a UPS
//     daemon's broadcast, say) does not kill the node's pods.
//
// # What an embedder can swap
//
// Options.Sources replaces the sources (or add to them with AsSource, with
// fx): a cloud's preemption notice, say, is a
// Source whose Watch calls handle(ctx, true). Handle is also callable
// directly. ActivePods and KillPod are funcs (the agent passes the pod
// store's Active and the pod loop's KillPod); Recorder, Clock and
// Registerer are optional.
//
// Module provides the *Manager from the Options in the graph and runs it;
// the agent's wiring (agent.NodeShutdown) adds the admit handler and the
// Ready health check.
package nodeshutdown
