// Package pods is the node's pod lifecycle loop, the kubelet's syncLoop, pod
// workers and housekeeping: a Controller follows the merged pod updates of
// the sources (Sources, *podsource.Config), admits each new pod (the
// AdmitHandlers, GeneralPredicates first), runs one worker per pod that
// brings a Runtime (the CRI backend, or a pod-level backend through
// NewBackendRuntime) in line with the pod's spec and sets its status
// (podstatus.Interface), stops pods that are deleted, removed or finished,
// and removes what the runtime holds of pods no source knows.
//
// # Static pods
//
// Pods of any source but the API server (podsource.IsStaticPod: manifest
// directory, manifest URL, an embedder's source) are run by the node alone:
//
//   - they are admitted against Options.Node before the node is registered
//     too (the agent gives status.Reporter.NodeAnyWay, the kubelet's
//     getNodeAnyWay), so a node runs them with no API server at all;
//   - one static pod per namespace and name runs at a time: an edited
//     manifest is a new pod (new UID) under the old name, which starts only
//     once the old one's containers stopped, as the kubelet's
//     allowStaticPodStart;
//   - with Options.Mirrors (a MirrorClient, podsource/mirror's Client) each
//     sync of a running static pod creates or replaces its mirror pod, the
//     API object the cluster sees it by; an OpMirror update (a mirror pod
//     appeared, changed, is being deleted or went) syncs the static pods it
//     carries, so a deleted mirror pod comes back; every static pod is
//     synced once the node is first known (the kubelet's
//     fastStaticPodsRegistration); housekeeping deletes the mirror pods
//     whose static pod is gone and stopped. Without Mirrors (a standalone
//     node) no mirror pod is made.
//
// # The pod spec, field by field
//
// pods/fields.go says what the node does with every field of the pod spec,
// its containers and their security contexts: acted on (and where), refused
// at admission (and with which reason), or the business of the API server
// or the scheduler. A test walks the API types and fails for a field in no
// table. The admit handlers that refuse are the kubelet's: Sysctls
// (SysctlForbidden), GeneralPredicates, AppArmor, PodFeatures and
// DeclaredFeatures (PodFeatureUnsupported); spec.activeDeadlineSeconds
// fails a pod that runs past it (DeadlineExceeded). NodeDeclaredFeatures is
// what the node declares in status.declaredFeatures, the node features of
// k8s.io/component-helpers/nodedeclaredfeatures it implements; a test fails
// for a feature of that registry judged neither way.
//
// # In-place resize
//
// Options.Allocations (resources/allocation) records what the node
// allocated to each admitted pod. When a pod's spec asks for other
// resources (the resize subresource), its next sync admits the resize with
// the admit handlers against the other pods' allocations, as the kubelet's
// allocation manager: admitted, the spec becomes the allocation
// (ResizeStarted); refused, it is PodResizePending, Deferred with the
// refusal's message (retried at each sync and when another pod's resources
// are freed) or Infeasible. Pod-level resources (spec.resources) are
// resized the same way (InPlacePodLevelResourcesVerticalScaling).
// The Runtime is given the allocated pod, for its sync and its status
// (podstatus.GenerateOptions.ResizePending); a pod-level backend sees the
// allocation in the pod's containers' resources and reports
// PodResizeInProgress itself while it applies it.
//
// # Swapping pieces
//
// Without fx, build a Controller with New and call Run. With fx, Module
// provides the *Controller and the *Store from the graph (see Module). An
// embedder adds admission checks to AdmitHandlerGroup (AsAdmitHandler),
// runs pods on a backend of its own by providing a Runtime, wraps the
// mirror pod client by decorating MirrorClient, and tunes periods by
// decorating Options.
package pods
