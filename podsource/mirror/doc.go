// Package mirror creates and deletes mirror pods, the API objects through
// which the cluster sees a node's static pods (the kubelet's
// pkg/kubelet/pod/mirror_client.go and SyncPod's mirror reconciliation).
//
// A mirror pod is a copy of the static pod (same namespace and name, the
// generated <name>-<node>) with the kubernetes.io/config.mirror annotation
// set to the static pod's kubernetes.io/config.hash and a controller owner
// reference to the Node, which NodeRestriction requires of a node's pods.
// The API server gives it its own UID; the pod loop writes the static pod's
// status onto it (status/podstatus does, matching the hash).
//
// What the pod loop does with it:
//
//   - on every sync of a static pod that is not terminating: Sync(ctx,
//     pod, cfg.MirrorPodFor(pod), false) — Decide says Create when there is
//     no mirror pod, Recreate (delete with the UID precondition, then
//     create) when the mirror pod's hash differs or it is being deleted
//     (say, kubectl delete on it), None otherwise;
//   - on an OpMirror update from the podsource.Config: sync each static pod
//     it carries (their mirror pod appeared, changed, is being deleted or
//     is gone), so a deleted mirror pod comes back at once;
//   - in housekeeping, once the Config is AllReady: DeleteOrphans with
//     cfg.OrphanedMirrorPods(), skipping the mirror pods of static pods
//     still terminating;
//   - once the node is known (registered; NodeKnown turns true), sync the
//     static pods again, as the kubelet's fastStaticPodsRegistration does:
//     before, Create fails with ErrNodeUnknown.
//
// The mirror pods themselves never reach the loop as pods to run:
// podsource.Config keeps them apart.
//
// # Swapping pieces
//
// Without fx, build the Client with New. With fx, Module provides *Client
// from the mirror.Options in the graph; an embedder whose node has no API
// presence for static pods leaves it out (and skips Sync), or wraps it with
// fx.Decorate.
package mirror
