// Package podsource merges the node's pod sources into one stream of pod
// updates with the kubelet's pod config semantics
// (k8s.io/kubernetes/pkg/kubelet/config).
//
// A Source (the API server in podsource/apiserver, a static manifest
// directory in podsource/file, a manifest URL in podsource/url, or an
// embedder's own) sends full snapshots of its pods. A Config keeps the
// latest snapshot of every source and turns each new one into Updates:
//
//   - OpAdd for a pod whose UID the source had not sent before; the Config
//     annotates it with kubernetes.io/config.source (the source's name) and
//     kubernetes.io/config.seen (when it was first seen);
//   - OpReconcile when only the status changed: spec, labels,
//     deletionTimestamp, deletionGracePeriodSeconds and the annotations
//     other than the Config's own are equal;
//   - OpDelete when one of those changed and deletionTimestamp is set (a
//     graceful deletion), OpUpdate when it is not;
//   - OpRemove for a pod missing from the new snapshot;
//   - nothing when nothing the agent acts on changed.
//
// Updates of one snapshot are delivered in the order REMOVE, ADD, UPDATE,
// DELETE, RECONCILE, MIRROR, and a source's first snapshot always yields an
// OpAdd (empty when the source has no pods). AllReady reports whether the consumer
// has received the first update of every source; the gate for removing pods
// nobody knows (the kubelet's SeenAllSources) is the consumer's own, set once
// it has handled those updates (pods.Controller.SourcesReady), since a pod
// received but not yet admitted is not gone.
// GetPodByUID returns the latest version of a pod, including its status as
// the source last saw it.
//
// # Static pods and mirror pods
//
// Pods from any source but the API server are static pods (IsStaticPod):
// the agent alone runs them, and shows them to the cluster through a mirror
// pod, a copy it creates in the API with the kubernetes.io/config.mirror
// annotation (podsource/mirror). The API server source delivers those
// mirror pods with the node's other pods; the Config never emits them as
// pods to run. It keeps them apart — MirrorPodFor, StaticPodFor and
// OrphanedMirrorPods read them — and, when a static pod's mirror pod
// appears, changes (other than in status), is being deleted or disappears,
// emits OpMirror with the static pod, so the consumer syncs it and creates
// the mirror pod again.
//
// SetDefaults applies the API server's pod defaults, which pods that do not
// come from the API server lack; podsource/manifest decodes, completes and
// validates static pod manifests for sources of static pods.
//
// # Swapping pieces
//
// Without fx, build the sources (e.g. apiserver.New), pass them in
// Options.Sources to New, call Run and consume Updates. With fx, Module
// provides the *Config and runs it; it merges every Source in the
// "pod_sources" value group (SourceGroup), so an embedder adds a source of
// its own next to the defaults with AsSource:
//
//	podsource.AsSource(newMySource)
//
// where newMySource returns a podsource.Source with a unique Name. Leaving
// podsource/apiserver.Module out of the graph removes the API server source
// (a standalone node running static pods only). The Config itself is
// replaced with fx.Decorate on *Config.
package podsource
