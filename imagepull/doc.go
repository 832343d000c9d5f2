// Package imagepull is the kubelet's image pull manager
// (KubeletEnsureSecretPulledImages, on by default in v1.37): an image the
// node pulled with a pod's credentials is used by another pod with
// imagePullPolicy IfNotPresent (or Never) only when that pod proves it may
// pull it; otherwise the pod pulls it again with its own credentials, and
// fails with ErrImagePull (ErrImageNeverPull under Never) when it has
// none that work.
//
// [Manager] keeps the kubelet's records, so an agent that takes a node over
// from a kubelet, or the other way round, keeps them: under the kubelet's
// root directory, image_manager/pulling holds an ImagePullIntent for each
// image being pulled, and image_manager/pulled an ImagePulledRecord for
// each image the node pulled (by the runtime's image ID), with the
// credentials each pull used, by image name without tag or digest: the
// coordinates of a pull secret (namespace, name, UID) and the SHA-256 of
// its credentials, a service account, or "accessible to every pod of the
// node" for a pull without credentials. The files are the kubelet's:
// JSON of k8s.io/kubelet/config/v1beta1 (v1alpha1 ones are read and
// rewritten), named sha256-<hex SHA-256 of the image or image ref>,
// written atomically, 0600 in 0700 directories, read through in-memory
// LRU caches sized from maxPods. An intent means "being pulled with
// credentials, no record yet": after a crash the image counts as pulled by
// the kubelet, and Init turns each left intent whose image the runtime
// has into a record without credentials, so every pod must prove access.
// A record that cannot be decoded is logged with its file name and proves
// nothing: the pod pulls. Records are per image ID, as the kubelet's: the
// same image content preloaded under one name and pulled with credentials
// under another counts as pulled, and a pod that uses it by the preloaded
// name, which no record lists, pulls it by that name.
//
// Which images need a proof is the policy
// (imagePullCredentialsVerificationPolicy): NeverVerify (none, the
// behaviour with the gate off, but records are still kept),
// NeverVerifyPreloadedImages (the default: images the node's records say
// the kubelet pulled; images found on the node, such as preloaded or
// side-loaded ones, are trusted), NeverVerifyAllowlistedImages (all but
// those in preloadedImagesVerificationAllowlist, names or "registry/path/*"
// prefixes, see [ValidateAllowlist]), AlwaysVerify (all).
//
// The runtime's image manager asks [Manager.MustAttemptImagePull] before it
// uses a present image and records each pull (RecordPullIntent, then
// RecordImagePulled with the credentials that worked, or
// RecordImagePullFailed): set runtime.PodManagerOptions.ImagePulls. The
// image garbage collector calls [Manager.PruneUnknownRecords] with the
// images left after each collection (runtime.ImageGCOptions.PostGC), so the
// record of a removed image goes with it. The agent's ImagePulls option
// wires both when the gate is on.
//
// nodekit has no image credential provider plugins, so its pulls use pull
// secrets or no credentials; records naming a service account (written by a
// kubelet with a credential provider) are kept and honoured, but no pod of
// a nodekit node ever presents a service account to match them. The
// package is tested with runtime/fakecri and in e2e against a loopback
// registry that wants credentials.
//
// [Module] provides a *Manager from the Options in the graph and opens the
// records on start; an embedder changes the policy with fx.Decorate of
// Options, or drops the check by leaving the Manager out of the pod
// manager's options.
package imagepull
